"""The token inspector: inside the round of one clicked token, as HTML. No gradio.

Everything is rendered from a reply's events (each RoundEvent carrying its
:class:`~specchat.analysis.trace.RoundTrace`), live or read back from a trace file, so a recorded reply
looks the same as the live one. Tokens carry (reply R, its I-th
TokenEvent) as the class ``tref-R-I`` and rounds as ``rref-R-K``; the page's click hook (see
:mod:`specchat.ui.page.layout`) sends them back to select what was clicked. The inspector shows the
round's whole draft, p and q, the draw that kept or rejected the token, the residual a resampled
token was drawn from with the exactness proof on its numbers (:mod:`specchat.ui.html.proof`), and
an n-gram draft's source; the round timeline is :mod:`specchat.ui.html.timeline`, the race
:mod:`specchat.ui.html.race`.

The acceptance test shown is Leviathan et al. 2023, Algorithm 1: the drafted token x is kept
when u < min(1, p(x)/q(x)) with u ~ U[0, 1) (computed as u·q < p); after the first rejection
the replacement is drawn from the residual norm(max(0, p − q)); after full acceptance a bonus
token is drawn from p at the extra position.
"""

from __future__ import annotations

from specchat.analysis.trace import RoundTrace, TopList
from specchat.ui.html.proof import proof_html, proof_rows
from specchat.ui.html.render import KIND_COLORS, escape_text
from specchat.ui.html.rounds import (
    DRAFT_COLOR,
    MAX_BAR_ROWS,
    RESIDUAL_COLOR,
    TARGET_COLOR,
    ReplyRounds,
    prob_label,
    token_chip,
    token_label,
)

# proof_html and proof_rows are specchat.ui.html.proof's, importable from here too
__all__ = ["ReplyRounds", "inspector_html", "proof_html", "proof_rows"]


# ---- pieces of the inspector ------------------------------------------------------------------------
def _ratio(p: float, q: float) -> float:
    """min(1, p/q), with q = 0 giving 1 (never drafted in practice)."""
    return 1.0 if q <= 0 else min(1.0, p / q)


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
                f'<span class="spec-bar-val">{prob_label(value)}</span></td>'
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
        rows.append((token_label(trace.token_texts.get(t, "")), bars))
    return rows


def _pq_panel(trace: RoundTrace, i: int, *, marked: int | None) -> str:
    """p and q at position i as side-by-side bars, as used and raw."""
    pos = trace.positions[i]
    mark = token_label(trace.token_texts.get(marked, "")) if marked is not None else None
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
        f'<div>p(x) = {prob_label(p)}, q(x) = {prob_label(q)} → <b>min(1, p/q) = {r:.3f}</b>; the draw <b>u = {u:.3f}</b> '
        f'{"&lt;" if accepted else "≥"} {r:.3f}, so the draft was <b style="color:{color}">{verdict}</b>.</div>'
        f'<div class="spec-uline"><div class="spec-ukeep" style="width:{r * 100:.2f}%"></div>'
        f'<div class="spec-umark" style="left:{u * 100:.2f}%"><span>u</span></div></div>'
        '<div class="spec-uaxis"><span>0</span><span>keep if u lands here (probability min(1, p/q))</span><span>1</span></div>'
        "</div>"
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
    kind = tok.kind.value
    kind_words = {
        "accepted": f"accepted draft (draft {tok.position + 1} of {len(tr.drafted)})",
        "resampled": f"resampled after draft {tok.position + 1} of {len(tr.drafted)} was rejected",
        "bonus": ("bonus token after the draft was accepted" if len(tr.drafted) == 1
                  else f"bonus token after all {len(tr.drafted)} drafts were accepted"),
        "target": "target-only round: nothing was drafted" + (" (a timing round)" if rnd.timing else ""),
    }[kind]
    head = (
        f'<div class="spec-insp-head"><span class="tok tok-{kind}">{token_label(tok.text or tr.token_texts.get(tok.token_id, ""))}</span> '
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
        nk = tr.next_kind
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
            rows = [(token_label(tr.token_texts.get(t, "")), [(pr, RESIDUAL_COLOR)]) for t, pr in res]
            if tok.token_id not in dict(res):  # drawn from the tail beyond the top k
                rows.append((token_label(tr.token_texts.get(tok.token_id, "")), [(None, RESIDUAL_COLOR)]))
            body.append(
                '<div class="spec-residual">'
                f'<div class="spec-sub">the residual norm(max(0, p − q)) it was drawn from: '
                f'{token_chip(tr, tok.token_id, "tok-resampled")} was drawn (marked)</div>'
                + _bars(rows, mark=token_label(tr.token_texts.get(tok.token_id, "")))
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
