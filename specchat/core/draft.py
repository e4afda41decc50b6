"""The drafter protocol the engine talks to, and what a drafter returns each round.

Implementations live in :mod:`specchat.drafters` (a model, prompt n-gram lookup, the hybrid);
the engine (:mod:`specchat.core.engine`) knows only this protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specchat.core.config import GenerationConfig


@dataclass(frozen=True)
class Draft:
    """Draft tokens proposed for one round.

    Attributes:
        token_ids: ``[n]`` int64 on the target's device, 0 <= n <= requested; every id is a
            valid tokenizer id.
        draft_probs: ``[n, V_target]`` float32, the distribution each token was drawn from
            (after the same warpers as the target), or None when every token was chosen
            deterministically (greedy or n-gram): q is then one-hot.
        num_steps: drafter forward passes spent (0 for model-free drafters).
        trace: what the engine's round trace needs beyond the draft itself, filled only when
            ``GenerationConfig.trace`` is on (:class:`DraftTrace`); None otherwise.
    """

    token_ids: torch.Tensor
    draft_probs: torch.Tensor | None
    num_steps: int
    trace: DraftTrace | None = None


@dataclass(frozen=True)
class DraftTrace:
    """The drafter's side of a round trace (only with ``GenerationConfig.trace``).

    Attributes:
        raw_logits: ``[n, V_target]`` float32, the drafter's logits at each draft step before
            any warper (aligned to the target's vocabulary, padding at -inf); None for a
            drafter with no model (n-gram lookup).
        step_ms: wall time of each draft step, milliseconds (one per forward pass; empty for
            a model-free drafter).
        copy_start: n-gram lookup only: the index in the context (prompt + reply so far) where
            the copied continuation starts; ``match_len`` tokens before it matched the context's
            last ``match_len`` tokens.
        match_len: length of that matched suffix (n-gram lookup only).
    """

    raw_logits: torch.Tensor | None = None
    step_ms: tuple[float, ...] = ()
    copy_start: int | None = None
    match_len: int | None = None


class Drafter(Protocol):
    """What the engine needs from a drafter.

    Lifecycle per generation: ``begin(prompt)``; then per round ``propose`` and ``rollback``;
    finally ``end``. The engine owns the committed sequence and passes it in; a stateful
    drafter keeps only what ``rollback`` allows.

    A drafter whose ``begin`` prefills a model may also offer ``begin_in_steps(prompt_ids)``, a
    generator of ``(tokens computed, tokens to compute, seconds of the last pass)`` that does
    what ``begin`` does, pass by pass; the engine then calls it instead of ``begin``, reports
    the progress (PrefillEvent) and can stop between passes (:class:`specchat.drafters.model.ModelDrafter`).
    """

    name: str

    def begin(self, prompt_ids: list[int]) -> None:
        """Start a new generation for ``prompt_ids`` (may prefill a cache)."""

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        """Propose up to ``max_tokens`` (>= 1) tokens to follow the committed ``ids``."""

    def rollback(self, num_valid: int) -> None:
        """Only ``ids[:num_valid]`` of the committed sequence is still valid state."""

    def end(self) -> None:
        """Release per-generation state (caches). Safe to call twice."""
