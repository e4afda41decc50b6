"""A prompt's prefill in forward passes: progress to report, a Stop honoured between passes.

On a CPU a long prompt takes minutes to read (llama.cpp, Qwen2.5-Coder 1.5B Q4_K_M on 2 cores:
~100 tokens/s; a 20,000-character message is ~7,800 tokens). The engine
(:class:`~specchat.core.engine.SpeculativeEngine`) feeds it to the target, then to a model
drafter, pass by pass (:func:`prefill_in_chunks`): between passes it can report progress
(:class:`~specchat.core.events.PrefillEvent`, with an estimate from :class:`PrefillRates`) and
stop when asked. The KV states are the same as one pass's (causal attention).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch

from specchat.core.config import CancelFlag
from specchat.core.draft import Drafter
from specchat.core.events import Event, PrefillEvent
from specchat.core.generation import Generation
from specchat.core.runtime import ModelRuntime, synced_now

# A Stop waits for the pass under way, so no pass may be long: the first is small, and each later
# one is sized to take about PREFILL_CHUNK_S at the rate measured so far.
PREFILL_FIRST_CHUNK = 32  # tokens in a long prefill's first forward pass
PREFILL_CHUNK_S = 1.5
# tokens per pass, at least / at most (multiples of the least): llama.cpp on 2 cores read 101
# tokens/s in passes of 64 and 113 in passes of 128 (Qwen2.5-Coder 1.5B Q4_K_M, an Intel Xeon), so
# a fast machine keeps passes of 128 or more; a 2-core AMD EPYC with another app running read
# 10-13 tokens/s, where a pass of 128 took 3.5-6 s that a Stop had to wait out
PREFILL_CHUNK_LIMITS = (16, 2048)


def prefill_in_chunks(
    runtime: ModelRuntime, token_ids: Sequence[int], *, clock: Callable[[], float] | None = None,
) -> Iterator[tuple[int, float]]:
    """Feed ``token_ids`` to ``runtime`` (``num_logits=0``, a prefill) in several forward passes,
    yielding after each ``(tokens fed so far, seconds that pass took)``.

    The first pass feeds :data:`PREFILL_FIRST_CHUNK` tokens; each later one as many as the rate
    measured on the pass before would feed in :data:`PREFILL_CHUNK_S` seconds, within
    :data:`PREFILL_CHUNK_LIMITS`; a pass that would leave fewer tokens than the least pass takes
    them along (a 38-token message is one pass, not 32 and 6). Between passes the caller can
    report progress and stop (a long prompt on a CPU reads at ~100 tokens/s: minutes for a long
    document). The KV states are those of one pass over all the ids: position i depends on tokens
    0…i alone (causal attention), whichever pass computed it; llama.cpp itself feeds a long prompt in batches of ``n_batch``.
    Measured with llama.cpp on a 2-core CPU (Qwen2.5-Coder 1.5B Q4_K_M, 2,048 tokens): one pass
    20.95 s, passes of 256 tokens 21.18 s.

    ``clock``: seconds (default: :func:`synced_now` on the runtime's device; tests pass a fake).
    """
    clock = clock or (lambda: synced_now(runtime.device))
    low, high = PREFILL_CHUNK_LIMITS
    done, size = 0, PREFILL_FIRST_CHUNK
    while done < len(token_ids):
        left = len(token_ids) - done
        chunk = token_ids[done: done + (left if left - size < low else size)]  # no tail shorter than the least
        start = clock()
        runtime.forward(chunk, num_logits=0)
        seconds = clock() - start
        done += len(chunk)
        if seconds > 0:
            size = min(max(int(len(chunk) / seconds * PREFILL_CHUNK_S) // low * low, low), high)
        yield done, seconds


def prefill_steps(runtime: ModelRuntime, token_ids: Sequence[int]) -> Generator[tuple[int, int, float], None, None]:
    """:func:`prefill_in_chunks` as steps to report: ``(0, n, 0.0)`` before the first pass, then
    ``(tokens fed so far, n, seconds that pass took)`` after each (n = ``len(token_ids)``);
    nothing when there is nothing to feed. The shape of ``begin_in_steps`` (a model drafter's
    part) and of the target's part in :func:`run_prefill`."""
    if not token_ids:
        return
    yield 0, len(token_ids), 0.0
    for done, seconds in prefill_in_chunks(runtime, token_ids):
        yield done, len(token_ids), seconds


class PrefillRates:
    """Each model's prefill time per token, milliseconds: ``"target"`` and each drafter by name,
    from its latest forward pass of 32 tokens or more (a shorter pass costs more per token)."""

    def __init__(self) -> None:
        self.ms_per_token: dict[str, float] = {}

    def measure(self, model: str, num_tokens: int, seconds: float) -> None:
        """Keep ``model``'s rate from a pass of ``num_tokens`` that took ``seconds``."""
        if num_tokens >= 32 and seconds > 0:
            self.ms_per_token[model] = seconds * 1000 / num_tokens

    def remaining_ms(self, model: str, done: int, total: int, num_target: int, drafter: Drafter | None) -> float | None:
        """The time left for a prefill (:attr:`PrefillEvent.remaining_ms`), ms: ``model`` has
        ``total − done`` tokens left; during the target's part a model drafter's part is counted
        too (``num_target`` tokens, at its own rate when measured, else at the target's: a drafter
        is the smaller model). None until the target's rate is known."""
        target_rate = self.ms_per_token.get("target")
        if target_rate is None:
            return None
        drafter_rate = self.ms_per_token.get(drafter.name, target_rate) if drafter is not None else 0.0
        if model == "drafter":
            return (total - done) * drafter_rate
        with_model = drafter is not None and drafter.has_model
        return (total - done) * target_rate + (num_target * drafter_rate if with_model else 0.0)


E = TypeVar("E", bound=Event)  # the kind of event a hand-over passes on


class PrefillHost(Protocol):
    """What :func:`run_prefill` needs of the engine (:class:`~specchat.core.engine.SpeculativeEngine`
    implements it): the target, the rates kept across prefills, the clock, the consumer's hand-over
    and the drafter-failure handling."""

    target: ModelRuntime
    prefill_rates: PrefillRates

    def now(self) -> float:
        """The clock, seconds."""
        ...

    def hand_over(self, state: Generation, events: list[E]) -> Iterator[E]:
        """Yield ``events`` to the consumer; the time it holds them goes into ``state.paused_s``."""
        ...

    def call_drafter(self, state: Generation, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)``; if the drafter raises it is dropped (``state.drafter`` None, a
        DrafterFailedEvent in ``state.drafter_failure``) and None is returned."""
        ...


def run_prefill(
    engine: PrefillHost, state: Generation, todo: list[int], t0: float, cancel: CancelFlag | None,
    report: bool,
) -> Generator[PrefillEvent, None, tuple[int, bool]]:
    """Feed ``todo`` (the prompt but its last token, less the kept prefix) to ``engine``'s target
    (:class:`PrefillHost`), then begin the drafter (``begin_in_steps`` for a drafter with a model,
    else ``begin``), pass by pass,
    checking ``cancel`` before each pass; with ``report``, a PrefillEvent before and after each
    pass. ``t0``: when the prefill started (the engine's clock). Model work runs under
    ``torch.inference_mode()``, entered per pass, never held across a yield.

    Returns how many of ``todo`` the target computed, and False when ``cancel`` stopped the
    prefill (the target's part or the drafter's). A drafter that raises is dropped as the engine
    does everywhere (``engine.call_drafter``: a DrafterFailedEvent follows, target-only after).
    """
    rates = engine.prefill_rates

    def progress(model: str, done: int, total: int) -> list[PrefillEvent]:
        if not report:
            return []
        elapsed_ms = (engine.now() - t0 - state.paused_s) * 1000
        return [PrefillEvent(model, done, total, state.num_prompt_tokens, elapsed_ms,
                             rates.remaining_ms(model, done, total, len(todo), state.drafter))]

    def passes(model: str, name: str, steps: Generator[tuple[int, int, float], None, None], step: Callable[[], Any],
               ) -> Generator[PrefillEvent, None, tuple[int, bool]]:
        """Run ``step()`` (the next of ``steps``, None at the end) under inference mode until the
        end or a Stop before a pass; each pass's rate is kept under ``name`` and reported as
        ``model``'s. Returns (tokens done, not stopped)."""
        before = 0
        while True:
            if cancel is not None and cancel.is_set():
                steps.close()
                return before, False
            with torch.inference_mode():
                taken = step()
            if taken is None:
                return before, True
            done, total, seconds = taken
            if done:
                rates.measure(name, done - before, seconds)
                before = done
            yield from engine.hand_over(state, progress(model, done, total))

    target_steps = prefill_steps(engine.target, todo)
    prefilled, whole = yield from passes("target", "target", target_steps, lambda: next(target_steps, None))
    drafter = state.drafter
    if not whole or drafter is None:
        return prefilled, whole
    if not drafter.has_model:  # a drafter with no model (n-gram lookup): nothing to compute
        with torch.inference_mode():
            engine.call_drafter(state, drafter.begin, state.ids)
        return prefilled, True
    # None from call_drafter: the drafter's part is done, or it failed (state.drafter is then None)
    start, held = engine.now(), state.paused_s
    steps = drafter.begin_in_steps(state.ids)
    _, whole = yield from passes("drafter", drafter.name, steps, lambda: engine.call_drafter(state, next, steps, None))
    state.drafter_prefill_ms = (engine.now() - start - (state.paused_s - held)) * 1000
    return prefilled, whole
