"""The seed's cost analysis on a real reply, as HTML: the ledger, "is this drafter worth it?"
and the limits (prefill against decode). No gradio, no tensors.

Every figure says whether it is counted (from the reply's events), measured (timed in the same
reply) or predicted (a formula of Leviathan et al. 2023 with the measured α, c and the counted ĉ).
Symbols as in ALGORITHM.md: α acceptance rate, γ draft tokens per round, c = drafter step time /
target step time (measured), ĉ = drafter arithmetic per token / target's (parameter counts),
E[N] = (1 − α^(γ+1)) / (1 − α) expected tokens per round.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass

from specchat.analysis.ledger import Ledger
from specchat.core import evidence
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds

__all__ = ["DrafterPoint", "drafter_points", "worth_words", "ledger_html", "headline", "fmt_bytes"]


def fmt_bytes(n: float | None) -> str:
    """``1.23 GB``, ``456 MB``, ``789 kB`` (SI units)."""
    if n is None:
        return "–"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size * 0.9995:  # 999,999 B is "1 MB", not "1e+03 kB"
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


def _x(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}×"


@dataclass(frozen=True)
class DrafterPoint:
    """One drafter on the α-against-c chart: pooled over the replies it made.

    ``alpha`` = Σ accepted / Σ judged drafts; ``cost_ratio`` = the replies' measured c, averaged
    with their drafted tokens as weights (None until some reply timed a target-only step).
    """

    drafter: str
    alpha: float
    cost_ratio: float | None
    num_replies: int
    num_drafted: int

    @property
    def color(self) -> str:
        kind = drafter_kinds.DRAFTER_KINDS.get(self.drafter)
        return kind.color if kind is not None else "#495057"


def drafter_points(replies: Iterable[tuple[str, SpeculationMetrics]]) -> list[DrafterPoint]:
    """Pool each drafter's replies (``(drafter, metrics)``, in conversation order) into one point;
    drafters that never had a draft judged (target only) are left out. Order: first use."""
    pooled: dict[str, list[float]] = {}  # accepted, judged, Σ c·w, Σ w, replies, drafted
    for drafter, m in replies:
        if m.num_verified == 0:
            continue
        acc = pooled.setdefault(drafter, [0.0] * 6)
        acc[0] += m.num_accepted
        acc[1] += m.num_verified
        if m.cost_ratio is not None:
            acc[2] += m.cost_ratio * m.num_drafted
            acc[3] += m.num_drafted
        acc[4] += 1
        acc[5] += m.num_drafted
    return [
        DrafterPoint(d, a[0] / a[1], a[2] / a[3] if a[3] > 0 else None, int(a[4]), int(a[5]))
        for d, a in pooled.items()
    ]


def worth_words(drafter: str, alpha: float | None, cost_ratio: float | None, metrics: SpeculationMetrics | None = None) -> str:
    """One or two sentences: does α > c hold for this drafter, what does theory then promise,
    and (with ``metrics``) how far a verify pass is from costing one target step here."""
    if alpha is None:
        return f"{drafter}: no draft judged yet, so no α."
    if cost_ratio is None or not cost_ratio >= 0 or math.isinf(cost_ratio):
        return f"{drafter}: α = {alpha:.2f}; c needs a timed target-only step (a longer reply has one)."
    supported = metrics is None or evidence.supports_prediction(metrics)
    if alpha > cost_ratio:
        words = f"{drafter}: α = {alpha:.2f} > c = {cost_ratio:.3f}, above the line: by the textbook rule some γ speeds decoding up"
        if supported:
            best, speedup = evidence.textbook_best(alpha, cost_ratio)
            words += f" (textbook best γ = {best}, S = {speedup:.2f}×)."
        else:
            words += f" ({metrics.num_verified} judged draft(s): too few for a best γ)."
    else:
        words = (f"{drafter}: α = {alpha:.2f} ≤ c = {cost_ratio:.3f}, on or below the line: no γ gives a speedup; "
                 "target-only decoding is faster.")
    if metrics is not None:
        t1, gamma = metrics.target_step_ms, metrics.mean_num_speculative_tokens
        verify = metrics.costs.verify_ms(round(gamma) + 1) if gamma else None
        if t1 and verify and supported:
            words += (f" The rule assumes verifying γ + 1 tokens costs one target step; here it costs "
                      f"{verify / t1:.2f} steps (measured at γ + 1 = {round(gamma) + 1}).")
            best = evidence.best_gamma(metrics)
            if best is not None:
                words += (f" With the costs measured in this reply the best is γ = {best[0]} at {best[1]:.2f}×"
                          + (": no γ pays on this machine now." if best[1] < 1 else "."))
    return words


def headline(ledger: Ledger, speedup: float | None, held: str | None = None) -> str:
    """The ledger's sentence: how much faster, for how much arithmetic. ``speedup``: the measured
    one where its sample carries it (:func:`specchat.core.evidence.measured_speedup`), else None
    and ``held`` says why (its basis: the stats line holds the figure back in the same words)."""
    arithmetic = ledger.arithmetic
    if ledger.target_passes == 0:
        return "The ledger fills in as the reply's rounds come in."
    if ledger.num_drafted == 0:
        return "Nothing was drafted: every round was a plain target step, one pass per token."
    if speedup is not None and not speedup > 0:
        speedup = None
    if speedup is None or arithmetic is None:
        if arithmetic is not None:
            why = f"the speedup is held back: {held}" if held else "the speedup needs a timed target-only step"
            return (f"{arithmetic:.2f}× the arithmetic of target-only decoding for {ledger.reads_factor:.2f}× fewer "
                    f"target weight reads ({why}).")
        if speedup is not None:
            pace = f"{speedup:.2f}× faster" if speedup >= 1 else f"{1 / speedup:.2f}× slower"
            return (f"{pace} than target-only (measured), for {ledger.reads_factor:.2f}× fewer target passes; the "
                    "arithmetic needs the two models' sizes, which were not recorded.")
        return (f"{ledger.reads_factor:.2f}× fewer target passes than tokens; the speedup needs a timed target-only "
                "step, the arithmetic the models' sizes.")
    if 0.97 <= speedup < 1.03:
        return (f"About as fast as target-only ({speedup:.2f}×) while doing {arithmetic:.2f}× the arithmetic: the "
                "saved weight reads just paid for the drafting and the wider verify passes.")
    if speedup >= 1.0:
        return (f"{speedup:.2f}× faster while doing {arithmetic:.2f}× the arithmetic: speculation trades spare "
                "compute for memory bandwidth.")
    return (f"{1 / speedup:.2f}× slower, doing {arithmetic:.2f}× the arithmetic: here the drafting and the wider "
            "verify passes cost more time than the saved weight reads.")


def _shown_speedup(metrics: SpeculationMetrics) -> tuple[float | None, str | None]:
    """(the measured speedup where its sample carries it, else None; why it is held back, else None):
    the ledger says what the stats line says (a tester read "1.39× slower" above "speedup –")."""
    measured = evidence.measured_speedup(metrics)
    if measured.shown:
        return measured.value, None
    return None, measured.basis() if measured.value is not None else None


def ledger_html(
    ledger: Ledger,
    metrics: SpeculationMetrics,
    *,
    title: str,
    drafter: str,
    running: bool = False,
) -> str:
    """The ledger table of one reply, its headline sentence, ĉ's source, the α > c words and
    the prefill-against-decode note."""
    if ledger.target_passes == 0:
        return (f'<div class="spec-ledger spec-muted">{html.escape(title)}: the ledger fills in as the reply\'s '
                "rounds come in.</div>")
    worth = worth_words(drafter, metrics.acceptance_rate, metrics.cost_ratio, metrics)
    return (
        '<div class="spec-ledger">'
        f'<div class="spec-ledger-title">{html.escape(title)}</div>'
        f'<div class="spec-ledger-headline">{html.escape(headline(ledger, *_shown_speedup(metrics)))}</div>'
        f"{_ledger_table(ledger)}"
        f'<div class="spec-muted">{_c_hat_source(ledger, drafter)}</div>'
        f'<div class="spec-ledger-limits">{_limits(ledger, running)}</div>'
        f'<div class="spec-ledger-worth"><b>Is this drafter worth it?</b> {html.escape(worth)}</div>'
        "</div>"
    )


def _tag(kind: str) -> str:
    """The chip that says how a figure is known: counted, measured or predicted."""
    return f'<span class="spec-tag spec-tag-{kind}">{kind}</span>'


def _ledger_rows(ledger: Ledger) -> list[tuple[str, str, str, str, str]]:
    """The ledger's rows: (what, this reply, target only, factor, theory)."""
    sizes = ledger.sizes
    rows: list[tuple[str, str, str, str, str]] = []  # what, this reply, target only, factor, theory
    enp = ledger.reads_factor_predicted
    rows.append((
        "target forward passes", f"{ledger.target_passes:,}", f"{ledger.target_only_passes:,}",
        f"{_x(ledger.reads_factor)} fewer {_tag('counted')}",
        f"E[N] = {enp:.2f}× fewer {_tag('predicted')}" if enp is not None else "–",
    ))
    if sizes is not None:
        rows.append((
            "target weight bytes read", fmt_bytes(ledger.target_bytes), fmt_bytes(ledger.target_only_bytes),
            f"{_x(ledger.reads_factor)} less {_tag('counted')}",
            f"E[N] = {enp:.2f}× less {_tag('predicted')}" if enp is not None else "–",
        ))
        if sizes.drafter is not None:
            rows.append((
                "drafter weight bytes read", f"{fmt_bytes(ledger.drafter_bytes)} ({ledger.drafter_passes:,} passes)",
                "0", "", "",
            ))
            more = ledger.bytes_factor is not None and ledger.bytes_factor > 1
            rows.append((
                "all weight bytes read", fmt_bytes((ledger.target_bytes or 0) + (ledger.drafter_bytes or 0)),
                fmt_bytes(ledger.target_only_bytes),
                f"{_x(ledger.bytes_factor)} ({'more' if more else 'less'}) {_tag('counted')}", "",
            ))
    share = ledger.draft_share
    rows.append((
        "drafter passes", f"{ledger.drafter_passes:,}", "0",
        (f"{share:.0%} of the decode time {_tag('measured')}" if share is not None and ledger.drafter_passes else "–"),
        "",
    ))
    if ledger.arithmetic is not None:
        predicted = ledger.arithmetic_predicted
        rows.append((
            "arithmetic, in target-token units",
            f"{ledger.arithmetic_units:,.0f}", f"{ledger.num_tokens:,}",
            f"{_x(ledger.arithmetic)} {_tag('counted')}",
            (f"(1 − α)(γĉ + γ + 1) / (1 − α<sup>γ+1</sup>) = {predicted:.2f}× {_tag('predicted')}"
             if predicted is not None else "–"),
        ))
    thrown = ledger.num_thrown_away
    rows.append((
        "drafted tokens", f"{ledger.num_drafted:,}: {ledger.num_accepted:,} kept, {thrown:,} thrown away", "0",
        f"{thrown / ledger.num_drafted:.0%} thrown away {_tag('counted')}" if ledger.num_drafted else "–", "",
    ))
    return rows


def _ledger_table(ledger: Ledger) -> str:
    """The ledger's table and the note on how its theory column is averaged."""
    alpha = ledger.alpha
    rows = _ledger_rows(ledger)
    body = "".join(
        f"<tr><td>{what}</td><td>{this}</td><td>{base}</td><td>{factor}</td><td>{pred}</td></tr>"
        for what, this, base, factor, pred in rows
    )
    return (
        '<table class="spec-ledger-table"><tr><th></th><th>this reply</th><th>target only</th>'
        f"<th>factor</th><th>theory (α = {'–' if alpha is None else f'{alpha:.2f}'}, γ as drafted)</th></tr>"
        f"{body}</table>"
        '<div class="spec-muted">Theory is averaged over the rounds as run: a round that drafted γ tokens is '
        "predicted to commit E[N](α, γ) tokens for γĉ + γ + 1 units of work, a round that drafted nothing "
        "(a timing round) 1 token for 1 unit; with one γ and no such round it is the formula as printed.</div>"
    )


def _c_hat_source(ledger: Ledger, drafter: str) -> str:
    """Where ĉ comes from (the model sizes recorded for the reply), and the bytes read per pass."""
    sizes = ledger.sizes
    if sizes is None:
        chat = "ĉ unknown: the model sizes were not recorded, so bytes and arithmetic are left out."
    elif ledger.flop_ratio is None:
        chat = ("ĉ unknown: the drafter ran a model whose size was not recorded, so its arithmetic and bytes are "
                f"left out. Target: {_params(sizes.target.matmul_params)} matmul weights, "
                f"{fmt_bytes(sizes.target.weight_bytes)} read per pass.")
    elif sizes.drafter is None:
        chat = (f"ĉ = 0: the {html.escape(drafter)} drafter runs no model. Target: {_params(sizes.target.matmul_params)} "
                f"matmul weights, {fmt_bytes(sizes.target.weight_bytes)} read per pass.")
    else:
        int4_copy = drafter_kinds.DRAFTER_KINDS.get(drafter)
        same = int4_copy is not None and int4_copy.source == "target"
        chat = (f"ĉ = {sizes.flop_ratio:.2f} = the drafter's matmul weights ({_params(sizes.drafter.matmul_params)}) / "
                f"the target's ({_params(sizes.target.matmul_params)}), about 2 FLOPs per weight per token "
                "(attention over the context left out)"
                + ("; the int4 copy does the target's multiply-adds on dequantized 4-bit weights, so ĉ = 1 while it "
                   f"reads {sizes.drafter.weight_bytes / max(sizes.target.weight_bytes, 1):.0%} of the target's bytes"
                   if same else "")
                + f". Bytes per pass: target {fmt_bytes(sizes.target.weight_bytes)}, drafter "
                  f"{fmt_bytes(sizes.drafter.weight_bytes)}.")
    return chat


def _limits(ledger: Ledger, running: bool) -> str:
    """The limits: prefill against decode, and a warning when the reply was mostly prefill."""
    if ledger.prefill_ms is None:
        limits = ("Prefill: measured when the reply ends. " if running else "") + \
            f"Decode {ledger.decode_ms / 1000:.2f} s {_tag('measured')}."
    else:
        reused = ""
        if ledger.num_prefilled is not None and ledger.num_prompt_tokens:
            kept = ledger.num_prompt_tokens - 1 - ledger.num_prefilled  # the last prompt token is fed by round 1
            reused = (f" for {ledger.num_prefilled:,} new prompt tokens"
                      + (f" ({kept:,} reused from the conversation's kept cache)" if kept > 0 else ""))
        target_ms = ledger.prefill_ms - (ledger.drafter_prefill_ms or 0.0)
        split = (f" (the target {target_ms / 1000:.2f} s{reused}; the drafter {ledger.drafter_prefill_ms / 1000:.2f} s "
                 "reading the prompt into its own cache)" if ledger.drafter_prefill_ms else reused)
        limits = (f"Prefill {ledger.prefill_ms / 1000:.2f} s{split}, decode {ledger.decode_ms / 1000:.2f} s {_tag('measured')}: "
                  "speculation speeds up only the decoding. The prefill runs the prompt through the target in passes of "
                  "many tokens (a short prompt in one), which are compute-bound already (as are large batches), so "
                  "drafting cannot help it.")
        if ledger.mostly_prefill:
            limits += (f' <b class="spec-warn">This reply was mostly prefill ({ledger.prefill_share:.0%} of its time):'
                       " any speedup applies to the smaller part.</b>")
    return limits
