"""The speculative decoding loop: prefill → rounds of draft / verify / commit / roll back.

Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023, Algorithm 1, with KV caches for both models. Target-only decoding (no drafter) is
the same loop with zero drafts per round, so speed comparisons are like for like.

The engine runs the target through the runtime seam (:class:`specchat.core.runtime.ModelRuntime`:
"feed these ids, give me float32 logits", "keep the first n positions") and never touches a
model object or a KV cache class, so the same loop runs on any runtime.

Cache invariant, between rounds: the target cache holds exactly ``len(ids) - 1`` positions
(the last committed token is fed as the first input of the next verify pass), and the
drafter's cache holds at most ``len(ids) - 1``.

Timing: with ``GenerationConfig.measure_speedup`` the engine makes a round target-only now and
then (:func:`specchat.core.costs.timing_rounds_due`), so that the reply itself measures what one
target-only step costs under the current load (t₁); every speedup is then measured against
that, like for like. Such a round is Algorithm 1 with γ = 0: a plain decode step, not waste.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import torch

from specchat.core.adaptive import AdaptiveGamma, GammaPolicy
from specchat.core.config import CancelFlag, GenerationConfig
from specchat.core.costs import timing_round_due
from specchat.core.draft import Draft, Drafter
from specchat.core.events import DoneEvent, DrafterFailedEvent, Event, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.core.generation import Generation, token_event
from specchat.core.prefill import E, PrefillRates, run_prefill
from specchat.core.round_costs import RelativeCosts
from specchat.core.roundtrace import build_round_trace
from specchat.core.runtime import ModelRuntime, keep_for_reuse, scored, synced_now
from specchat.core.sampling import VerifyResult, logits_to_probs, verify_draft
from specchat.core.text import StreamingDetokenizer, Tokenizer


class SpeculativeEngine:
    """Generate with a target model, optionally speculating with a drafter.

    Args:
        target: the target model behind the runtime seam (its KV cache included); its output
            distribution is preserved exactly. E.g. :class:`specchat.runtimes.transformers.TransformersRuntime`
            (eager, or compiled: target-only generations run the same passes, so speed
            comparisons stay like for like).
        tokenizer: used for text deltas and stop strings (``decode``); None yields empty text.
        eos_token_ids: ids that end the reply when the target commits them.
        context_length: positions the target may use (prompt + reply); defaults to the
            runtime's ``context_length``.
        prefix_cache: keep the target's KV cache (and a model drafter's) after each generation
            that ended normally, so that the next prompt prefills only what does not start like
            the last one (the next turn of a chat prefills its new message, not the history).
            One cache per model, at most ``context_length`` positions: memory bounded by one
            conversation.

    One engine serves one generation at a time (callers serialise; the app holds a lock).
    """

    def __init__(
        self,
        target: ModelRuntime,
        tokenizer: Tokenizer | None,
        *,
        eos_token_ids: Iterable[int] = (),
        context_length: int | None = None,
        prefix_cache: bool = True,
    ):
        self.target = target
        self.prefix_cache = prefix_cache
        self._reusable = False  # the target's cache holds a finished generation's prefix, fit for reuse
        self._finished: tuple[list[int], bool] | None = None  # (ids, drafter still in use) at the end
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        self.context_length = int(context_length or target.context_length)
        self.device = target.device
        self.vocab_size = int(target.vocab_size)
        self._current: object | None = None
        # adaptive γ: one controller per (drafter name, γ_max, greedy, round source) and one round-cost
        # model per (drafter name, γ_max, greedy), kept across generations (core/adaptive.GammaPolicy)
        self.gamma_controllers: dict[tuple[str, int, bool, str], AdaptiveGamma] = {}
        self.gamma_costs: dict[tuple[str, int, bool], RelativeCosts] = {}
        self._token_texts: dict[int, str] = {}  # id → text, for traces
        self.prefill_rates = PrefillRates()  # each model's prefill time per token (PrefillEvent.remaining_ms)

    # -- public ---------------------------------------------------------------------------
    @property
    def kept_ids(self) -> tuple[int, ...] | None:
        """The ids whose target states are kept for the next prompt (None when nothing is)."""
        return self.target.cached_ids if self._reusable and self.target.num_cached else None

    @property
    def released(self) -> bool:
        """Whether the target holds no state but the prefix kept for the next prompt: nothing of
        a generation in progress, cancelled mid-stream or abandoned."""
        kept = self.kept_ids
        return self.target.num_cached == (len(kept) if kept is not None else 0)

    @property
    def generating(self) -> bool:
        """Whether a generation owns the engine now (one running, or abandoned and not yet finalised)."""
        return self._current is not None

    def forget_prefix(self) -> None:
        """Drop the kept cache (the next prompt is prefilled whole; frees its memory)."""
        self._reusable = False
        self.target.release()

    def generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        cancel: CancelFlag | None = None,
        *,
        prefill_progress: bool = False,
    ) -> Iterator[Event]:
        """Stream the events of one generation.

        Model work runs under ``torch.inference_mode()`` that is entered and left inside each
        round, never held across a ``yield``: a consumer may advance the stream from any
        thread (Gradio does) and runs its own code in normal mode.

        Args:
            prompt_ids: the prompt, 1 <= len < context_length.
            drafter: proposes drafts each round; None decodes with the target only.
            config: sampling settings and γ (``num_speculative_tokens``).
            cancel: when set, generation stops before the next round, or the prefill before its
                next forward pass (stop_reason cancelled).
            prefill_progress: stream PrefillEvents while the prompt is prefilled (a long prompt on
                a CPU takes minutes: ~100 tokens/s for a 1.5B model on 2 cores).

        With ``config.measure_speedup`` and a drafter, rounds 2, 6, 22, 38, … draft nothing
        unless enough rounds drafted nothing already, and more while t₁'s samples scatter
        (timing rounds, ``RoundEvent.timing``; :func:`specchat.core.costs.timing_round_due`).

        Yields:
            With ``prefill_progress``, PrefillEvents first. For each round, its TokenEvents then
            one RoundEvent; finally one DoneEvent. If the drafter raises (in ``begin``,
            ``propose`` or ``rollback``; e.g. out of memory), one DrafterFailedEvent, and the
            generation goes on with the target only.

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
            raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the context window holds "
                             f"{self.context_length}, so there is no room for a reply")
        token = object()  # this generation's identity, for a safe cleanup
        self._current = token
        try:
            yield from self._generate(prompt_ids, drafter, config, cancel, prefill_progress)
        finally:
            # An abandoned generator may be finalised late (by the garbage collector) while a
            # newer generation runs: only the generation that owns the state cleans it up.
            if self._current is token:
                self._current = None
                finished, self._finished = self._finished, None
                if finished is not None and self.prefix_cache:  # a generation that ended normally
                    ids, drafter_ok = finished
                    self._reusable = keep_for_reuse(self.target, ids)
                    if not self._reusable:  # nothing to keep, or a cache that cannot be cut
                        self.target.release()
                    if drafter_ok and drafter is not None:
                        drafter.keep_prefix(ids)
                else:
                    self.target.release()
                if drafter is not None:
                    drafter.end()

    # -- the loop -------------------------------------------------------------------------
    def _generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        cancel: CancelFlag | None,
        prefill_progress: bool = False,
    ) -> Iterator[Event]:
        if cancel is not None and cancel.is_set():  # stopped while it waited (e.g. in the app's queue)
            yield DoneEvent(StopReason.CANCELLED, (), (), "", 0.0, 0.0, len(prompt_ids), prompt_ids=tuple(prompt_ids))
            return
        seed = config.seed if config.seed is not None else random.randrange(2**63)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        state = Generation(
            ids=list(prompt_ids), detok=StreamingDetokenizer(self.tokenizer, config.stop_strings), drafter=drafter,
            num_prompt_tokens=len(prompt_ids),
        )

        t0 = self.now()
        self._finished = None
        prefix = state.ids[:-1]  # every prompt token but the last (the first round feeds it)
        with torch.inference_mode():
            reusable, self._reusable = self._reusable and self.prefix_cache, False  # in use until it ends normally
            reused = self.target.start(
                prefix, max_positions=len(prompt_ids) + config.max_new_tokens, reuse=reusable
            )
        prefilled, whole = yield from run_prefill(self, state, prefix[reused:], t0, cancel, prefill_progress)
        prefill_ms = (self.now() - t0 - state.paused_s) * 1000
        state.paused_s = 0.0
        state.decode_start = self.now()
        if not whole:  # Stop in the prefill: what the target read stays for reuse (a cache holds all but the last id)
            self._finished = (prompt_ids[: self.target.num_cached + 1], False)
            yield DoneEvent(StopReason.CANCELLED, (), (), "", prefill_ms, 0.0, len(prompt_ids),
                            prompt_ids=tuple(prompt_ids), num_prefilled=prefilled)
            return
        if state.drafter_failure is not None:
            yield from self.hand_over(state, [state.drafter_failure])

        # adaptive γ: a controller per drafting source, kept across generations (GammaPolicy)
        policy = None
        if state.drafter is not None and config.adaptive_gamma:
            # a paused model drafter's catch-up reads up to max_catch_up_tokens at its prompt-reading rate
            rate = self.prefill_rates.ms_per_token.get(state.drafter.name)
            catch_up = state.drafter.max_catch_up_tokens
            policy = GammaPolicy(self.gamma_controllers, self.gamma_costs, state.drafter,
                                 config.num_speculative_tokens, config.greedy,
                                 catch_up_ms=rate * catch_up if rate and catch_up else None)

        final_text = ""
        while state.stop is None:
            if cancel is not None and cancel.is_set():
                state.stop = StopReason.CANCELLED
                final_text = state.detok.flush()  # text held back for a possible stop string
                break
            drafting = state.drafter is not None
            timing = state.timing_next  # decided (and announced) at the end of the last round
            if policy is not None and state.drafter is not None:
                gamma, drafting_paused, own_timing = policy.choose(state.ids, timing)
                timing = timing or own_timing  # the controller's own target-only round to time t₁
            else:
                gamma, drafting_paused = (0 if timing else config.num_speculative_tokens), False
            committed_before = len(state.ids)
            with torch.inference_mode():
                events = self._round(state, config, generator, gamma, timing=timing, drafting_paused=drafting_paused,
                                     paused_speedup=policy.paused_speedup if policy is not None and drafting_paused else None)
            if drafting and state.drafter is None and state.drafter_failure is not None:  # the drafter failed this round
                policy = None
                events.insert(0, state.drafter_failure)
            elif policy is not None:
                policy.update(cast(RoundEvent, events[-1]), state.ids[committed_before:])  # a round ends with its RoundEvent
            yield from self.hand_over(state, events)  # outside inference mode: the consumer's code runs normally

        self._finished = (list(state.ids), state.drafter is not None)
        yield DoneEvent(
            stop_reason=state.stop,
            token_ids=tuple(state.token_ids),
            kinds=tuple(state.kinds),
            text=state.detok.text,
            prefill_ms=prefill_ms,
            decode_ms=self._decode_ms(state),
            num_prompt_tokens=len(prompt_ids),
            final_text=final_text,
            prompt_ids=tuple(prompt_ids),
            num_prefilled=len(prefix) - reused,
            drafter_prefill_ms=state.drafter_prefill_ms,
        )

    # -- one round: Leviathan et al. 2023, Algorithm 1 --------------------------------------
    def _round(
        self,
        state: Generation,
        config: GenerationConfig,
        generator: torch.Generator,
        num_speculative_tokens: int,
        *,
        timing: bool = False,
        drafting_paused: bool = False,
        paused_speedup: float | None = None,
    ) -> list[Event]:
        """One round of γ = ``num_speculative_tokens``: the drafter proposes up to γ tokens,
        the target checks them all in ONE forward pass and accepts a prefix, both caches are
        cut back to the verified prefix, and the tokens are committed. Returns the round's
        TokenEvents, then its RoundEvent. With no drafter (or γ = 0, a timing round) the round
        is a plain target-only decode step that commits one target token."""
        num_committed_before = len(state.ids)
        t_start, asked = self.now(), state.drafter is not None and num_speculative_tokens > 0  # else no drafter time
        draft = self._draft(state, config, generator, num_speculative_tokens)  # 1. x1..xγ and q
        t_verify = self.now()
        target_logits, target_probs, result = self._verify(state, draft, config, generator)  # 2-4. p, accept, resample, bonus or target
        verify_ms = (self.now() - t_verify) * 1000
        self._roll_back(state, num_committed_before + result.num_accepted)  # keep the verified prefix only
        token_events = self._commit(state, config, draft, result, target_probs)  # a stop may cut the commit
        round_event = self._round_event(
            state, config, num_speculative_tokens, draft, result, len(token_events),
            draft_ms=(t_verify - t_start) * 1000 if asked else 0.0, verify_ms=verify_ms, timing=timing, drafting_paused=drafting_paused,
            paused_speedup=paused_speedup,
        )
        if config.trace:  # recorded after the round's timing, and left out of the decode time
            t_trace = time.perf_counter()
            trace = build_round_trace(
                draft_ids=draft.token_ids, draft_probs=draft.draft_probs, draft_trace=draft.trace,
                target_logits=target_logits, target_probs=target_probs, result=result,
                token_events=token_events, token_text=self._token_text,
                context_ids=state.ids[:num_committed_before], num_prompt_tokens=state.num_prompt_tokens,
                decode=self._decode,
            )
            round_event = dataclasses.replace(round_event, trace=trace)
            state.paused_s += time.perf_counter() - t_trace
        return [*token_events, round_event]

    def _draft(
        self, state: Generation, config: GenerationConfig, generator: torch.Generator, num_speculative_tokens: int
    ) -> Draft:
        """Step 1: up to γ draft tokens and the q they were drawn from, capped so that the round
        (at most γ + 1 tokens) stays within max_new_tokens and the context window. An empty
        draft when there is no drafter, when γ = 0, or when the drafter failed (it is dropped)."""
        remaining = config.max_new_tokens - len(state.token_ids)
        room = self.context_length - len(state.ids)
        max_draft = min(num_speculative_tokens, remaining - 1, room - 1)
        if state.drafter is not None and max_draft > 0:
            draft = self.call_drafter(state, state.drafter.propose, state.ids, max_draft, config, generator)
            if state.drafter is not None:  # else it failed: this round and the rest are target-only
                self._check_draft(state.drafter, draft.token_ids, draft.draft_probs, max_draft)
                return draft
        return Draft(torch.empty(0, dtype=torch.long, device=self.device), None, 0)

    def _verify(
        self, state: Generation, draft: Draft, config: GenerationConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, VerifyResult]:
        """Steps 2-4: the target scores the last committed token and the γ drafts in one
        forward pass, giving raw logits and ``target_probs`` ``[γ + 1, V]`` float32 (p after the
        warpers), and :func:`~specchat.core.sampling.verify_draft` accepts a prefix, then resamples
        or adds a bonus (or, with no draft, draws the target's token). Returns (logits, p, the result)."""
        token_ids = [state.ids[-1], *draft.token_ids.tolist()]
        target_logits = scored(self.target, token_ids, len(token_ids))
        target_probs = logits_to_probs(
            target_logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p
        )
        return target_logits, target_probs, verify_draft(draft.token_ids, draft.draft_probs, target_probs, generator)

    def _roll_back(self, state: Generation, num_valid: int) -> None:
        """Cut the target's cache, and the drafter's, to the first ``num_valid`` positions:
        the committed prefix plus the accepted drafts (the rejected ones are removed)."""
        self.target.truncate(num_valid)
        if state.drafter is not None:
            self.call_drafter(state, state.drafter.rollback, num_valid)

    def _commit(
        self,
        state: Generation,
        config: GenerationConfig,
        draft: Draft,
        result: VerifyResult,
        target_probs: torch.Tensor,
    ) -> list[TokenEvent]:
        """Append the accepted drafts and the resampled, bonus or target token to the reply, one
        TokenEvent each. A stop (EOS, max_new_tokens, full context, stop string) may fall inside
        the commit: the reply ends there, nothing after it is committed, and the caches are cut
        to match (ALGORITHM.md)."""
        accepted = draft.token_ids[: result.num_accepted].tolist()
        new_tokens = [*accepted, result.next_token_id]
        new_kinds = [TokenKind.ACCEPTED] * len(accepted) + [result.next_kind]
        events: list[TokenEvent] = []
        for pos, (token, kind) in enumerate(zip(new_tokens, new_kinds)):
            state.ids.append(token)
            state.token_ids.append(token)
            state.kinds.append(kind)
            state.stop = self._stop_reason(state, config, token)
            text = state.detok.add(token, last=state.stop is not None)
            if state.detok.stopped:
                state.stop = StopReason.STOP_STRING
            events.append(token_event(token, kind, text, pos, state.round_index, draft, target_probs))
            if state.stop is not None:
                break
        if len(events) < len(new_tokens):
            # a stop inside the commit: the caches must not hold tokens past it
            self._roll_back(state, len(state.ids) - 1)
        return events

    def _stop_reason(self, state: Generation, config: GenerationConfig, token: int) -> StopReason | None:
        """Why the reply ends after committing ``token``, or None (an EOS wins over the budget)."""
        if token in self.eos_token_ids:
            return StopReason.EOS
        elif len(state.token_ids) >= config.max_new_tokens:
            return StopReason.MAX_NEW_TOKENS
        elif len(state.ids) >= self.context_length:
            return StopReason.CONTEXT_FULL
        return None

    def _timing_due(self, state: Generation, config: GenerationConfig) -> bool:
        """Whether the next round is a timing round: target-only, to time t₁ in this run
        (:func:`specchat.core.costs.timing_round_due`: the schedule, and more while t₁ is imprecise
        and its cost stays small)."""
        if state.drafter is None or not config.measure_speedup:
            return False
        t1, drafting = state.costs.target_step_ms, state.drafting_rounds
        return timing_round_due(
            state.round_index, state.num_target_only,
            t1_rel_se=state.costs.target_step_rel_se,
            speedup=len(state.token_ids) * t1 / state.elapsed_ms if t1 and state.elapsed_ms > 0 else None,
            tokens_per_round=state.drafting_tokens / drafting if drafting else None,
        )

    def _round_event(
        self,
        state: Generation,
        config: GenerationConfig,
        num_speculative_tokens: int,
        draft: Draft,
        result: VerifyResult,
        num_committed: int,
        *,
        draft_ms: float,
        verify_ms: float,
        timing: bool,
        drafting_paused: bool = False,
        paused_speedup: float | None = None,
    ) -> RoundEvent:
        """The RoundEvent that closes the round (and the round's bookkeeping in ``state``)."""
        num_drafted = int(draft.token_ids.shape[0])
        num_accepted = result.num_accepted
        judged = result.accepted_mask[: min(num_drafted, num_accepted + 1)]
        if num_committed < num_accepted + 1:
            # a round cut by a stop: only the committed (all accepted) drafts count
            num_accepted, judged = num_committed, judged[:num_committed]
        elapsed_ms = self._decode_ms(state)
        round_index, previous_elapsed_ms = state.round_index, state.elapsed_ms
        state.elapsed_ms = elapsed_ms
        if num_drafted == 0:
            state.num_target_only += 1
        else:
            state.drafting_rounds += 1
            state.drafting_tokens += num_committed
        state.round_index += 1
        event = RoundEvent(
            round_index=round_index,
            num_speculative_tokens=num_speculative_tokens if num_drafted or state.drafter is not None else 0,
            num_drafted=num_drafted,
            num_accepted=num_accepted,
            num_committed=num_committed,
            accepted_mask=judged,
            draft_ms=draft_ms,
            draft_steps=draft.num_steps,
            verify_ms=verify_ms,
            elapsed_ms=elapsed_ms,
            round_ms=elapsed_ms - previous_elapsed_ms,
            timing=timing,
            drafting_paused=drafting_paused,
            paused_speedup=paused_speedup,
        )
        state.costs.update(event)
        state.timing_next = state.stop is None and self._timing_due(state, config)
        return dataclasses.replace(event, timing_next=state.timing_next)

    # -- the consumer, the drafter's failures, contract checks ------------------------------
    def hand_over(self, state: Generation, events: list[E]) -> Iterator[E]:
        """Yield ``events``; the time the consumer holds them (rendering a page, say) is kept
        in ``state.paused_s`` and left out of the decode time, as it is not decoding."""
        start = self.now()
        yield from events
        state.paused_s += self.now() - start

    def _decode_ms(self, state: Generation) -> float:
        """Milliseconds spent decoding so far: wall time since the prefill ended, less the time
        the consumer held the stream between rounds."""
        return (self.now() - state.decode_start - state.paused_s) * 1000

    def call_drafter(self, state: Generation, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)``, a method of ``state.drafter``. If the drafter raises, it is dropped:
        ``state.drafter`` becomes None (the rest of the generation is target-only), a
        DrafterFailedEvent is kept in ``state.drafter_failure``, its caches are released, and
        None is returned."""
        drafter = state.drafter
        assert drafter is not None, "call_drafter calls a method of the generation's drafter"
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
            raise RuntimeError(f"drafter {drafter.name!r} returned draft_probs of shape {tuple(draft_probs.shape)}, "
                               f"need ({n}, {self.vocab_size})")

    # -- helpers --------------------------------------------------------------------------
    def _token_text(self, token_id: int) -> str:
        """One id's text (cached), for the trace's labels; "" without a tokenizer."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self._decode([token_id])
        return text

    def _decode(self, ids: list[int]) -> str:
        return "" if self.tokenizer is None or not ids else self.tokenizer.decode(ids, skip_special_tokens=False)

    def now(self) -> float:
        """The engine's clock, seconds (synced with the device's queued work)."""
        return synced_now(self.device)
