"""Which runtime is faster here, and what a verify pass costs on each: ``specchat calibrate
--runtimes``.

For each runtime that can run the target on this machine (transformers, llama.cpp), one
:class:`~specchat.service.ChatService` at a time: the target alone decodes the calibration
message (greedy, :data:`~specchat.analysis.calibrate.NUM_TOKENS` tokens, the median of two
replies after a warm-up), then :func:`verify_costs` times one forward over k tokens for k = 1..13
after a cached prefix: T(k)/T(1) is what a round of γ = k − 1 costs in target steps before any
drafting (the textbook assumption, Leviathan et al. 2023 §3.4, is T(k) = T(1)). The record is
kept per machine, model and thread count (:func:`specchat.runtimes.select.save_measurement`) and
``--runtime auto`` then takes the faster runtime.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from specchat.analysis.calibrate import CALIBRATION_MESSAGE, NUM_TOKENS, CalibratedService, _reply
from specchat.runtimes import llamacpp, select

if TYPE_CHECKING:
    from specchat.core.engine import SpeculativeEngine

VERIFY_KS: tuple[int, ...] = tuple(range(1, 14))
PREFIX_LEN = 192  # cached positions before each timed pass: a short chat turn's context


@torch.inference_mode()
def verify_costs(runtime, ks: Sequence[int] = VERIFY_KS, *, prefix_len: int = PREFIX_LEN, repeats: int = 3) -> list[float]:
    """Milliseconds of one ``forward`` over k tokens with all k logits rows (a verify pass of
    γ = k − 1 drafts) after ``prefix_len`` cached positions, for each k in ``ks``: the median of
    ``repeats`` passes, each rolled back after (``truncate``), after one untimed pass per k.

    Args:
        runtime: a :class:`~specchat.core.runtime.ModelRuntime` (its cache is started empty
            and released after).
    Returns:
        one float per k, in ``ks``' order (ms, wall clock; CUDA work is synchronized).
    Raises:
        ValueError: ``prefix_len + max(ks)`` does not fit the runtime's context.
    """
    vocab = runtime.vocab_size
    ids = [(1000 + 7 * i) % vocab for i in range(prefix_len)]  # fixed ordinary token ids, not a real text
    runtime.start(ids, max_positions=prefix_len + max(ks), reuse=False)
    sync = torch.cuda.synchronize if runtime.device.type == "cuda" else (lambda: None)
    try:
        runtime.forward(ids, num_logits=1)
        out = []
        for k in ks:
            times = []
            for r in range(repeats + 1):
                new = [(5000 + 13 * (i + r)) % vocab for i in range(k)]
                sync()
                t0 = time.perf_counter()
                runtime.forward(new, num_logits=k)
                sync()
                if r:  # the first pass of each k is untimed
                    times.append((time.perf_counter() - t0) * 1000)
                runtime.truncate(prefix_len)
            out.append(statistics.median(times))
        return out
    finally:
        runtime.release()


def available_runtimes() -> list[str]:
    """The runtimes to measure: transformers always, llama.cpp when a llama.cpp library can be loaded
    (xllamacpp's prebuilt one, or llama-cpp-python's)."""
    return ["transformers"] + (["llamacpp"] if llamacpp.unavailable_reason() is None else [])


class MeasuredService(CalibratedService, Protocol):
    """What :func:`measure` uses of a service (:class:`specchat.service.ChatService`)."""

    engine: SpeculativeEngine | None  # set by load()

    def load(self) -> None:
        """Load the target."""
        ...


def measure(make_service: Callable[[str], MeasuredService], entry, threads: int | None, *,
            runtimes: Sequence[str] | None = None, num_tokens: int = NUM_TOKENS,
            progress: Callable[[str], None] | None = None) -> dict:
    """Time the target alone on each runtime (see the module docstring), one service at a time.

    Args:
        make_service: runtime name → an unloaded ChatService for the target on it.
        entry: the target's registry entry; threads: the thread count asked for (the record's key).
        runtimes: default :func:`available_runtimes`.
    Returns:
        the record (:func:`specchat.runtimes.select.load_measurement`'s shape, not yet saved),
        with ``"described"``: what ran each (e.g. ``llama.cpp (Q4_K - Medium, …)``).
    """
    say = progress or (lambda text: None)
    record: dict[str, Any] = {"key": select.measurement_key(entry, threads), "tokens_per_s": {}, "verify_ms": {}, "described": {},
              "ks": list(VERIFY_KS), "num_tokens": num_tokens}
    for name in runtimes or available_runtimes():
        say(f"runtime {name}: loading the target")
        service = make_service(name)
        service.load()
        prompt_ids, _ = service.encode_chat([], CALIBRATION_MESSAGE, num_tokens)
        say(f"runtime {name}: the target alone, {num_tokens} tokens")
        _reply(service, prompt_ids, "none", 4)  # warm-up
        rate = statistics.median(_reply(service, prompt_ids, "none", num_tokens)[0] for _ in range(2))
        say(f"runtime {name}: a verify pass over k = 1..{VERIFY_KS[-1]} tokens")
        record["tokens_per_s"][name] = rate
        engine = service.engine
        assert engine is not None  # load() made it
        record["verify_ms"][name] = verify_costs(engine.target)
        record["described"][name] = select.describe(engine.target)
        del service
        gc.collect()
    record["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return record
