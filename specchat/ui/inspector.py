"""Inside a round, as HTML: the token inspector, the round timeline and the race. No gradio.

Everything is rendered from a reply's events (each RoundEvent carrying its
:class:`~specchat.analysis.trace.RoundTrace`), live or read back from a trace file, so a recorded reply
looks the same as the live one. Tokens carry (reply R, its I-th
TokenEvent) as the class ``tref-R-I`` and rounds as ``rref-R-K``; the page's click hook (see
``app.py``) sends them back to select what was clicked.

The acceptance test shown is Leviathan et al. 2023, Algorithm 1: the drafted token x is kept
when u < min(1, p(x)/q(x)) with u ~ U[0, 1) (computed as u·q < p); after the first rejection
the replacement is drawn from the residual norm(max(0, p − q)); after full acceptance a bonus
token is drawn from p at the extra position.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from specchat.analysis.trace import ProofTrace, RoundTrace, TopList
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent
from specchat.ui.render import KIND_COLORS, escape_text, ref_class_of

TARGET_COLOR = "#1c7ed6"  # p bars
DRAFT_COLOR = "#f08c00"  # q bars
RESIDUAL_COLOR = KIND_COLORS["resampled"]
MAX_BAR_ROWS = 10


@dataclass
class ReplyRounds:
    """A reply's tokens and rounds, indexed for the views.

    Attributes:
        tokens: the reply's TokenEvents, in order (index I of the class ``tref-R-I``).
        rounds: the RoundEvents by round index.
        first_token: round index → index in ``tokens`` of its first committed token.
        done: the DoneEvent, once there is one.
    """

    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: dict[int, RoundEvent] = field(default_factory=dict)
    first_token: dict[int, int] = field(default_factory=dict)
    done: DoneEvent | None = None

    @classmethod
    def of(cls, events: list[Any]) -> ReplyRounds:
        out = cls()
        for e in events:
            out.add(e)
        return out

    def add(self, e: Any) -> None:
        if isinstance(e, TokenEvent):
            self.first_token.setdefault(e.round_index, len(self.tokens))
            self.tokens.append(e)
        elif isinstance(e, RoundEvent):
            self.rounds[e.round_index] = e
        elif isinstance(e, DoneEvent):
            self.done = e

    @property
    def traced(self) -> bool:
        return any(r.trace is not None for r in self.rounds.values())


# ---- small pieces ----------------------------------------------------------------------------------
def _text(s: str) -> str:
    """A token's text for a label: escaped, with whitespace made visible."""
    shown = s.replace("\n", "↵").replace("\t", "⇥")
    if shown.strip() == "":
        shown = shown.replace(" ", "␣") or "∅"
    return html.escape(shown)


def _prob(x: float | None) -> str:
    if x is None:
        return "–"
    if x == 0:
        return "0"
    if x >= 0.01:
        return f"{x:.2f}"
    return f"{x:.1e}"


def _ratio(p: float, q: float) -> float:
    """min(1, p/q), with q = 0 giving 1 (never drafted in practice)."""
    return 1.0 if q <= 0 else min(1.0, p / q)


def token_chip(trace: RoundTrace, token_id: int, cls: str, *, ref: str | None = None, title: str = "") -> str:
    ref_class = f" {ref_class_of(ref)}" if ref else ""
    tip = f' title="{html.escape(title)}"' if title else ""
    return f'<span class="tok {cls}{ref_class}"{tip}>{_text(trace.token_texts.get(token_id, ""))}</span>'


def _bars(rows: list[tuple[str, list[tuple[float | None, str]]]], *, mark: str | None = None) -> str:
    """A little bar table: each row a token label and one or more (value, color) bars."""
    out = ['<table class="spec-bars">']
    for label, bars in rows:
        marked = ' class="spec-bar-mark"' if mark is not None and label == mark else ""
        cells = []
        for value, color in bars:
            width = 0.0 if value is None else max(value * 100, 0.0)
            cells.append(
                f'<td class="spec-bar-cell"><div class="spec-bar" style="width:{width:.1f}%;background:{color}"></div>'
                f'<span class="spec-bar-val">{_prob(value)}</span></td>'
            )
        out.append(f"<tr{marked}><td class=\"spec-bar-label\">{label}</td>{''.join(cells)}</tr>")
    out.append("</table>")
    return "".join(out)


def _pq_rows(
    trace: RoundTrace, p_top: TopList | None, q_top: TopList | None, must: int | None = None
) -> list[tuple[str, list]]:
    """Rows for the union of p's and q's top lists (p's order first), at most MAX_BAR_ROWS, always
    including ``must`` (the token in question). A value outside its list's top k is unknown and
    drawn empty ("–")."""
    p_map = dict(p_top or ())
    q_map = dict(q_top or ())
    ids: list[int] = []
    for t, _ in list(p_top or ()) + list(q_top or ()):
        if t not in ids:
            ids.append(t)
    ids = ids[:MAX_BAR_ROWS]
    if must is not None and must not in ids:
        ids = ids[: MAX_BAR_ROWS - 1] + [must]
    rows = []
    for t in ids:
        bars = [(p_map.get(t), TARGET_COLOR)]
        if q_top is not None:
            bars.append((q_map.get(t), DRAFT_COLOR))
        rows.append((_text(trace.token_texts.get(t, "")), bars))
    return rows


def _pq_panel(trace: RoundTrace, i: int, *, marked: int | None) -> str:
    """p and q at position i as side-by-side bars, as used and raw."""
    pos = trace.positions[i]
    mark = _text(trace.token_texts.get(marked, "")) if marked is not None else None
    has_q = pos.draft_top is not None
    legend = (f'<span class="spec-key" style="background:{TARGET_COLOR}"></span> p (target)'
              + (f' <span class="spec-key" style="background:{DRAFT_COLOR}"></span> q (drafter)' if has_q else ""))
    raw_q = pos.draft_top_raw if has_q else None
    raw_note = "" if (raw_q is not None or not has_q) else (
        '<div class="spec-muted">the lookup has no model: q is one-hot at the copied token</div>')
    used = _bars(_pq_rows(trace, pos.target_top, pos.draft_top, marked), mark=mark)
    raw = _bars(_pq_rows(trace, pos.target_top_raw, raw_q if raw_q is not None else None, marked), mark=mark)
    return (
        f'<div class="spec-legend-small">{legend}</div>'
        '<div class="spec-pq">'
        f'<div><div class="spec-sub">as used (after temperature, top-k, top-p)</div>{used}</div>'
        f'<div><div class="spec-sub">raw (softmax of the logits, T = 1)</div>{raw}{raw_note}</div>'
        "</div>"
    )


def _decision(p: float, q: float, u: float, accepted: bool) -> str:
    """The draw u against min(1, p/q) on a [0, 1] line: kept when u falls in the green part."""
    r = _ratio(p, q)
    verdict = "accepted" if accepted else "rejected"
    color = KIND_COLORS["accepted"] if accepted else KIND_COLORS["resampled"]
    return (
        '<div class="spec-decision">'
        f'<div>p(x) = {_prob(p)}, q(x) = {_prob(q)} → <b>min(1, p/q) = {r:.3f}</b>; the draw <b>u = {u:.3f}</b> '
        f'{"&lt;" if accepted else "≥"} {r:.3f}, so the draft was <b style="color:{color}">{verdict}</b>.</div>'
        f'<div class="spec-uline"><div class="spec-ukeep" style="width:{r * 100:.2f}%"></div>'
        f'<div class="spec-umark" style="left:{u * 100:.2f}%"><span>u</span></div></div>'
        '<div class="spec-uaxis"><span>0</span><span>keep if u lands here (probability min(1, p/q))</span><span>1</span></div>'
        "</div>"
    )


# ---- the exactness argument on a real position ----------------------------------------------------
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
                f'background:{color}"></div><span class="spec-bar-val">{_prob(value)}</span></td>')

    out = ['<table class="spec-bars spec-proof-bars"><tr><th></th><th>min(p, q)<br><span>accepted path</span></th>'
           '<th>(1 − β)·p′<br><span>residual path</span></th><th>sum, over p (outline)</th></tr>']
    for r in shown:
        label = "the rest" if r.token_id is None else _text(trace.token_texts.get(r.token_id, ""))
        marked = ' class="spec-bar-mark"' if r.token_id is not None and r.token_id == drawn else ""
        a, b = r.accepted_path / top * 100, r.residual_path / top * 100
        out.append(
            f'<tr{marked}><td class="spec-bar-label">{label}</td>{bar(r.accepted_path, accepted_color)}'
            f'{bar(r.residual_path, residual_color)}'
            f'<td class="spec-bar-cell"><div class="spec-sumwrap"><div class="spec-stack">'
            f'<div style="width:{a:.2f}%;background:{accepted_color}"></div>'
            f'<div style="width:{b:.2f}%;background:{residual_color}"></div></div>'
            f'<div class="spec-pline" style="width:{r.p / top * 100:.2f}%"></div></div>'
            f'<span class="spec-bar-val">{_prob(r.total)} = p {_prob(r.p)}</span></td></tr>'
        )
    out.append("</table>")
    gap = max((abs(r.total - r.p) for r in rows), default=0.0)
    precision = ("float precision" if gap < 1e-4 else
                 "more than float error: these numbers do not add up, so the recorded proof is damaged")
    example = ""
    x = next((r for r in rows if r.token_id == drawn), None)
    if x is not None:
        example = (f'<div>For the drawn token {token_chip(trace, x.token_id, "tok-resampled")}: '
                   f"min({_prob(x.p)}, {_prob(x.q)}) + {1 - proof.beta:.3f} × p′ "
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


# ---- the inspector ---------------------------------------------------------------------------------
def inspector_html(reply_number: int, rr: ReplyRounds, token_index: int | None, *, temperature: float = 0.0) -> str:
    """The token inspector for token ``token_index`` of reply ``reply_number`` (its round's
    whole draft, p and q bars raw and as used, min(1, p/q) against u, the residual of a
    resampled token, a bonus token's p, an n-gram draft's source). A prompt to click a token
    when nothing is selected; a note when the reply was not traced."""
    if token_index is None or not 0 <= token_index < len(rr.tokens):
        return ('<div class="spec-inspector spec-muted">Click any token of a reply to look inside its round: '
                "the whole draft, p and q, the random draw that kept or rejected it.</div>")
    tok = rr.tokens[token_index]
    rnd = rr.rounds.get(tok.round_index)
    if rnd is None:
        return '<div class="spec-inspector spec-muted">This token\'s round has not finished yet.</div>'
    tr = rnd.trace
    if tr is None:
        return ('<div class="spec-inspector spec-muted">This reply was made without a trace, so there is nothing '
                "recorded inside its rounds.</div>")
    first = rr.first_token.get(tok.round_index, token_index)
    ref = lambda pos: f"{reply_number}:{first + pos}"  # noqa: E731
    kind = "target" if tok.num_drafted == 0 else tok.kind.value
    kind_words = {
        "accepted": f"accepted draft (draft {tok.position + 1} of {len(tr.drafted)})",
        "resampled": f"resampled after draft {tok.position + 1} of {len(tr.drafted)} was rejected",
        "bonus": ("bonus token after the draft was accepted" if len(tr.drafted) == 1
                  else f"bonus token after all {len(tr.drafted)} drafts were accepted"),
        "target": "target-only round: nothing was drafted" + (" (a timing round)" if rnd.timing else ""),
    }[kind]
    head = (
        f'<div class="spec-insp-head"><span class="tok tok-{kind}">{_text(tok.text or tr.token_texts.get(tok.token_id, ""))}</span> '
        f"reply #{reply_number} · round {tok.round_index + 1} · {kind_words}</div>"
    )
    # the round's whole draft
    rejected_at = tr.rejected_index
    chips = []
    for i, d in enumerate(tr.drafted):
        if d.accepted is None:
            cls, title = "tok-unjudged", "never judged: it came after the rejection"
        elif d.accepted:
            cls, title = "tok-accepted", f"accepted: u={d.u:.3f} < min(1, p/q)={_ratio(d.p, d.q):.3f}"
        else:
            cls, title = "tok-rejected", f"rejected: u={d.u:.3f} ≥ min(1, p/q)={_ratio(d.p, d.q):.3f}"
        committed = i < len(tr.committed) and d.accepted
        sel = " spec-sel" if committed and i == tok.position else ""
        chips.append(token_chip(tr, d.token_id, cls + sel, ref=ref(i) if committed else None, title=title))
    n_acc = sum(1 for d in tr.drafted if d.accepted) if rejected_at is None else rejected_at
    next_pos = n_acc
    if next_pos < len(tr.committed):
        nk = "target" if not tr.drafted else tr.next_kind
        sel = " spec-sel" if tok.position == next_pos else ""
        chips.append('<span class="spec-arrow">→</span>'
                     + token_chip(tr, tr.next_token_id, f"tok-{nk}{sel}", ref=ref(next_pos), title=tr.next_kind))
    times = ""
    if tr.draft_step_ms:
        times = " · draft steps " + ", ".join(f"{t:.0f}" for t in tr.draft_step_ms) + " ms"
    draft_line = (
        f'<div class="spec-round-draft"><span class="spec-sub">the round\'s draft</span> {"".join(chips) or "<i>no draft</i>"}'
        f'<div class="spec-muted">γ = {rnd.num_speculative_tokens}, drafted {len(tr.drafted)}, '
        f"committed {rnd.num_committed}{times} · verify {rnd.verify_ms:.0f} ms</div></div>"
    )
    # the clicked position
    pos = tok.position
    body = []
    if kind == "accepted":
        d = tr.drafted[pos]
        if d.u is not None:
            body.append(_decision(d.p, d.q, d.u, True))
        body.append(_pq_panel(tr, pos, marked=tok.token_id))
    elif kind == "resampled":
        d = tr.drafted[pos]
        body.append(f'<div class="spec-sub">the rejected draft {token_chip(tr, d.token_id, "tok-rejected")}</div>')
        if d.u is not None:
            body.append(_decision(d.p, d.q, d.u, False))
        body.append(_pq_panel(tr, pos, marked=d.token_id))
        res = tr.positions[pos].residual_top
        if res is not None:
            rows = [(_text(tr.token_texts.get(t, "")), [(pr, RESIDUAL_COLOR)]) for t, pr in res]
            if tok.token_id not in dict(res):  # drawn from the tail beyond the top k
                rows.append((_text(tr.token_texts.get(tok.token_id, "")), [(None, RESIDUAL_COLOR)]))
            body.append(
                '<div class="spec-residual">'
                f'<div class="spec-sub">the residual norm(max(0, p − q)) it was drawn from: '
                f'{token_chip(tr, tok.token_id, "tok-resampled")} was drawn (marked)</div>'
                + _bars(rows, mark=_text(tr.token_texts.get(tok.token_id, "")))
                + '<div class="spec-muted">mass where q ≥ p is removed: the accepted path already covers it; '
                "this is what makes the output exactly p.</div></div>"
            )
        proof = tr.positions[pos].proof
        if proof is not None:
            body.append(proof_html(tr, proof, tok.token_id, rejected=d.token_id))
    else:  # bonus or target-only: drawn from p at the extra position
        what = "the extra position" if kind == "bonus" else "this step"
        body.append(f'<div class="spec-sub">drawn from the target\'s p at {what} (the drawn token is marked)</div>')
        body.append(_pq_panel(tr, pos, marked=tok.token_id))
    if temperature == 0 and kind != "target":
        body.append('<div class="spec-muted">At temperature 0, p and q as used are one-hot at each model\'s argmax; '
                    "the raw lists show how sure each model was.</div>")
    # n-gram source
    source = ""
    if tr.source_text is not None:
        before, matched, copied, after = (escape_text(s) for s in tr.source_text)
        where = "the prompt"
        if tr.num_prompt_tokens is not None and tr.copy_start is not None and tr.copy_start >= tr.num_prompt_tokens:
            where = "this reply (highlighted above)"
        source = (
            f'<div class="spec-source"><div class="spec-sub">copied by the lookup from earlier text in {where}: '
            f"the last {tr.match_len} token(s) matched <mark class=\"spec-match\">this</mark>, so it proposed "
            f'what followed it, <mark class="spec-copy">this</mark></div>'
            f'<div class="spec-text spec-source-text">…{before}<mark class="spec-match">{matched}</mark>'
            f'<mark class="spec-copy">{copied}</mark>{after}…</div></div>'
        )
    style = _highlight_style(reply_number, token_index, tr, rr)
    return f'<div class="spec-inspector">{style}{head}{draft_line}{"".join(body)}{source}</div>'


def _highlight_style(reply_number: int, token_index: int, tr: RoundTrace, rr: ReplyRounds) -> str:
    """A <style> that marks the selected token in the chat and, for an n-gram draft copied from
    the reply itself, the tokens it was copied from."""
    rules = [f'#spec-chat .tref-{reply_number}-{token_index} {{ outline: 2px solid #1c7ed6; outline-offset: 1px; }}']
    if tr.copy_start is not None and tr.num_prompt_tokens is not None and tr.copy_start >= tr.num_prompt_tokens:
        start = tr.copy_start - tr.num_prompt_tokens
        m = tr.match_len or 0
        n = len(tr.drafted)
        for i in range(max(0, start - m), min(start + n, len(rr.tokens))):
            color = "rgba(250, 176, 5, 0.55)" if i < start else "rgba(21, 170, 191, 0.45)"
            rules.append(f'#spec-chat .tref-{reply_number}-{i} {{ background: {color} !important; }}')
    return "<style>" + "\n".join(rules) + "</style>"


# ---- the timeline ----------------------------------------------------------------------------------
def timeline_html(reply_number: int, rr: ReplyRounds, *, selected_round: int | None = None, max_rounds: int = 400) -> str:
    """One bar per round on a shared millisecond axis: each draft step, then the verify pass;
    after it the tokens the round committed and where it stopped. Rows carry
    the class ``rref-R-K`` (a click selects the round in the inspector)."""
    rounds = [rr.rounds[k] for k in sorted(rr.rounds)]
    if not rounds:
        return '<div class="spec-timeline spec-muted">The timeline fills in as a reply streams: one bar per round.</div>'
    scale = max((r.draft_ms + r.verify_ms) for r in rounds) or 1.0
    draft_total = sum(r.draft_ms for r in rounds)
    verify_total = sum(r.verify_ms for r in rounds)
    wasted = sum(len(r.trace.drafted) - r.num_accepted for r in rounds if r.trace is not None)
    drafted = sum(len(r.trace.drafted) for r in rounds if r.trace is not None)
    total = draft_total + verify_total
    summary = (
        f'<div class="spec-tl-summary">reply #{reply_number}: {len(rounds)} rounds · drafting {draft_total / 1000:.1f} s '
        f"({100 * draft_total / total:.0f} %) · verifying {verify_total / 1000:.1f} s ({100 * verify_total / total:.0f} %)"
        + (f" · {wasted} of {drafted} drafted tokens thrown away" if drafted else "")
        + f'</div><div class="spec-legend-small"><span class="spec-key" style="background:{DRAFT_COLOR}"></span> draft step '
        f'<span class="spec-key" style="background:{TARGET_COLOR}"></span> verify pass (one target forward) · '
        f"full width = {scale:.0f} ms · click a round to inspect it</div>"
    ) if total > 0 else ""
    rows = []
    for r in rounds[:max_rounds]:
        tr = r.trace
        steps = list(tr.draft_step_ms) if tr is not None and tr.draft_step_ms else ([r.draft_ms] if r.draft_ms >= 0.5 else [])
        segs = "".join(
            f'<div class="spec-seg" style="width:{100 * t / scale:.2f}%;background:{DRAFT_COLOR}" '
            f'title="draft step {j + 1}: {t:.1f} ms"></div>'
            for j, t in enumerate(steps)
        )
        segs += (f'<div class="spec-seg" style="width:{100 * r.verify_ms / scale:.2f}%;background:{TARGET_COLOR}" '
                 f'title="verify {r.num_drafted + 1} position(s): {r.verify_ms:.1f} ms"></div>')
        first = rr.first_token.get(r.round_index)
        toks = ""
        if first is not None:
            toks = "".join(
                f'<span class="tok tok-{"target" if t.num_drafted == 0 else t.kind.value}">{_text(t.text)}</span>'
                for t in rr.tokens[first: first + r.num_committed]
            )
        if r.num_drafted == 0:
            end = "timing round" if r.timing else "no draft"
        elif r.num_accepted == r.num_drafted:
            end = f"all {r.num_drafted} accepted"
        else:
            end = f"stopped at draft {r.num_accepted + 1}/{r.num_drafted}"
        sel = " spec-tl-sel" if r.round_index == selected_round else ""
        rows.append(
            f'<div class="spec-tl-row{sel} rref-{reply_number}-{r.round_index}">'
            f'<span class="spec-tl-k">{r.round_index + 1}</span><div class="spec-tl-bar">{segs}</div>'
            f'<span class="spec-tl-ms">{r.draft_ms + r.verify_ms:.0f} ms</span>'
            f'<span class="spec-tl-end">{end}</span><span class="spec-tl-toks">{toks}</span></div>'
        )
    more = f'<div class="spec-muted">… {len(rounds) - max_rounds} more rounds</div>' if len(rounds) > max_rounds else ""
    return f'<div class="spec-timeline">{summary}<div class="spec-tl-rows">{"".join(rows)}</div>{more}</div>'


# ---- the race --------------------------------------------------------------------------------------
@dataclass
class RaceLane:
    """One side of a race: a generation's tokens with the time each appeared (ms from the
    message: prefill, then the end of its round)."""

    name: str
    tokens: list[TokenEvent] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)
    rounds: ReplyRounds = field(default_factory=ReplyRounds)
    done: DoneEvent | None = None
    _pending: list[TokenEvent] = field(default_factory=list)

    def add(self, e: Any) -> None:
        self.rounds.add(e)
        if isinstance(e, TokenEvent):
            self._pending.append(e)
        elif isinstance(e, RoundEvent):  # a round's tokens appear when it ends
            self.tokens.extend(self._pending)
            self.times_ms.extend([e.elapsed_ms] * len(self._pending))  # the prefill is added at the end
            self._pending = []
        elif isinstance(e, DoneEvent):
            self.done = e
            self.times_ms = [t + e.prefill_ms for t in self.times_ms]

    @property
    def total_ms(self) -> float:
        return 0.0 if self.done is None else self.done.prefill_ms + self.done.decode_ms

    def text_until(self, t_ms: float) -> tuple[str, int]:
        n = sum(1 for t in self.times_ms if t <= t_ms)
        return "".join(
            f'<span class="tok tok-{"target" if e.num_drafted == 0 else e.kind.value}">{escape_text(e.text)}</span>'
            for e in self.tokens[:n] if e.text
        ), n


def race_verdict(base: RaceLane, spec: RaceLane, *, greedy: bool) -> str:
    """What the race shows: the speed ratio, and at temperature 0 whether the texts are the
    same (else the first difference and the target's top-two logit gap there)."""
    if base.done is None or spec.done is None:
        return ""
    ratio = base.total_ms / spec.total_ms if spec.total_ms > 0 else float("nan")
    parts = [f"<b>{spec.name}</b> finished in {spec.total_ms / 1000:.1f} s, <b>{base.name}</b> in "
             f"{base.total_ms / 1000:.1f} s: <b>{ratio:.2f}×</b> "
             + ("faster" if ratio >= 1 else "(slower: this drafter does not pay on this machine and prompt)")]
    a, b = list(base.done.token_ids), list(spec.done.token_ids)
    if not greedy:
        parts.append("At temperature &gt; 0 the two replies are different samples of the same distribution: "
                     "speculation changes which random draws are used, never the distribution.")
    elif a == b:
        parts.append(f"Identical text, token for token ({len(a)} tokens): at temperature 0 speculation never "
                     "changes the answer.")
    else:
        i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        if i == min(len(a), len(b)):
            parts.append(f"The same text up to token {i}, where one of the runs stopped (a stop or the token budget).")
        else:
            gap = _logit_gap(base, i)
            if gap is None:
                gap_text = ""
            elif gap < 1e-3:
                gap_text = (" There the target's two most likely tokens were tied (logit gap below 0.001, e.g. equal "
                            "bf16 logits): which one is the argmax then depends on floating-point rounding, which "
                            "differs between a one-token step and a multi-token verify pass.")
            else:
                gap_text = (f" There the target's two most likely tokens were {gap:.3f} apart in logits: a near-tie "
                            "that the different batch shapes of the two runs can flip (floating-point rounding).")
            parts.append(f"The texts differ from token {i + 1} on.{gap_text} Speculation is exact in exact "
                         "arithmetic; the audit (<code>python -m specchat audit</code>) tests it statistically.")
    return "<br>".join(parts)


def _logit_gap(lane: RaceLane, i: int) -> float | None:
    """ln(p1/p2) of the target's raw top two at the reply's i-th token, from the trace."""
    if i >= len(lane.rounds.tokens):
        return None
    tok = lane.rounds.tokens[i]
    rnd = lane.rounds.rounds.get(tok.round_index)
    if rnd is None or rnd.trace is None or tok.position >= len(rnd.trace.positions):
        return None
    top = rnd.trace.positions[tok.position].target_top_raw
    if len(top) < 2 or top[1][1] <= 0:
        return None
    return math.log(top[0][1] / top[1][1])


def race_html(base: RaceLane, spec: RaceLane, t_ms: float | None, *, status: str = "", verdict: str = "") -> str:
    """The two lanes side by side, each showing what it had written ``t_ms`` after the message
    (None: everything), with a clock and the final times."""
    lanes = []
    for lane in (base, spec):
        shown_t = lane.total_ms if t_ms is None else t_ms
        text, n = lane.text_until(shown_t)
        finished = lane.done is not None and (t_ms is None or t_ms >= lane.total_ms)
        clock = (f"done in {lane.total_ms / 1000:.1f} s · {len(lane.tokens)} tokens" if finished
                 else f"{min(shown_t, lane.total_ms) / 1000:.1f} s · {n} tokens")
        lanes.append(
            f'<div class="spec-lane"><div class="spec-lane-head"><b>{html.escape(lane.name)}</b> '
            f'<span class="spec-muted">{clock}</span></div><div class="spec-text spec-lane-text">{text}</div></div>'
        )
    status_div = f'<div class="spec-muted">{status}</div>' if status else ""
    verdict_div = f'<div class="spec-race-verdict">{verdict}</div>' if verdict else ""
    return f'<div class="spec-race">{status_div}<div class="spec-lanes">{"".join(lanes)}</div>{verdict_div}</div>'
