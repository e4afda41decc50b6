"""The exactness argument on a real position, as HTML: why the output is exactly p. No gradio.

At a rejected position every token x can come out two ways, drafted and kept (min(p, q)) or
drawn from the residual after a rejection ((1 − β)·p′); the view draws both paths and their sum
over p with the numbers the round used (its :class:`~specchat.analysis.trace.ProofTrace`).
The token inspector (:mod:`specchat.ui.html.inspector`) shows it under a resampled token.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.analysis.trace import ProofTrace, RoundTrace
from specchat.ui.html.render import KIND_COLORS
from specchat.ui.html.rounds import MAX_BAR_ROWS, RESIDUAL_COLOR, prob_label, token_chip, token_label


@dataclass(frozen=True)
class ProofRow:
    """One token x of the proof view: the two paths by which x can be emitted, and p(x).

    ``accepted_path`` = min(p(x), q(x)) (x drafted and kept), ``residual_path`` = (1 − β)·p′(x)
    (a rejection, then x drawn from the residual); ``total`` is their sum, which must equal ``p``.
    """

    token_id: int | None  # None: every token not listed, summed
    p: float
    q: float | None
    accepted_path: float
    residual_path: float

    @property
    def total(self) -> float:
        return self.accepted_path + self.residual_path


def proof_rows(proof: ProofTrace) -> list[ProofRow]:
    """The proof view's rows: each listed token, then the rest summed (when it has any mass).

    P(emit x) = q(x)·min(1, p(x)/q(x)) + (1 − β)·p′(x) = min(p(x), q(x)) + (1 − β)·p′(x), which
    is p(x) because (1 − β)·p′(x) = max(0, p(x) − q(x)) (Leviathan et al. 2023, Appendix A.1)."""
    scale = 1.0 - proof.beta
    rows = [ProofRow(t, p, q, min(p, q), scale * r) for t, p, q, r in proof.rows]
    p_rest, min_rest, r_rest = proof.other
    if p_rest > 1e-9 or min_rest > 1e-9 or r_rest > 1e-9:
        rows.append(ProofRow(None, p_rest, None, min_rest, scale * r_rest))
    return rows


def proof_html(trace: RoundTrace, proof: ProofTrace, drawn: int | None, rejected: int | None = None) -> str:
    """Three bar groups over the tokens of a rejected position: min(p, q) (the accepted path),
    (1 − β)·p′ (the residual path) and their sum, drawn over p (an outline): the exactness
    argument on the numbers this round used. ``drawn`` (the resampled token) is marked; it and
    ``rejected`` (the rejected draft) are always shown; tokens beyond the first MAX_BAR_ROWS are
    summed into "the rest" with every unlisted token, so the shown rows add up to 1."""
    rows = proof_rows(proof)
    listed = [r for r in rows if r.token_id is not None]
    keep = {r.token_id for r in listed[:MAX_BAR_ROWS]} | {t for t in (drawn, rejected) if t is not None}
    shown = [r for r in listed if r.token_id in keep]
    hidden = [r for r in rows if r.token_id is None or r.token_id not in keep]
    if hidden:
        shown.append(ProofRow(None, sum(r.p for r in hidden), None, sum(r.accepted_path for r in hidden),
                              sum(r.residual_path for r in hidden)))
    top = max((max(r.p, r.total) for r in shown), default=1.0) or 1.0
    accepted_color, residual_color = KIND_COLORS["accepted"], RESIDUAL_COLOR

    def bar(value: float, color: str) -> str:
        return (f'<td class="spec-bar-cell"><div class="spec-bar" style="width:{value / top * 100:.2f}%;'
                f'background:{color}"></div><span class="spec-bar-val">{prob_label(value)}</span></td>')

    out = ['<table class="spec-bars spec-proof-bars"><tr><th></th><th>min(p, q)<br><span>accepted path</span></th>'
           '<th>(1 − β)·p′<br><span>residual path</span></th><th>sum, over p (outline)</th></tr>']
    for r in shown:
        label = "the rest" if r.token_id is None else token_label(trace.token_texts.get(r.token_id, ""))
        marked = ' class="spec-bar-mark"' if r.token_id is not None and r.token_id == drawn else ""
        a, b = r.accepted_path / top * 100, r.residual_path / top * 100
        out.append(
            f'<tr{marked}><td class="spec-bar-label">{label}</td>{bar(r.accepted_path, accepted_color)}'
            f'{bar(r.residual_path, residual_color)}'
            f'<td class="spec-bar-cell"><div class="spec-sumwrap"><div class="spec-stack">'
            f'<div style="width:{a:.2f}%;background:{accepted_color}"></div>'
            f'<div style="width:{b:.2f}%;background:{residual_color}"></div></div>'
            f'<div class="spec-pline" style="width:{r.p / top * 100:.2f}%"></div></div>'
            f'<span class="spec-bar-val">{prob_label(r.total)} = p {prob_label(r.p)}</span></td></tr>'
        )
    out.append("</table>")
    gap = max((abs(r.total - r.p) for r in rows), default=0.0)
    precision = ("float precision" if gap < 1e-4 else
                 "more than float error: these numbers do not add up, so the recorded proof is damaged")
    example = ""
    x = next((r for r in rows if r.token_id == drawn), None)
    if x is not None:
        example = (f'<div>For the drawn token {token_chip(trace, x.token_id, "tok-resampled")}: '
                   f"min({prob_label(x.p)}, {prob_label(x.q)}) + {1 - proof.beta:.3f} × p′ "
                   f"= {x.accepted_path:.4f} + {x.residual_path:.4f} = <b>{x.total:.4f}</b>, and p(x) = <b>{x.p:.4f}</b>.</div>")
    return (
        '<div class="spec-proof">'
        '<div class="spec-sub">Why the output is exactly p: every token x can come out of this position two ways</div>'
        '<div class="spec-formula">P(emit x) = q(x)·min(1, p(x)/q(x)) + (1 − β)·p′(x) '
        "= min(p(x), q(x)) + (1 − β)·p′(x) = p(x)</div>"
        f"<div>β = Σ<sub>x</sub> min(p(x), q(x)) = <b>{proof.beta:.4f}</b> is the chance that this position's draft "
        f"is accepted, so a rejection happens with probability 1 − β = {1 - proof.beta:.4f}; the residual "
        "p′ = norm(max(0, p − q)) puts back exactly the mass that q under-proposed: "
        "(1 − β)·p′(x) = max(0, p(x) − q(x)).</div>"
        f"{example}"
        + "".join(out)
        + f'<div class="spec-muted">Numbers measured in this round (p and q as used, the residual the engine '
        f"sampled from); bars scaled to the largest p shown. Largest |sum − p| over all {len(rows)} rows: "
        f"{gap:.1e} ({precision}).</div></div>"
    )
