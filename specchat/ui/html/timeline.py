"""The round timeline, as HTML: one bar per round, its draft steps and its verify pass. No gradio.

Rendered from a reply's :class:`~specchat.ui.html.rounds.ReplyRounds`, live or from a trace file.
Each row carries the class ``rref-R-K`` (round K of reply R): a click on it selects the round
in the token inspector (:mod:`specchat.ui.html.inspector`).
"""

from __future__ import annotations

from specchat.ui.html.rounds import DRAFT_COLOR, TARGET_COLOR, ReplyRounds, token_label


def timeline_html(reply_number: int, rr: ReplyRounds, *, selected_round: int | None = None, max_rounds: int = 400,
                  last: int | None = None) -> str:
    """One bar per round on a shared millisecond axis: each draft step, then the verify pass;
    after it the tokens the round committed and where it stopped. Rows carry
    the class ``rref-R-K`` (a click selects the round in the inspector). With ``last``, only the
    last rounds get rows (a reply that streams: what is sent stays the same size however long
    the reply); the summary line counts them all."""
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
    shown = rounds[-last:] if last is not None else rounds[:max_rounds]
    earlier = len(rounds) - len(shown) if last is not None else 0
    for r in shown:
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
                f'<span class="tok tok-{t.kind.value}">{token_label(t.text)}</span>'
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
    more = (f'<div class="spec-muted">… {len(rounds) - max_rounds} more rounds</div>'
            if last is None and len(rounds) > max_rounds else "")
    if earlier:
        summary += (f'<div class="spec-muted">the last {len(shown)} rounds while the reply streams; '
                    f"all {len(rounds)} when it ends</div>")
    return f'<div class="spec-timeline">{summary}<div class="spec-tl-rows">{"".join(rows)}</div>{more}</div>'
