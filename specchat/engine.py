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
from collections.abc import Iterable, Iterator

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from specchat.config import GenerationConfig
from specchat.drafters.base import Drafter
from specchat.events import DoneEvent, Event, RoundEvent, StopReason, TokenEvent, TokenKind
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
        self.target_cache: DynamicCache | None = None

    # -- public ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream the events of one generation.

        Args:
            prompt_ids: the prompt, 1 <= len < context_length.
            drafter: proposes drafts each round; None decodes with the target only.
            config: sampling settings and γ (``num_speculative_tokens``).
            cancel: when set, generation stops before the next round (stop_reason cancelled).

        Yields:
            For each round, its TokenEvents then one RoundEvent; finally one DoneEvent.

        Raises:
            ValueError: empty prompt, or a prompt that leaves no room in the context window.
        """
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(prompt_ids) >= self.context_length:
            raise ValueError(
                f"the prompt has {len(prompt_ids)} tokens; the context window holds "
                f"{self.context_length}, so there is no room for a reply"
            )
        with torch.inference_mode():
            try:
                yield from self._generate(prompt_ids, drafter, config, cancel)
            finally:
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
        seed = config.seed if config.seed is not None else random.randrange(2**63)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        ids = list(prompt_ids)
        detok = StreamingDetokenizer(self.tokenizer, config.stop_strings)
        token_ids: list[int] = []
        kinds: list[TokenKind] = []

        t0 = self._now()
        self.target_cache = DynamicCache(config=self.target_model.config)
        if len(ids) > 1:
            self._target_forward(ids[:-1], logits_to_keep=1)
        if drafter is not None:
            drafter.begin(ids)
        prefill_ms = (self._now() - t0) * 1000
        decode_start = self._now()

        stop: StopReason | None = None
        round_index = 0
        while stop is None:
            if cancel is not None and cancel.is_set():
                stop = StopReason.CANCELLED
                break
            remaining = config.max_new_tokens - len(token_ids)
            room = self.context_length - len(ids)
            # a round commits at most n_draft + 1 tokens: stay within budget and context
            max_draft = min(config.num_speculative_tokens, remaining - 1, room - 1)

            t_draft = self._now()
            draft_ids = torch.empty(0, dtype=torch.long, device=self.device)
            draft_probs, draft_steps = None, 0
            if drafter is not None and max_draft > 0:
                draft = drafter.propose(ids, max_draft, config, generator)
                draft_ids, draft_probs, draft_steps = draft.token_ids, draft.draft_probs, draft.num_steps
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
            if drafter is not None:
                drafter.rollback(committed_before + result.num_accepted)

            num_committed = 0
            for pos, (token, kind) in enumerate(zip(new_tokens, new_kinds)):
                ids.append(token)
                token_ids.append(token)
                kinds.append(kind)
                num_committed += 1
                if token in self.eos_token_ids:
                    stop = StopReason.EOS
                elif len(token_ids) >= config.max_new_tokens:
                    stop = StopReason.MAX_NEW_TOKENS
                elif len(ids) >= self.context_length:
                    stop = StopReason.CONTEXT_FULL
                text = detok.add(token, last=stop is not None)
                if detok.stopped:
                    stop = StopReason.STOP_STRING
                yield self._token_event(
                    token, kind, text, pos, round_index, num_drafted, draft_ids, draft_probs, target_probs, result
                )
                if stop is not None:
                    break
            if num_committed < len(new_tokens):
                # a stop inside the commit: the caches must not hold tokens past it
                cut_cache(self.target_cache, len(ids) - 1)
                if drafter is not None:
                    drafter.rollback(len(ids) - 1)
            mask = result.accepted_mask[: min(num_drafted, result.num_accepted + 1)]
            yield RoundEvent(
                round_index=round_index,
                num_speculative_tokens=config.num_speculative_tokens if drafter is not None else 0,
                num_drafted=num_drafted,
                num_accepted=result.num_accepted,
                num_committed=num_committed,
                accepted_mask=mask,
                draft_ms=draft_ms,
                draft_steps=draft_steps,
                verify_ms=verify_ms,
                elapsed_ms=(self._now() - decode_start) * 1000,
            )
            round_index += 1

        yield DoneEvent(
            stop_reason=stop,
            token_ids=tuple(token_ids),
            kinds=tuple(kinds),
            text=detok.text,
            prefill_ms=prefill_ms,
            decode_ms=(self._now() - decode_start) * 1000,
            num_prompt_tokens=len(prompt_ids),
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

    @staticmethod
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
        result,
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
