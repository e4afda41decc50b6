"""What one generation carries from round to round (:class:`Generation`) and the TokenEvent each
committed token becomes (:func:`token_event`): the engine's bookkeeping, apart from its loop
(:mod:`specchat.core.engine`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specchat.core.costs import CostEstimator
from specchat.core.draft import Draft, Drafter
from specchat.core.events import DrafterFailedEvent, StopReason, TokenEvent, TokenKind
from specchat.core.text import StreamingDetokenizer


@dataclass
class Generation:
    """Mutable state of one generation (kept per call, never on the engine)."""

    ids: list[int]
    detok: StreamingDetokenizer
    token_ids: list[int] = field(default_factory=list)
    kinds: list[TokenKind] = field(default_factory=list)
    stop: StopReason | None = None
    drafter: Drafter | None = None  # the drafter in use; None when target-only or after it failed
    drafter_failure: DrafterFailedEvent | None = None
    round_index: int = 0
    num_target_only: int = 0  # rounds that drafted nothing: each one timed t₁
    drafting_rounds: int = 0
    drafting_tokens: int = 0  # tokens committed by the rounds that drafted
    num_prompt_tokens: int = 0
    costs: CostEstimator = field(default_factory=CostEstimator)  # this run's t₁, d, v(n) so far
    timing_next: bool = False  # the next round is a timing round (decided once, announced in RoundEvent)
    decode_start: float = 0.0
    elapsed_ms: float = 0.0  # decode time at the end of the last round
    paused_s: float = 0.0  # time the consumer held the stream (between yields), not decoding
    drafter_prefill_ms: float = 0.0  # the drafter's part of the prefill (reading the prompt into its cache)


def token_event(
    token: int,
    kind: TokenKind,
    text: str,
    pos: int,
    round_index: int,
    draft: Draft,
    target_probs: torch.Tensor,
) -> TokenEvent:
    """The event of a token committed at ``pos`` of the round: its p (``target_probs[pos]``), and
    q of the accepted draft, or the rejected draft's p and q for a resampled token (q = 1 for a
    deterministic draft, ``draft.draft_probs`` None)."""
    target_prob = float(target_probs[pos, token])
    draft_prob = rejected = rejected_p = rejected_q = None
    draft_ids, draft_probs = draft.token_ids, draft.draft_probs
    if kind is TokenKind.ACCEPTED:
        draft_prob = 1.0 if draft_probs is None else float(draft_probs[pos, token])
    elif kind is TokenKind.RESAMPLED:
        rejected = int(draft_ids[pos])
        rejected_p = float(target_probs[pos, rejected])
        rejected_q = 1.0 if draft_probs is None else float(draft_probs[pos, rejected])
    return TokenEvent(
        token_id=token,
        kind=kind,
        text=text,
        target_prob=target_prob,
        draft_prob=draft_prob,
        rejected_token_id=rejected,
        rejected_target_prob=rejected_p,
        rejected_draft_prob=rejected_q,
        round_index=round_index,
        position=pos,
        num_drafted=int(draft_ids.shape[0]),
    )
