"""Soak run: many chat turns on one loaded :class:`~specchat.service.ChatService`, like a long
app session, to show that resident memory levels off and per-token latency does not drift.

Each turn does what the app does: the plain-text history grows turn by turn (the service
trims the oldest messages when the context window is full and yields a Notice), the message
rotates through :data:`MESSAGES`, the drafter rotates through the given kinds, greedy and
sampled turns alternate (and fixed and adaptive γ, the app's default), every few turns the
Stop button is pressed (a ``threading.Event`` set mid-stream; the partial reply is kept in the
history, by the :class:`~specchat.conversation.Conversation`'s rule, as the app keeps it) and
every few others the stream is abandoned by ``close()`` after a few events (a closed tab, Clear).

This module runs the turns and measures them (outside the timed part, after ``gc.collect()``:
resident memory, ``VmRSS`` from ``/proc/self/status``, the number of Python objects the
garbage collector tracks, and whether the engine is idle: no target KV cache, no drafter
cache, lock free). The per-turn record (:class:`Turn`), the summary and its table are
:mod:`specchat.commands.bench.soak_report`'s (re-exported here).

``specchat soak`` (:mod:`specchat.commands.bench.soak_cli`) is the command line; ``tests/test_soak.py`` runs a short version.
"""

from __future__ import annotations

import gc
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from specchat.commands.bench.soak_report import ABANDON, CANCEL, FULL, Turn, format_summary, slope, summarize, turn_line
from specchat.conversation import Conversation, ReplySettings
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent

if TYPE_CHECKING:
    from specchat.service import ChatService

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


def plan(turn: int, *, cancel_every: int, abandon_every: int) -> str:
    """The action of a 1-based turn: every ``cancel_every``-th is stopped, every
    ``abandon_every``-th (when not stopped) abandoned; 0 disables either."""
    if cancel_every and turn % cancel_every == 0:
        return CANCEL
    if abandon_every and turn % abandon_every == 0:
        return ABANDON
    return FULL


def engine_state(service: ChatService) -> tuple[bool, bool]:
    """(target cache released, engine fully idle) between turns."""
    engine = service.engine
    assert engine is not None  # the soak runs on a loaded target
    return engine.released, service.idle()


def run_turn(
    service,
    conversation: Conversation,
    message: str,
    *,
    turn: int,
    action: str,
    settings: ReplySettings,
    interrupt_after: int = 1,
) -> Turn:
    """Run one chat turn of ``conversation`` (which keeps it by its rule); return its record
    (memory fields still 0).

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
    history_messages = len(conversation.messages)
    kept_before = len(conversation)
    begun = conversation.begin(message, settings)
    config = begun.config
    t0, c0 = time.perf_counter(), time.process_time()
    stream = conversation.stream_turn(begun, service.stream_chat, cancel=cancel)  # a generator: close() ends it
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
        drafter=settings.drafter,
        greedy=config.greedy,
        adaptive=config.adaptive_gamma,
        history_messages=history_messages,
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
        kept=len(conversation) > kept_before,
        text_consistent=consistent,
        tokens_after_cancel=tokens_after,
        rounds_after_cancel=rounds_after,
        rss_mb=0.0,
        gc_objects=0,
        target_cache_released=False,
        engine_idle=False,
    )
    return record


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
    are greedy, even turns sampled (``temperature``, ``top_p``; one :class:`Conversation`, so turn n has
    seed ``seed + n - 1``); γ is adaptive
    on turns with n // 2 odd. The cancel point cycles through 1-3 tokens, the abandon point
    through 1-4 events. ``warmup`` (default: a tenth of the turns, at least 1) only affects the
    summary. The returned ``history`` is what the model sees after the last turn (the turns the
    conversation kept: a turn stopped or abandoned before its first token is not).

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
    conversation = Conversation(seed=seed)
    records: list[Turn] = []
    t_start = time.perf_counter()
    for n in range(1, turns + 1):
        action = plan(n, cancel_every=cancel_every, abandon_every=abandon_every)
        greedy = n % 2 == 1
        settings = ReplySettings(drafters[(n - 1) % len(drafters)], num_speculative_tokens, (n // 2) % 2 == 1,
                                 0.0 if greedy else temperature, 1.0 if greedy else top_p, max_new_tokens)
        interrupt_after = 1 + (n // max(cancel_every, 1)) % 3 if action == CANCEL else 1 + n % 4
        message = messages[(n - 1) % len(messages)]
        record = run_turn(service, conversation, message, turn=n, action=action, settings=settings,
                          interrupt_after=interrupt_after)
        gc.collect()
        record.rss_mb = rss_mb()
        record.gc_objects = len(gc.get_objects())
        record.target_cache_released, record.engine_idle = engine_state(service)
        records.append(record)
        if log is not None:
            log(turn_line(record))
    total_s = time.perf_counter() - t_start
    run_settings = {
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
        "settings": run_settings,
        "summary": summary,
        "turns": [asdict(r) for r in records],
        "history": conversation.history(),
    }


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
