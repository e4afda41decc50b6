"""Generation settings, validated once for the engine, the CLI and the app."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

MAX_NUM_SPECULATIVE_TOKENS = 16
MAX_TEMPERATURE = 2.0
MAX_NEW_TOKENS_LIMIT = 8192


@dataclass(frozen=True)
class GenerationConfig:
    """Settings for one generation.

    Attributes:
        num_speculative_tokens: γ, draft tokens proposed per round, 1…16. Ignored (0 drafts)
            for the target-only drafter ``none``. With ``adaptive_gamma`` it is γ_max, the
            largest γ the engine may choose.
        adaptive_gamma: choose γ each round in 1…num_speculative_tokens to maximise the
            predicted speedup (:mod:`specchat.core.adaptive`); False drafts γ every round. γ then
            depends on measured timings and on earlier generations, and γ decides how many
            random draws a round uses, so with temperature > 0 a seed no longer fixes the reply
            (its distribution is unchanged); greedy replies are unaffected.
        temperature: 0 means greedy (argmax); otherwise 0 < T <= 2.
        top_k: keep the k most likely tokens; 0 disables.
        top_p: nucleus sampling mass in (0, 1]; 1 disables.
        seed: seeds the engine's random generator; None draws a fresh seed.
        max_new_tokens: 1…8192 tokens to generate at most.
        stop_strings: generation ends when the reply text contains one of these; the stop
            string is not part of the reply.
        measure_speedup: with a drafter, make a round target-only now and then (rounds 2, 6,
            22, 38, …; :func:`specchat.core.costs.timing_rounds_due`), so that the reply measures
            what one target-only step costs under the current load and every speedup is like
            for like. Such a round is a plain decode step (Algorithm 1 with γ = 0): the output
            distribution is unchanged. Over a long reply it gives up about (S − 1) / (16·E[N])
            of the throughput at a speedup S (2-3 % at S = 2-3; a gain when S < 1);
            ``python -m specchat bench --timing-cost`` measures it.
        trace: record each round for the inspector and the trace file
            (:mod:`specchat.analysis.trace`): the whole draft, p, q and u of every drafted token, top-10
            lists of p and q raw and as used, the residual at a rejection, the n-gram source,
            per-step times. Off: nothing is recorded and nothing is computed for it. The
            recording is done after each round's timing and left out of the decode time.

    Raises:
        ValueError: from ``__post_init__`` with the allowed range, for any out-of-range value.
    """

    num_speculative_tokens: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 256
    stop_strings: tuple[str, ...] = field(default_factory=tuple)
    adaptive_gamma: bool = False
    measure_speedup: bool = False
    trace: bool = False

    def __post_init__(self) -> None:
        errors = validate(
            num_speculative_tokens=self.num_speculative_tokens,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
        )
        if errors:
            raise ValueError("; ".join(errors))
        stops = (self.stop_strings,) if isinstance(self.stop_strings, str) else tuple(self.stop_strings)
        object.__setattr__(self, "stop_strings", tuple(s for s in stops if s))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def validate(
    *,
    num_speculative_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    max_new_tokens: int,
    seed: int | None = None,
) -> list[str]:
    """Return one message per out-of-range setting, each giving the allowed range."""
    errors = []
    if not _integer(num_speculative_tokens) or not (
        1 <= num_speculative_tokens <= MAX_NUM_SPECULATIVE_TOKENS
    ):
        errors.append(
            f"num_speculative_tokens must be an integer in 1..{MAX_NUM_SPECULATIVE_TOKENS}, "
            f"got {num_speculative_tokens!r}"
        )
    if not _finite(temperature) or not (0.0 <= temperature <= MAX_TEMPERATURE):
        errors.append(f"temperature must be in [0, {MAX_TEMPERATURE}] (0 = greedy), got {temperature!r}")
    if not _integer(top_k) or top_k < 0:
        errors.append(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not _finite(top_p) or not (0.0 < top_p <= 1.0):
        errors.append(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")
    if not _integer(max_new_tokens) or not (1 <= max_new_tokens <= MAX_NEW_TOKENS_LIMIT):
        errors.append(f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS_LIMIT}, got {max_new_tokens!r}")
    if seed is not None and (not _integer(seed) or not (0 <= seed < 2**63)):
        errors.append(f"seed must be an integer in 0..2^63-1, got {seed!r}")
    return errors


def _integer(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class CancelFlag(Protocol):
    """What stops a generation: a ``threading.Event``, or anything with its ``is_set`` (the
    ZeroGPU worker's flag, :mod:`specchat.ui.page.zerogpu`). Checked before each round and each
    prefill pass."""

    def is_set(self) -> bool:
        """True once the generation should stop."""
        ...
