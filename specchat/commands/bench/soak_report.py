"""A soak's records and what is made of them (the run is :mod:`specchat.commands.bench.soak`).

Recorded per turn (:class:`Turn`): wall latency, prefill and decode time, the rest
(``overhead_ms``: templating and trimming the history), tokens, decode ms per token, prompt
tokens, resident memory, the number of Python objects the garbage collector tracks, and
whether the engine is idle (no target KV cache, no drafter cache, lock free). :func:`summarize`
reduces them to the numbers the issue asks for. Latency depends on the prompt length, which
grows until trimming starts, so drift is judged on decode ms per generated token of full (not
interrupted) turns, in a window after warm-up versus the last window of turns. Decode ms per
token also depends on what is said (how many drafts are accepted) and on the drafter, so the
summary also gives it per drafter and the mean time of one verification pass (one target
forward), the measure least tied to the content. All times are wall-clock: on a shared
machine, other processes slow turns down; the CPU time of this process over wall time (per
turn) shows when that happened. :func:`format_summary` is the plain-text table, and
:func:`turn_line` the progress line of one turn.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

FULL, CANCEL, ABANDON = "full", "cancel", "abandon"


@dataclass
class Turn:
    """What one turn did and what it cost. Times in ms, memory in MiB."""

    turn: int  # 1-based
    action: str  # full | cancel | abandon
    drafter: str
    greedy: bool
    adaptive: bool
    history_messages: int  # messages in the history sent with this turn
    notice: bool  # the service trimmed the history (and said so)
    done: bool  # a DoneEvent arrived (every turn but an abandoned one)
    stop_reason: str | None
    prompt_tokens: int | None
    new_tokens: int  # TokenEvents received
    wall_ms: float  # from the call to the last event (or to close())
    cpu_ms: float  # CPU time of this process over the same span (all threads)
    prefill_ms: float | None
    decode_ms: float | None
    overhead_ms: float | None  # wall - prefill - decode: templating/trimming, event handling
    ms_per_token: float | None  # decode_ms / tokens
    rounds: int  # RoundEvents received
    verify_ms: float | None  # mean RoundEvent.verify_ms: one target forward + verification
    reply_chars: int  # the reply as streamed: TokenEvents' text, then final_text
    kept: bool  # the conversation kept the turn (it wrote a token, or ended by itself)
    text_consistent: bool | None  # streamed text + final_text == DoneEvent.text
    tokens_after_cancel: int | None  # TokenEvents received after the cancel event was set
    rounds_after_cancel: int | None  # RoundEvents received after it (the round in progress: 1)
    rss_mb: float
    gc_objects: int
    target_cache_released: bool  # engine.released after the turn (nothing held but the kept prefix)
    engine_idle: bool  # ... and no generation owns the engine, drafter caches gone, lock free


# ---- summary --------------------------------------------------------------------------------
def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs (0 for fewer than 2 distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ratio(late: float | None, early: float | None) -> float | None:
    return late / early if late is not None and early else None


def summarize(records: Sequence[Turn], *, warmup: int, rss_start: float, total_s: float) -> dict:
    """Memory growth and latency drift of a soak.

    Memory: RSS after turn 1, after turn ``warmup`` and at the end; growth after warm-up; the
    least-squares slope of RSS over the second half of the turns (after warm-up).
    Latency: the window of turns right after warm-up (``early``) versus the last turns
    (``late``), each a quarter of the turns after warm-up; medians over the full turns in each
    window of decode ms per token (the drift measure), wall ms, overhead ms and prompt tokens;
    late/early ratios, overall and per drafter.
    """
    n = len(records)
    by_turn = {r.turn: r for r in records}
    after = [r for r in records if r.turn > warmup]
    half = [r for r in records if r.turn > max(n // 2, warmup)]
    q = max(1, (n - warmup) // 4)
    early = [r for r in after[:q] if r.action == FULL and r.done]
    late = [r for r in records[-q:] if r.action == FULL and r.done]

    def window_stats(rows: list[Turn]) -> dict:
        return {
            "turns": [r.turn for r in rows],
            "ms_per_token": _median(r.ms_per_token for r in rows),
            "verify_ms": _median(r.verify_ms for r in rows),
            "wall_ms": _median(r.wall_ms for r in rows),
            "cpu_share": _median(r.cpu_ms / r.wall_ms for r in rows if r.wall_ms > 0),
            # with one torch thread: the verify time the turn would have had on an idle machine
            "verify_cpu_ms": _median(r.verify_ms * r.cpu_ms / r.wall_ms for r in rows if r.verify_ms and r.wall_ms > 0),
            "overhead_ms": _median(r.overhead_ms for r in rows),
            "prompt_tokens": _median(r.prompt_tokens for r in rows),
        }

    e, l_ = window_stats(early), window_stats(late)
    per_drafter = {}
    for kind in sorted({r.drafter for r in records}):
        a = _median(r.ms_per_token for r in early if r.drafter == kind)
        b = _median(r.ms_per_token for r in late if r.drafter == kind)
        per_drafter[kind] = {"early_ms_per_token": a, "late_ms_per_token": b, "ratio": _ratio(b, a)}

    rss_warm, rss_end = by_turn[warmup].rss_mb, records[-1].rss_mb
    interrupted = [r for r in records if r.action != FULL]
    return {
        "turns": n,
        "total_s": total_s,
        "actions": dict(Counter(r.action for r in records)),
        "stop_reasons": dict(Counter(r.stop_reason or "abandoned" for r in records)),
        "notices": sum(r.notice for r in records),
        "first_notice_turn": next((r.turn for r in records if r.notice), None),
        "every_unabandoned_turn_done": all(r.done for r in records if r.action != ABANDON),
        "text_consistent": all(r.text_consistent is not False for r in records),
        "target_cache_released_every_turn": all(r.target_cache_released for r in records),
        "engine_idle_every_turn": all(r.engine_idle for r in records),
        "interrupted_turns": len(interrupted),
        "rss_start_mb": rss_start,
        "rss_turn1_mb": records[0].rss_mb,
        "warmup_turn": warmup,
        "rss_warmup_mb": rss_warm,
        "rss_end_mb": rss_end,
        "rss_max_mb": max(r.rss_mb for r in records),
        "rss_growth_after_warmup_mb": rss_end - rss_warm,
        "rss_growth_per_turn_after_warmup_mb": (rss_end - rss_warm) / max(1, n - warmup),
        "rss_slope_second_half_mb_per_turn": slope([r.turn for r in half], [r.rss_mb for r in half]),
        "gc_objects_warmup": by_turn[warmup].gc_objects,
        "gc_objects_end": records[-1].gc_objects,
        "gc_objects_slope_second_half_per_turn": slope([r.turn for r in half], [r.gc_objects for r in half]),
        "window_turns": q,
        "early": e,
        "late": l_,
        "ms_per_token_ratio": _ratio(l_["ms_per_token"], e["ms_per_token"]),
        "verify_ms_ratio": _ratio(l_["verify_ms"], e["verify_ms"]),
        "verify_cpu_ms_ratio": _ratio(l_["verify_cpu_ms"], e["verify_cpu_ms"]),
        "wall_ms_ratio": _ratio(l_["wall_ms"], e["wall_ms"]),
        "overhead_ms_ratio": _ratio(l_["overhead_ms"], e["overhead_ms"]),
        "ms_per_token_ratio_by_drafter": per_drafter,
        "overhead_ms_slope_second_half_per_turn": slope(
            [r.turn for r in half if r.overhead_ms is not None],
            [r.overhead_ms for r in half if r.overhead_ms is not None],
        ),
    }


def format_summary(result: dict) -> str:
    """The summary as a small plain-text table."""
    s, cfg = result["summary"], result["settings"]
    e, l_ = s["early"], s["late"]

    def f(x, spec=".1f"):
        return "-" if x is None else format(x, spec)

    lines = [
        (
            f"soak: {s['turns']} turns on {cfg['target']} ({cfg['dtype']}, {cfg['device']}, {cfg['torch_threads']} threads), "
            f"context {cfg['context_length']}, drafters {','.join(cfg['drafters'])}, max_new_tokens {cfg['max_new_tokens']}, "
            f"{f(s['total_s'])} s"
        ),
        (
            f"actions {s['actions']}  stops {s['stop_reasons']}  trimming notices {s['notices']} "
            f"(first at turn {s['first_notice_turn']})"
        ),
        (
            f"every non-abandoned turn ended with a DoneEvent: {s['every_unabandoned_turn_done']}; "
            f"target cache released after every turn: {s['target_cache_released_every_turn']}; "
            f"engine idle after every turn: {s['engine_idle_every_turn']}; streamed text consistent: {s['text_consistent']}"
        ),
        "",
        "memory (RSS, MiB)",
        (
            f"  before turn 1 {f(s['rss_start_mb'])}   after turn 1 {f(s['rss_turn1_mb'])}   "
            f"after warm-up (turn {s['warmup_turn']}) {f(s['rss_warmup_mb'])}   end {f(s['rss_end_mb'])}   "
            f"max {f(s['rss_max_mb'])}"
        ),
        (
            f"  growth after warm-up {f(s['rss_growth_after_warmup_mb'], '+.1f')} MiB "
            f"({f(s['rss_growth_per_turn_after_warmup_mb'], '+.3f')} MiB/turn); "
            f"least-squares slope over the second half {f(s['rss_slope_second_half_mb_per_turn'], '+.3f')} MiB/turn"
        ),
        (
            f"  gc-tracked objects: {s['gc_objects_warmup']} after warm-up, {s['gc_objects_end']} at the end "
            f"(slope {f(s['gc_objects_slope_second_half_per_turn'], '+.1f')}/turn over the second half)"
        ),
        "",
        f"latency (full turns; medians; early = turns {_span(e['turns'])}, late = turns {_span(l_['turns'])})",
        f"  {'':<22}{'early':>10}{'late':>10}{'late/early':>12}",
        f"  {'decode ms/token':<22}{f(e['ms_per_token']):>10}{f(l_['ms_per_token']):>10}{f(s['ms_per_token_ratio'], '.2f'):>12}",
        f"  {'verify ms/round':<22}{f(e['verify_ms']):>10}{f(l_['verify_ms']):>10}{f(s['verify_ms_ratio'], '.2f'):>12}",
        (
            f"  {'x CPU time / wall':<22}{f(e['verify_cpu_ms']):>10}{f(l_['verify_cpu_ms']):>10}"
            f"{f(s['verify_cpu_ms_ratio'], '.2f'):>12}   (with 1 thread: as on an idle machine)"
        ),
        f"  {'wall ms/turn':<22}{f(e['wall_ms'], '.0f'):>10}{f(l_['wall_ms'], '.0f'):>10}{f(s['wall_ms_ratio'], '.2f'):>12}",
        f"  {'overhead ms/turn':<22}{f(e['overhead_ms']):>10}{f(l_['overhead_ms']):>10}{f(s['overhead_ms_ratio'], '.2f'):>12}",
        (
            f"  {'CPU time / wall':<22}{f(e['cpu_share'], '.2f'):>10}{f(l_['cpu_share'], '.2f'):>10}"
            "   (below the thread count: other processes took CPU)"
        ),
        f"  {'prompt tokens':<22}{f(e['prompt_tokens'], '.0f'):>10}{f(l_['prompt_tokens'], '.0f'):>10}",
    ]
    for kind, d in s["ms_per_token_ratio_by_drafter"].items():
        lines.append(
            f"  {'ms/token ' + kind:<22}{f(d['early_ms_per_token']):>10}{f(d['late_ms_per_token']):>10}"
            f"{f(d['ratio'], '.2f'):>12}"
        )
    return "\n".join(lines)


def _span(turns: list[int]) -> str:
    return f"{turns[0]}-{turns[-1]} ({len(turns)} full)" if turns else "none"


def turn_line(r: Turn) -> str:
    tail = f"{r.stop_reason:<14}" if r.stop_reason else f"{'abandoned':<14}"
    mpt = "-" if r.ms_per_token is None else f"{r.ms_per_token:.1f}"
    prompt = "-" if r.prompt_tokens is None else str(r.prompt_tokens)
    return (
        f"turn {r.turn:>4} {r.action:<7} {r.drafter:<12} {'greedy' if r.greedy else 'sample'} "
        f"prompt {prompt:>5} new {r.new_tokens:>3} {tail} wall {r.wall_ms:7.0f} ms  {mpt:>6} ms/tok  "
        f"RSS {r.rss_mb:7.1f} MiB{'  (trimmed)' if r.notice else ''}{'' if r.engine_idle else '  ENGINE NOT IDLE'}"
    )

