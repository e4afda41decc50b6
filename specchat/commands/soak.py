"""Soak run: many chat turns on one loaded :class:`~specchat.service.ChatService`, like a long
app session, to show that resident memory levels off and per-token latency does not drift.

Each turn does what the app does: the plain-text history grows turn by turn (the service
trims the oldest messages when the context window is full and yields a Notice), the message
rotates through :data:`MESSAGES`, the drafter rotates through the given kinds, greedy and
sampled turns alternate (and fixed and adaptive γ, the app's default), every few turns the
Stop button is pressed (a ``threading.Event`` set mid-stream; the partial reply is kept in the
history) and every few others the stream is abandoned by ``close()`` after a few events (a
closed tab, Clear).

Recorded per turn (outside the timed part, after ``gc.collect()``): wall latency, prefill and
decode time, the rest (``overhead_ms``: templating and trimming the history), tokens, decode
ms per token, prompt tokens, resident memory (``VmRSS`` from ``/proc/self/status``), the
number of Python objects the garbage collector tracks, and whether the engine is idle (no
target KV cache, no drafter cache, lock free). :func:`summarize` reduces them to the numbers
the issue asks for. Latency depends on the prompt length, which grows until trimming starts,
so drift is judged on decode ms per generated token of full (not interrupted) turns, in a
window after warm-up versus the last window of turns. Decode ms per token also depends on
what is said (how many drafts are accepted) and on the drafter, so the summary also gives it
per drafter and the mean time of one verification pass (one target forward), the measure
least tied to the content. All times are wall-clock: on a shared machine, other processes slow
turns down; the CPU time of this process over wall time (per turn) shows when that happened.

``python scripts/soak.py`` is the command line; ``tests/test_soak.py`` runs a short version.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent

# Varied chat messages: code from scratch, an edit that repeats its input (the n-gram drafter's
# best case), open questions, non-ASCII text, a one-word message. Seven: coprime with the
# period-2 greedy/sampled and period-3 drafter rotations, so the combinations vary.
MESSAGES = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Name three animals that live in the ocean and say one fact about each.",
    "Fix the typo and print the whole code:\ndef add(a, b):\n    retrun a + b\n\ndef sub(a, b):\n    return a - b",
    "Explain in two sentences what a hash map is.",
    "Traduis en anglais : « Le café est très chaud, fais attention. » ☕",
    "Thanks!",
    "Write a haiku about the sea.",
)
FULL, CANCEL, ABANDON = "full", "cancel", "abandon"
_MB = 1024 * 1024


def rss_mb() -> float:
    """Resident memory of this process in MiB (``VmRSS``); psutil where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process(os.getpid()).memory_info().rss / _MB
    except ImportError:
        return math.nan


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
    reply_chars: int  # the reply kept in the history
    text_consistent: bool | None  # streamed text + final_text == DoneEvent.text
    tokens_after_cancel: int | None  # TokenEvents received after the cancel event was set
    rounds_after_cancel: int | None  # RoundEvents received after it (the round in progress: 1)
    rss_mb: float
    gc_objects: int
    target_cache_released: bool  # engine.target_cache is None after the turn
    engine_idle: bool  # ... and no generation owns the engine, drafter caches gone, lock free


def plan(turn: int, *, cancel_every: int, abandon_every: int) -> str:
    """The action of a 1-based turn: every ``cancel_every``-th is stopped, every
    ``abandon_every``-th (when not stopped) abandoned; 0 disables either."""
    if cancel_every and turn % cancel_every == 0:
        return CANCEL
    if abandon_every and turn % abandon_every == 0:
        return ABANDON
    return FULL


def engine_state(service) -> tuple[bool, bool]:
    """(target cache released, engine fully idle) between turns."""
    engine = service.engine
    released = engine.target_cache is None
    drafter_caches = [getattr(d, "cache", None) for d in service._drafters.values() if d is not None]
    idle = (
        released
        and getattr(engine, "_current", None) is None
        and all(c is None for c in drafter_caches)
        and not service._lock.locked()
    )
    return released, idle


def run_turn(
    service,
    history: list[dict],
    message: str,
    *,
    turn: int,
    action: str,
    drafter: str,
    config: GenerationConfig,
    interrupt_after: int = 1,
) -> tuple[Turn, str]:
    """Run one chat turn; return its record (memory fields still 0) and the reply to keep.

    ``cancel``: the cancel event is set after ``interrupt_after`` TokenEvents and the stream is
    read to its DoneEvent. ``abandon``: the stream is closed after ``interrupt_after`` events of
    any kind (a Notice counts), without reading further.
    """
    cancel = threading.Event()
    streamed: list[str] = []
    done: DoneEvent | None = None
    notice = False
    events = tokens = 0
    tokens_after = rounds_after = None
    verify: list[float] = []
    t0, c0 = time.perf_counter(), time.process_time()
    stream = service.stream_chat(history, message, drafter=drafter, config=config, cancel=cancel)
    try:
        for item in stream:
            events += 1
            if isinstance(item, TokenEvent):
                tokens += 1
                streamed.append(item.text)
                if tokens_after is not None:
                    tokens_after += 1
            elif isinstance(item, RoundEvent):
                verify.append(item.verify_ms)
                if rounds_after is not None:
                    rounds_after += 1
            elif isinstance(item, DoneEvent):
                done = item
            else:  # a Notice
                notice = True
            if action == CANCEL and tokens >= interrupt_after and not cancel.is_set():
                cancel.set()  # the Stop button
                tokens_after, rounds_after = 0, 0
            if action == ABANDON and events >= interrupt_after:
                break
    finally:
        stream.close()  # what the app does on exit, error and GeneratorExit
    wall_ms = (time.perf_counter() - t0) * 1000
    cpu_ms = (time.process_time() - c0) * 1000

    reply = "".join(streamed)
    prefill = decode = overhead = per_token = None
    consistent = None
    if done is not None:
        reply += done.final_text  # the app shows it and keeps it (ReplyRenderer.finish)
        consistent = reply == done.text
        prefill, decode = done.prefill_ms, done.decode_ms
        overhead = wall_ms - prefill - decode
        per_token = decode / len(done.token_ids) if done.token_ids else None
    record = Turn(
        turn=turn,
        action=action,
        drafter=drafter,
        greedy=config.greedy,
        adaptive=config.adaptive_gamma,
        history_messages=len(history),
        notice=notice,
        done=done is not None,
        stop_reason=done.stop_reason.value if done is not None else None,
        prompt_tokens=done.num_prompt_tokens if done is not None else None,
        new_tokens=tokens,
        wall_ms=wall_ms,
        cpu_ms=cpu_ms,
        prefill_ms=prefill,
        decode_ms=decode,
        overhead_ms=overhead,
        ms_per_token=per_token,
        rounds=len(verify),
        verify_ms=sum(verify) / len(verify) if verify else None,
        reply_chars=len(reply),
        text_consistent=consistent,
        tokens_after_cancel=tokens_after,
        rounds_after_cancel=rounds_after,
        rss_mb=0.0,
        gc_objects=0,
        target_cache_released=False,
        engine_idle=False,
    )
    return record, reply


def run_soak(
    service,
    turns: int = 100,
    *,
    drafters: Sequence[str] = ("ngram",),
    max_new_tokens: int = 32,
    num_speculative_tokens: int = 4,
    temperature: float = 0.8,
    top_p: float = 0.95,
    messages: Sequence[str] = MESSAGES,
    cancel_every: int = 5,
    abandon_every: int = 7,
    warmup: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Run ``turns`` chat turns on a loaded service; return settings, per-turn records, summary.

    Turn n (1-based) uses ``drafters[(n-1) % len]`` and ``messages[(n-1) % len]``; odd turns
    are greedy, even turns sampled (``temperature``, ``top_p``, seed ``seed + n``); γ is adaptive
    on turns with n // 2 odd. The cancel point cycles through 1-3 tokens, the abandon point
    through 1-4 events. ``warmup`` (default: a tenth of the turns, at least 1) only affects the
    summary. The returned ``history`` is the final chat history.

    Raises:
        ValueError: fewer than 2 turns, or an unknown drafter kind (before any turn runs).
    """
    if turns < 2:
        raise ValueError(f"a soak needs at least 2 turns, got {turns}")
    service.load()
    for kind in drafters:
        service.prepare_drafter(kind)
    warmup = max(1, round(turns / 10)) if warmup is None else warmup
    warmup = min(max(warmup, 1), turns - 1)
    gc.collect()
    rss_start = rss_mb()
    history: list[dict] = []
    records: list[Turn] = []
    t_start = time.perf_counter()
    for n in range(1, turns + 1):
        action = plan(n, cancel_every=cancel_every, abandon_every=abandon_every)
        greedy = n % 2 == 1
        config = GenerationConfig(
            num_speculative_tokens=num_speculative_tokens,
            adaptive_gamma=(n // 2) % 2 == 1,
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            seed=None if greedy else seed + n,
            max_new_tokens=max_new_tokens,
        )
        interrupt_after = 1 + (n // max(cancel_every, 1)) % 3 if action == CANCEL else 1 + n % 4
        message = messages[(n - 1) % len(messages)]
        record, reply = run_turn(
            service,
            history,
            message,
            turn=n,
            action=action,
            drafter=drafters[(n - 1) % len(drafters)],
            config=config,
            interrupt_after=interrupt_after,
        )
        # the app's history: the user's message and the reply as far as it got
        history = history + [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]
        gc.collect()
        record.rss_mb = rss_mb()
        record.gc_objects = len(gc.get_objects())
        record.target_cache_released, record.engine_idle = engine_state(service)
        records.append(record)
        if log is not None:
            log(_turn_line(record))
    total_s = time.perf_counter() - t_start
    settings = {
        "target": service.target_name,
        "context_length": service.context_length,
        "dtype": str(service.dtype).replace("torch.", ""),
        "device": str(service.device),
        "turns": turns,
        "drafters": list(drafters),
        "max_new_tokens": max_new_tokens,
        "num_speculative_tokens": num_speculative_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "cancel_every": cancel_every,
        "abandon_every": abandon_every,
        "warmup": warmup,
        "seed": seed,
        "torch_threads": _torch_threads(),
    }
    summary = summarize(records, warmup=warmup, rss_start=rss_start, total_s=total_s)
    return {
        "settings": settings,
        "summary": summary,
        "turns": [asdict(r) for r in records],
        "history": history,
    }


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


def _turn_line(r: Turn) -> str:
    tail = f"{r.stop_reason:<14}" if r.stop_reason else f"{'abandoned':<14}"
    mpt = "-" if r.ms_per_token is None else f"{r.ms_per_token:.1f}"
    prompt = "-" if r.prompt_tokens is None else str(r.prompt_tokens)
    return (
        f"turn {r.turn:>4} {r.action:<7} {r.drafter:<12} {'greedy' if r.greedy else 'sample'} "
        f"prompt {prompt:>5} new {r.new_tokens:>3} {tail} wall {r.wall_ms:7.0f} ms  {mpt:>6} ms/tok  "
        f"RSS {r.rss_mb:7.1f} MiB{'  (trimmed)' if r.notice else ''}{'' if r.engine_idle else '  ENGINE NOT IDLE'}"
    )


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def make_service(target: str, *, dtype: str = "float32", device: str | None = None, context_length: int | None = None):
    """A loaded ChatService; ``context_length`` overrides the entry's (the registry's
    ``context_length`` key), so a soak reaches the trimming of long histories sooner."""
    from specchat.service import ChatService

    service = ChatService(target=target, dtype=dtype, device=device)
    if context_length:
        service.target_entry = service.target_entry.model_copy(update={"context_length": int(context_length)})
    service.load()
    return service


__all__ = ["MESSAGES", "Turn", "format_summary", "make_service", "rss_mb", "run_soak", "slope", "summarize"]
