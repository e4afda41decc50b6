"""The drafter protocol the engine talks to, and what a drafter returns each round.

Implementations live in :mod:`specchat.drafters` (a model, prompt n-gram lookup, the hybrid);
the engine (:mod:`specchat.core.engine`) knows only this protocol."""

from __future__ import annotations

from collections.abc import Generator
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

    The four methods above are required. The rest are optional: the engine calls each of them
    on every drafter, and a drafter that subclasses this protocol explicitly
    (``class NgramDrafter(Drafter)``, PEP 544) inherits the default written here, which does
    what a drafter without that feature needs (nothing, mostly). A drafter that only matches
    the protocol structurally must define them all.
    """

    name: str
    #: True for a drafter whose ``begin`` prefills a model over the prompt: the engine then
    #: calls :meth:`begin_in_steps` instead of ``begin``, reports the progress (PrefillEvent)
    #: and counts the drafter's part in a prefill's remaining time. Default False (no model).
    has_model: bool = False

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

    # -- optional: the defaults suit a drafter with no model and no cache ------------------
    def begin_in_steps(self, prompt_ids: list[int]) -> Generator[tuple[int, int, float], None, None]:
        """``begin`` pass by pass (called instead of it when :attr:`has_model`): yields
        ``(tokens computed, tokens to compute, seconds of the last pass)`` after each forward
        pass, first ``(0, n, 0.0)``; the engine can stop between passes. Default: ``begin``,
        yielding nothing."""
        self.begin(prompt_ids)
        yield from ()

    def keep_prefix(self, ids: list[int]) -> None:
        """Keep the cache of the committed ``ids`` for the next ``begin`` (called after a
        generation that ended normally, before ``end``). Default: nothing is kept."""
        return None

    def forget_prefix(self) -> None:
        """Drop a cache kept by :meth:`keep_prefix` (frees its memory). Default: nothing to drop."""
        return None

    def round_source(self, ids: list[int]) -> str:
        """Which of the drafter's sources drafts the round after the committed ``ids`` (adaptive
        γ keeps one controller per source; e.g. the hybrid's ``"lookup-long"``); a function of
        ``ids`` only. Default ``""``: one source."""
        return ""

    def free_draft(self, ids: list[int]) -> list[int]:
        """What the drafter would propose for ``ids`` at no cost (a lookup), judged by adaptive γ
        against the target's token in a round that drafts nothing; [] when drafting would cost
        a model step. Default []: nothing is free."""
        return []

    @property
    def max_catch_up_tokens(self) -> int | None:
        """The most committed ids a model drafter reads when it is behind (bounded catch-up), for
        adaptive γ's estimate of a paused drafter's catch-up cost; default None (no model)."""
        return None
