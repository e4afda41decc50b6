"""The speculative decoding loop: prefill → rounds of draft / verify / commit / roll back.

Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023, Algorithm 1, with KV caches for both models. Target-only decoding (no drafter) is
the same loop with zero drafts per round, so speed comparisons are like for like.

Cache invariant, between rounds: the target cache holds exactly ``len(ids) - 1`` positions
(the last committed token is fed as the first input of the next verify pass), and the
drafter's cache holds at most ``len(ids) - 1``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from specchat.adaptive import AdaptiveGamma
from specchat.config import GenerationConfig
from specchat.drafters.base import Drafter, embedding_rows
from specchat.events import DoneEvent, DrafterFailedEvent, Event, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.kv import cut_cache
from specchat.sampling import logits_to_probs, verify_draft
from specchat.text import StreamingDetokenizer


class SpeculativeEngine:
    """Generate with a target model, optionally speculating with a drafter.

    Args:
        target_model: causal LM in eval mode; its output distribution is preserved exactly.
        tokenizer: used for text deltas and stop strings; None yields empty text.
        eos_token_ids: ids that end the reply when the target commits them.
        context_length: positions the target may use (prompt + reply); defaults to
            ``config.max_position_embeddings``.

    One engine serves one generation at a time (callers serialise; the app holds a lock).
    """

    def __init__(
        self,
        target_model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None,
        *,
        eos_token_ids: Iterable[int] = (),
        context_length: int | None = None,
    ):
        self.target_model = target_model
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        self.context_length = int(context_length or target_model.config.max_position_embeddings)
        self.device = next(target_model.parameters()).device
        self.vocab_size = embedding_rows(target_model, output=True)
        self.target_cache: DynamicCache | None = None
        self._current: object | None = None
        # adaptive γ: one controller per (drafter name, γ_max, greedy), kept across generations
        self.gamma_controllers: dict[tuple[str, int, bool], AdaptiveGamma] = {}

    # -- public ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream the events of one generation.

        Model work runs under ``torch.inference_mode()`` that is entered and left inside each
        round, never held across a ``yield``: a consumer may advance the stream from any
        thread (Gradio does) and runs its own code in normal mode.

        Args:
            prompt_ids: the prompt, 1 <= len < context_length.
            drafter: proposes drafts each round; None decodes with the target only.
            config: sampling settings and γ (``num_speculative_tokens``).
            cancel: when set, generation stops before the next round (stop_reason cancelled).

        Yields:
            For each round, its TokenEvents then one RoundEvent; finally one DoneEvent. If the
            drafter raises (in ``begin``, ``propose`` or ``rollback``; e.g. out of memory), one
            DrafterFailedEvent, and the generation goes on with the target only.

        Raises:
            ValueError: empty prompt, or a prompt that leaves no room in the context window.
            RuntimeError: a drafter broke its contract (too many tokens, ids outside the vocab):
                a bug, so it is raised rather than hidden by the fallback.
            CacheRollbackError: a KV cache cannot be cut back (e.g. past a sliding window).
        """
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(prompt_ids) >= self.context_length:
            raise ValueError(
                f"the prompt has {len(prompt_ids)} tokens; the context window holds "
                f"{self.context_length}, so there is no room for a reply"
            )
        token = object()  # this generation's identity, for a safe cleanup
        self._current = token
        try:
            yield from self._generate(prompt_ids, drafter, config, cancel)
        finally:
            # An abandoned generator may be finalised late (by the garbage collector) while a
            # newer generation runs: only the generation that owns the state cleans it up.
            if self._current is token:
                self._current = None
                self.target_cache = None
                if drafter is not None:
                    drafter.end()

    # -- the loop -------------------------------------------------------------------------
    def _generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        cancel: threading.Event | None,
    ) -> Iterator[Event]:
        if cancel is not None and cancel.is_set():  # stopped while it waited (e.g. in the app's queue)
            yield DoneEvent(StopReason.CANCELLED, (), (), "", 0.0, 0.0, len(prompt_ids))
            return
        seed = config.seed if config.seed is not None else random.randrange(2**63)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        state = _Generation(
            ids=list(prompt_ids), detok=StreamingDetokenizer(self.tokenizer, config.stop_strings), drafter=drafter
        )

        t0 = self._now()
        with torch.inference_mode():
            self.target_cache = DynamicCache(config=self.target_model.config)
            if len(state.ids) > 1:
                self._target_forward(state.ids[:-1], logits_to_keep=1)
            if state.drafter is not None:
                self._call_drafter(state, state.drafter.begin, state.ids)
        prefill_ms = (self._now() - t0) * 1000
        state.decode_start = self._now()
        if state.drafter_failure is not None:
            yield from self._hand_over(state, [state.drafter_failure])

        controller = None
        if state.drafter is not None and config.adaptive_gamma:
            key = (state.drafter.name, config.num_speculative_tokens, config.greedy)
            controller = self.gamma_controllers.setdefault(key, AdaptiveGamma(config.num_speculative_tokens))

        final_text = ""
        while state.stop is None:
            if cancel is not None and cancel.is_set():
                state.stop = StopReason.CANCELLED
                final_text = state.detok.flush()  # text held back for a possible stop string
                break
            gamma = controller.choose() if controller is not None else config.num_speculative_tokens
            drafting = state.drafter is not None
            with torch.inference_mode():
                events = self._round(state, config, generator, gamma)
            if drafting and state.drafter is None:  # the drafter failed this round
                controller = None
                events.insert(0, state.drafter_failure)
            elif controller is not None:
                controller.update(events[-1])
            yield from self._hand_over(state, events)  # outside inference mode: the consumer's code runs normally

        yield DoneEvent(
            stop_reason=state.stop,
            token_ids=tuple(state.token_ids),
            kinds=tuple(state.kinds),
            text=state.detok.text,
            prefill_ms=prefill_ms,
            decode_ms=self._decode_ms(state),
            num_prompt_tokens=len(prompt_ids),
            final_text=final_text,
        )

    def _round(
        self,
        state: _Generation,
        config: GenerationConfig,
        generator: torch.Generator,
        num_speculative_tokens: int,
    ) -> list[Event]:
        """Draft → verify → roll back → commit one round of γ = ``num_speculative_tokens``;
        return its events (tokens, then the round). Drafts with ``state.drafter`` (None: target-only)."""
        ids = state.ids
        remaining = config.max_new_tokens - len(state.token_ids)
        room = self.context_length - len(ids)
        # a round commits at most n_draft + 1 tokens: stay within budget and context
        max_draft = min(num_speculative_tokens, remaining - 1, room - 1)

        t_draft = self._now()
        draft_ids = torch.empty(0, dtype=torch.long, device=self.device)
        draft_probs, draft_steps = None, 0
        if state.drafter is not None and max_draft > 0:
            draft = self._call_drafter(state, state.drafter.propose, ids, max_draft, config, generator)
            if state.drafter is not None:  # else it failed: this round and the rest are target-only
                draft_ids, draft_probs, draft_steps = draft.token_ids, draft.draft_probs, draft.num_steps
                self._check_draft(state.drafter, draft_ids, draft_probs, max_draft)
        num_drafted = int(draft_ids.shape[0])
        draft_ms = (self._now() - t_draft) * 1000

        t_verify = self._now()
        target_logits = self._target_forward([ids[-1], *draft_ids.tolist()], logits_to_keep=0)
        target_probs = logits_to_probs(
            target_logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p
        )
        result = verify_draft(draft_ids, draft_probs, target_probs, generator)
        verify_ms = (self._now() - t_verify) * 1000

        accepted = draft_ids[: result.num_accepted].tolist()
        new_tokens = [*accepted, result.next_token_id]
        new_kinds = [TokenKind.ACCEPTED] * len(accepted) + [result.next_kind]
        committed_before = len(ids)
        # roll back: keep the prefix the target verified (last input + accepted drafts)
        cut_cache(self.target_cache, committed_before + result.num_accepted)
        if state.drafter is not None:
            self._call_drafter(state, state.drafter.rollback, committed_before + result.num_accepted)

        events: list[Event] = []
        for pos, (token, kind) in enumerate(zip(new_tokens, new_kinds)):
            ids.append(token)
            state.token_ids.append(token)
            state.kinds.append(kind)
            if token in self.eos_token_ids:
                state.stop = StopReason.EOS
            elif len(state.token_ids) >= config.max_new_tokens:
                state.stop = StopReason.MAX_NEW_TOKENS
            elif len(ids) >= self.context_length:
                state.stop = StopReason.CONTEXT_FULL
            text = state.detok.add(token, last=state.stop is not None)
            if state.detok.stopped:
                state.stop = StopReason.STOP_STRING
            events.append(
                _token_event(
                    token, kind, text, pos, state.round_index, num_drafted, draft_ids, draft_probs, target_probs
                )
            )
            if state.stop is not None:
                break
        num_committed = len(events)
        num_accepted = result.num_accepted
        judged = result.accepted_mask[: min(num_drafted, num_accepted + 1)]
        if num_committed < len(new_tokens):
            # a stop inside the commit: the caches must not hold tokens past it, and the
            # stats count only the committed (all accepted) drafts
            cut_cache(self.target_cache, len(ids) - 1)
            if state.drafter is not None:
                self._call_drafter(state, state.drafter.rollback, len(ids) - 1)
            num_accepted, judged = num_committed, judged[:num_committed]
        events.append(
            RoundEvent(
                round_index=state.round_index,
                num_speculative_tokens=num_speculative_tokens if num_drafted or state.drafter is not None else 0,
                num_drafted=num_drafted,
                num_accepted=num_accepted,
                num_committed=num_committed,
                accepted_mask=judged,
                draft_ms=draft_ms,
                draft_steps=draft_steps,
                verify_ms=verify_ms,
                elapsed_ms=self._decode_ms(state),
            )
        )
        state.round_index += 1
        return events

    def _hand_over(self, state: _Generation, events: list[Event]) -> Iterator[Event]:
        """Yield ``events``; the time the consumer holds them (rendering a page, say) is kept
        in ``state.paused_s`` and left out of the decode time, as it is not decoding."""
        start = self._now()
        yield from events
        state.paused_s += self._now() - start

    def _decode_ms(self, state: _Generation) -> float:
        """Milliseconds spent decoding so far: wall time since the prefill ended, less the time
        the consumer held the stream between rounds."""
        return (self._now() - state.decode_start - state.paused_s) * 1000

    def _call_drafter(self, state: _Generation, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)``, a method of ``state.drafter``. If the drafter raises, it is dropped:
        ``state.drafter`` becomes None (the rest of the generation is target-only), a
        DrafterFailedEvent is kept in ``state.drafter_failure``, its caches are released, and
        None is returned."""
        drafter = state.drafter
        try:
            return method(*args)
        except Exception as exc:  # out of memory, a broken drafter model: fall back, visibly
            state.drafter = None
            state.drafter_failure = DrafterFailedEvent(
                drafter_name=drafter.name, error=f"{type(exc).__name__}: {exc}", round_index=state.round_index
            )
            try:
                drafter.end()
            except Exception:  # noqa: BLE001 - already failing; the target-only path needs nothing from it
                pass
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return None

    def _check_draft(
        self, drafter: Drafter, draft_ids: torch.Tensor, draft_probs: torch.Tensor | None, max_draft: int
    ) -> None:
        """A drafter that breaks its contract gets a clear error, not a wrong answer."""
        n = int(draft_ids.shape[0])
        if n > max_draft:
            raise RuntimeError(f"drafter {drafter.name!r} proposed {n} tokens; at most {max_draft} were asked for")
        if n and (int(draft_ids.min()) < 0 or int(draft_ids.max()) >= self.vocab_size):
            raise RuntimeError(f"drafter {drafter.name!r} proposed an id outside the target's vocabulary 0..{self.vocab_size - 1}")
        if draft_probs is not None and tuple(draft_probs.shape) != (n, self.vocab_size):
            raise RuntimeError(
                f"drafter {drafter.name!r} returned draft_probs of shape {tuple(draft_probs.shape)}, need ({n}, {self.vocab_size})"
            )

    # -- helpers --------------------------------------------------------------------------
    def _target_forward(self, token_ids: list[int], *, logits_to_keep: int) -> torch.Tensor:
        """Feed ``token_ids`` after the cached prefix; ``[n, V]`` logits of the kept positions."""
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        out = self.target_model(
            input_ids=input_ids,
            cache=self.target_cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
        )
        return out.logits[0]

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


@dataclass
class _Generation:
    """Mutable state of one generation (kept per call, never on the engine)."""

    ids: list[int]
    detok: StreamingDetokenizer
    token_ids: list[int] = field(default_factory=list)
    kinds: list[TokenKind] = field(default_factory=list)
    stop: StopReason | None = None
    drafter: Drafter | None = None  # the drafter in use; None when target-only or after it failed
    drafter_failure: DrafterFailedEvent | None = None
    round_index: int = 0
    decode_start: float = 0.0
    paused_s: float = 0.0  # time the consumer held the stream (between yields), not decoding


def _token_event(
    token: int,
    kind: TokenKind,
    text: str,
    pos: int,
    round_index: int,
    num_drafted: int,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
) -> TokenEvent:
    target_prob = float(target_probs[pos, token])
    draft_prob = rejected = rejected_p = rejected_q = None
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
        num_drafted=num_drafted,
    )
