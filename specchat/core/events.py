"""Typed events streamed by the engine: one per committed token, one per round, one at the end.

The event stream is the heart of specchat: every committed token says how it was produced
(Leviathan et al. 2023, Algorithm 1):

* ``accepted``  -- a draft token the target kept (``u < target_prob / draft_prob``);
* ``resampled`` -- drawn from the residual ``norm(max(0, target_probs - draft_probs))`` after
  the first rejection in a round;
* ``bonus``     -- drawn from the target's extra position ``target_probs[γ]`` after all γ ≥ 1
  drafts were accepted: the drafter was right every time, and the round gained a token;
* ``target``    -- drawn from ``target_probs[0]`` by a round that drafted nothing (the drafter
  ``none``, an n-gram lookup that found nothing, a timing round, drafting paused by adaptive γ).
  It is Algorithm 1 with γ = 0, a plain target decode step; calling it a bonus would credit the
  drafter with a token it had no part in.

Each round commits 0…γ accepted tokens followed by exactly one resampled, bonus or target
token, unless a stop (EOS, stop string, max_new_tokens) truncates it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class TokenKind(str, enum.Enum):
    """How a committed token was produced. The string values are used in JSON and CSS."""

    ACCEPTED = "accepted"
    RESAMPLED = "resampled"
    BONUS = "bonus"
    TARGET = "target"


class StopReason(str, enum.Enum):
    """Why generation ended."""

    EOS = "eos"  # the target committed one of the model's EOS ids
    STOP_STRING = "stop_string"  # the text reached one of the user's stop strings
    MAX_NEW_TOKENS = "max_new_tokens"  # the token budget is spent
    CONTEXT_FULL = "context_full"  # the model's context window is full
    CANCELLED = "cancelled"  # the caller asked the engine to stop (Stop button, closed tab)


@dataclass(frozen=True)
class TokenEvent:
    """One committed token.

    Attributes:
        token_id: the committed token id.
        kind: accepted, resampled, bonus or target (see the module docstring).
        text: the text this token adds to the reply, safe to display now. It may be "" when
            the token ends mid-character (the text arrives with a later token), for special
            tokens, or while the text could still be the start of a stop string.
        target_prob: p(token) after the warpers (temperature, top-k, top-p), in [0, 1].
        draft_prob: q(token) for an accepted draft token, in [0, 1]; None for resampled, bonus
            and target tokens (they are not drawn from the drafter).
        rejected_token_id: for a resampled token, the draft token the target rejected.
        rejected_target_prob / rejected_draft_prob: p and q of that rejected draft token.
        round_index: 0-based index of the round that committed this token.
        position: 0-based position of the token within its round (0…γ).
        num_drafted: how many draft tokens that round proposed (0 for target-only rounds).
    """

    token_id: int
    kind: TokenKind
    text: str
    target_prob: float
    draft_prob: float | None
    rejected_token_id: int | None
    rejected_target_prob: float | None
    rejected_draft_prob: float | None
    round_index: int
    position: int
    num_drafted: int


@dataclass(frozen=True)
class RoundEvent:
    """One draft → verify → commit round, emitted after its token events.

    Attributes:
        round_index: 0-based.
        num_speculative_tokens: γ for this round, the adaptive choice when adaptive γ is on
            (before shrinking for budget/context).
        num_drafted: draft tokens actually proposed (0…γ).
        num_accepted: accepted draft tokens committed this round: the leading run of
            acceptances (0…num_drafted), cut at the stop when a stop truncated the round, so it
            always equals the round's ACCEPTED TokenEvents.
        num_committed: tokens committed this round (num_accepted + 1, fewer only when a stop
            truncated the round; then every committed token is an accepted draft).
        accepted_mask: the accept decision for each draft position that counts: the accepted
            ones and the first rejection, so its length is min(num_drafted, num_accepted + 1);
            drafts after the first rejection are discarded unjudged. In a round truncated by a
            stop it covers only the committed positions (all True). ``len(accepted_mask)`` is
            the number of judged positions that α divides by.
        draft_ms: wall time spent in the drafter this round, milliseconds; 0 for a round that asked
            no drafter (no drafter, or γ = 0), whose whole time is the target-only step.
        draft_steps: drafter forward passes this round (0 for n-gram and target-only).
        verify_ms: wall time of the single target forward pass plus verification, milliseconds.
        elapsed_ms: decoding time from the start of decoding (after prefill) to the end of
            this round, milliseconds: wall time less the time the consumer held the stream
            between rounds (a page being drawn is not decoding).
        round_ms: this round's share of the decode time, milliseconds: ``elapsed_ms`` less the
            previous round's (drafting, the verify pass, bookkeeping; the rounds' ``round_ms``
            add up to ``DoneEvent.decode_ms``). For a round that drafted nothing,
            ``round_ms − draft_ms`` is one target-only decode step, t₁, timed in this run.
        timing: True for a target-only round the engine inserted to time t₁ in the same run
            (``GenerationConfig.measure_speedup``; see :mod:`specchat.core.costs`).
        timing_next: True when the next round will be a timing round. A consumer that draws a
            page holds its update until after it: a browser drawing on the same CPU would
            otherwise slow exactly that target-only step and bias t₁.
        drafting_paused: True for a target-only round that adaptive γ chose because every γ >= 1 is
            predicted to lose at the measured costs (drafting paused between probes; see
            :mod:`specchat.core.adaptive`).
        paused_speedup: for a round with ``drafting_paused``, the best speedup the controller
            predicted over γ = 1…γ_max when it chose to pause (below 1; its estimates pool the
            rounds before, weighted to recent ones); None otherwise.
        trace: the round's :class:`specchat.analysis.trace.RoundTrace` when the generation was traced
            (``GenerationConfig.trace``), else None.
    """

    round_index: int
    num_speculative_tokens: int
    num_drafted: int
    num_accepted: int
    num_committed: int
    accepted_mask: tuple[bool, ...]
    draft_ms: float
    draft_steps: int
    verify_ms: float
    elapsed_ms: float
    round_ms: float
    timing: bool = False
    timing_next: bool = False
    drafting_paused: bool = False
    paused_speedup: float | None = None
    trace: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class DoneEvent:
    """The last event of every generation.

    Attributes:
        stop_reason: why generation ended.
        token_ids: every committed token id, in order (the stop token included when the stop
            is an EOS id or completes a stop string).
        kinds: one TokenKind per entry of token_ids.
        text: the reply text: the concatenation of every TokenEvent.text, then final_text. A
            stop string and anything after it are not part of it.
        prefill_ms: wall time of the prompt forward passes (target and drafter), milliseconds.
        decode_ms: time of all rounds, milliseconds, measured as RoundEvent.elapsed_ms is
            (the consumer's time between rounds left out).
        num_prompt_tokens: prompt length in tokens.
        final_text: text released only at the end, carried by no TokenEvent: on cancellation,
            text that was held back because it could have been the start of a stop string, or
            an unfinished character. Streaming consumers append it to what they showed.
        error: reserved for a failure message (None on success).
        prompt_ids: the prompt's token ids (for a trace file's header).
        num_prefilled: prompt tokens the target's prefill actually computed: all but the last
            (which the first round feeds), less those whose KV states a kept cache already held
            (the prefix cache: a chat's next turn prefills its new message only); None when
            unknown (an old trace).
        drafter_prefill_ms: the part of ``prefill_ms`` a model drafter spent reading the prompt
            into its own cache (after a paused stretch or a new conversation it can be most of
            it); None when unknown (an old trace), 0 without a model drafter.
    """

    stop_reason: StopReason
    token_ids: tuple[int, ...]
    kinds: tuple[TokenKind, ...]
    text: str
    prefill_ms: float
    decode_ms: float
    num_prompt_tokens: int
    final_text: str = ""
    error: str | None = field(default=None)
    prompt_ids: tuple[int, ...] = field(default=(), repr=False)
    num_prefilled: int | None = None
    drafter_prefill_ms: float | None = None


@dataclass(frozen=True)
class DrafterFailedEvent:
    """The drafter raised an exception (for example out of memory) in ``begin``, ``propose`` or
    ``rollback``. The engine drops it and decodes the rest of this generation with the target
    only: the committed tokens stay, later rounds draft nothing, so the output distribution is
    still exactly the target's. Emitted once, before the tokens of the round it happened in.

    Attributes:
        drafter_name: the failed drafter's ``name``.
        error: ``"<ExceptionType>: <message>"``.
        round_index: the round during which it failed (0 = while the prompt was prefilled).
    """

    drafter_name: str
    error: str
    round_index: int

    @property
    def text(self) -> str:
        """One sentence for the user."""
        return (
            f"The drafter '{self.drafter_name}' failed ({self.error}); "
            "the rest of this reply is generated by the target alone."
        )


@dataclass(frozen=True)
class PrefillEvent:
    """Progress of the prompt's prefill, before the first round. Streamed only when asked for
    (``SpeculativeEngine.generate(..., prefill_progress=True)``): as each model starts its part,
    then after each of its forward passes (:func:`specchat.core.prefill.prefill_in_chunks`).

    Attributes:
        model: ``"target"``, then ``"drafter"`` (a model drafter fills its own KV cache after the
            target; model-free drafters have no part).
        num_done: tokens this model has computed so far, 0…num_total.
        num_total: tokens this model computes: the prompt but its last token (the first round
            feeds it), less the prefix its kept cache already holds.
        num_prompt_tokens: the whole prompt, in tokens.
        elapsed_ms: time of this prefill so far (both models), milliseconds, the time the
            consumer held the stream left out.
        remaining_ms: estimated time left for the whole prefill, milliseconds: the tokens left
            times each model's time per token measured on its latest passes (in this prefill or
            an earlier one); a drafter not measured yet is counted at the target's rate (a
            drafter is the smaller model: an upper bound). None until the target's rate is known.
    """

    model: str
    num_done: int
    num_total: int
    num_prompt_tokens: int
    elapsed_ms: float
    remaining_ms: float | None


Event = TokenEvent | RoundEvent | DoneEvent | DrafterFailedEvent | PrefillEvent
