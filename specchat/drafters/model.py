"""Model drafter: a small sibling model or an int4 copy of the target proposes tokens.

It runs its model through the runtime seam (:class:`specchat.core.runtime.ModelRuntime`, with a
KV cache of its own) and never touches a model object. Invariant between calls: the cache
holds a prefix of the committed sequence that is at most ``len(ids) - 1`` long; ``propose`` feeds whatever committed tokens it
has not seen (one normally; two after full acceptance, since the last draft token is never fed
to the drafter; the whole prompt on the first call) and then one token per further draft.

**Bounded catch-up.** A drafter that sat out many rounds (adaptive γ paused it, or the hybrid's
lookup drafted a long copy) would have to read every token committed meanwhile before it can
draft: on llama.cpp with the 0.5B sibling, ~50 tokens cost ~730 ms, 12 target steps, which no
probe budget can carry. It reads only the last :data:`MAX_CATCH_UP_TOKENS` of them instead and
its cache skips the rest (a gap: the cache then holds the committed ids up to the gap, then the
ids after it). Lossless all the same: the target accepts or rejects against the q the drafter
actually drew from (Leviathan et al. 2023, Theorem 3.5 holds for any q); only α may drop a
little. The kept conversation prefix ends at the gap.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from specchat.core.config import GenerationConfig
from specchat.core.draft import Draft, Drafter, DraftTrace
from specchat.core.prefill import prefill_steps
from specchat.core.runtime import ModelRuntime, keep_for_reuse, scored, synced_now
from specchat.core.sampling import logits_to_probs

# With adaptive γ and greedy decoding, drafting stops early once the drafter's own top
# probability (softmax of its raw logits) falls below this: a greedy draft is accepted when the
# two argmaxes agree, which an unsure drafter often misses, and every further draft step would
# build on it. 0.4 is transformers' default assistant_confidence_threshold. Not when sampling:
# there acceptance depends on how close q is to p, not on how peaked q is (a flat q equal to p
# is always accepted), so the γ controller alone decides.
CONFIDENCE_THRESHOLD = 0.4
# A drafter that is behind by more tokens than this reads only the last this many (see above);
# 16 covers a full hybrid lookup round (at most 12 accepted drafts and the token after them).
MAX_CATCH_UP_TOKENS = 16


class ModelDrafter(Drafter):
    """Draft with a causal LM that shares the target's tokenizer.

    Args:
        runtime: the drafter model behind the runtime seam, with its own KV cache (e.g.
            :class:`specchat.runtimes.transformers.TransformersRuntime`). Its vocabulary may
            have more or fewer rows than the target's (Qwen2.5 pads 151,936 vs 152,064): logits
            are cut or padded with -inf to ``target_vocab_size``.
        target_vocab_size: V of the target's logits; ``draft_probs`` rows have this length.
        num_tokenizer_ids: ``len(tokenizer)``; ids at or above it are padding rows and are
            never proposed.
        name: shown in the UI ("sibling", "int4").
        device: the target's device (where proposals go).
    """

    has_model = True
    max_catch_up_tokens = MAX_CATCH_UP_TOKENS  # committed ids read at most when behind (bounded catch-up)

    def __init__(
        self,
        runtime: ModelRuntime,
        *,
        target_vocab_size: int,
        num_tokenizer_ids: int,
        name: str,
        device: torch.device | str = "cpu",
    ):
        self.runtime = runtime
        self.name = name
        self.target_vocab_size = target_vocab_size
        self.num_tokenizer_ids = min(num_tokenizer_ids, target_vocab_size)
        self.device = torch.device(device)
        self.model_device = runtime.device
        self.num_input_ids = int(runtime.num_input_ids)
        self.active = False  # between begin() and end(): the runtime's cache is this generation's
        self._kept = False  # the runtime's cache holds a finished generation's prefix, for the next begin()
        self._skipped = 0  # committed ids never fed (bounded catch-up): cache position i + skipped past the gap
        self._gap_at: int | None = None  # the cache position where the first gap is, if any
        self._window_at = 0  # the cache position right after the latest gap

    @property
    def num_skipped(self) -> int:
        """Committed ids of this generation the drafter never read (bounded catch-up)."""
        return self._skipped

    @property
    def cache_len(self) -> int:
        return self.runtime.num_cached

    @property
    def kept_ids(self) -> tuple[int, ...] | None:
        """The ids whose states are kept for the next :meth:`begin` (None when nothing is)."""
        return self.runtime.cached_ids if self._kept and self.runtime.num_cached else None

    def begin(self, prompt_ids: list[int]) -> None:
        """A cache prefilled with all prompt tokens but the last: the kept cache of the last
        generation (:meth:`keep_prefix`) as far as the prompt starts with the same ids, then
        the rest computed (:meth:`begin_in_steps`, run to its end)."""
        for _ in self.begin_in_steps(prompt_ids):
            pass

    def begin_in_steps(self, prompt_ids: list[int]) -> Generator[tuple[int, int, float], None, None]:
        """:meth:`begin` in steps, for an engine that reports a long prefill and can stop it:
        yields ``(tokens computed, tokens to compute, seconds of the last pass)``, first
        ``(0, n, 0.0)``, then after each forward pass
        (:func:`specchat.core.prefill.prefill_steps`). Nothing is yielded when nothing is
        computed (all of it kept, or an id the drafter cannot read)."""
        prefix = prompt_ids[:-1]
        reuse, self._kept = self._kept, False  # in use until the generation ends normally
        self.active = True
        self._skipped, self._gap_at, self._window_at = 0, None, 0
        if prefix and max(prefix) >= self.num_input_ids:  # an id the drafter cannot read: no prefill
            self.runtime.start([], max_positions=self.runtime.context_length, reuse=False)
            return
        reused = self.runtime.start(prefix, max_positions=self.runtime.context_length, reuse=reuse)
        yield from prefill_steps(self.runtime, prefix[reused:])

    def keep_prefix(self, ids: list[int]) -> None:
        """Keep the cache for the next :meth:`begin` (the engine calls this after a generation that
        ended normally, before :meth:`end`): it holds the states of ``ids[:L]``, L = min(cached,
        len(ids) − 1), or up to its gap (bounded catch-up). A cache that cannot be cut is not kept
        (:meth:`end` releases it)."""
        ids = ids if self._gap_at is None else ids[: self._gap_at + 1]
        self._kept = keep_for_reuse(self.runtime, ids)

    def forget_prefix(self) -> None:
        """Drop the kept cache (the next :meth:`begin` prefills everything; frees its memory)."""
        self._kept = False
        if not self.active:
            self.runtime.release()

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        """Draw up to ``max_tokens`` tokens autoregressively from the drafter (q warped like p).

        Greedy (temperature 0) drafts are the argmax and q is one-hot (``draft_probs=None``).
        With ``config.adaptive_gamma`` and greedy decoding, drafting stops after a token whose
        drafter top probability is below :data:`CONFIDENCE_THRESHOLD` (at least one is drafted).
        How many tokens are drafted never changes which are committed (verification decides),
        so the output distribution is unchanged. More than :data:`MAX_CATCH_UP_TOKENS` unread
        committed ids: only the last that many are read (bounded catch-up, module docstring).
        """
        if not self.active:
            raise RuntimeError("ModelDrafter.propose called before begin()")
        fed = self.cache_len + self._skipped  # committed ids accounted for: read, or skipped
        if fed >= len(ids):
            raise RuntimeError(f"drafter cache ({self.cache_len}, {self._skipped} skipped) must be shorter than ids ({len(ids)})")
        pending = ids[fed:]
        if len(pending) > MAX_CATCH_UP_TOKENS:
            if self._gap_at is None:
                self._gap_at = self.cache_len
            self._skipped += len(pending) - MAX_CATCH_UP_TOKENS
            self._window_at = self.cache_len
            pending = pending[-MAX_CATCH_UP_TOKENS:]
        if max(pending) >= self.num_input_ids:
            # the target committed an id past the drafter's embedding (a padding row of the
            # target's larger vocab): the drafter cannot read it, so it drafts nothing now
            return Draft(torch.empty(0, dtype=torch.long, device=self.device), None, 0)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        raw: list[torch.Tensor] = []  # trace only: raw logits and the time of each step
        step_ms: list[float] = []
        while len(tokens) < max_tokens:
            if config.trace:
                t_step = synced_now(self.model_device)
            logits = self._align(self._forward(pending))
            q = logits_to_probs(logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)[0]
            if config.greedy:
                token = int(q.argmax())
            else:
                token = int(torch.multinomial(q, 1, generator=generator))
                probs.append(q)
            tokens.append(token)
            pending = [token]
            if config.trace:
                raw.append(logits[0])
                step_ms.append((synced_now(self.model_device) - t_step) * 1000)
            if (
                config.adaptive_gamma
                and config.greedy
                and float(torch.softmax(logits[0], dim=-1).max()) < CONFIDENCE_THRESHOLD
            ):
                break
        draft_probs = torch.stack(probs) if probs else None
        trace = DraftTrace(raw_logits=torch.stack(raw), step_ms=tuple(step_ms)) if config.trace else None
        return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), draft_probs, len(tokens), trace)

    def rollback(self, num_valid: int) -> None:
        """Cut the cache to the first ``num_valid`` committed ids at most (the engine passes
        committed_len − 1): cache position ``num_valid − skipped`` past a gap."""
        if not self.active:
            return
        keep = num_valid - self._skipped
        if self._gap_at is not None and keep < self._window_at:
            # below the latest gap (the engine never cuts there): keep the prefix before the first
            keep, self._skipped, self._gap_at = min(num_valid, self._gap_at), 0, None
        if self.cache_len > keep:
            self.runtime.truncate(keep)

    def end(self) -> None:
        """End the generation: its cache is released unless :meth:`keep_prefix` kept it."""
        self.active = False
        if not self._kept:
            self.runtime.release()

    def _forward(self, token_ids: list[int]) -> torch.Tensor:
        """Feed ``token_ids``; ``[1, V_drafter]`` float32 logits of the last one (on the
        target's device)."""
        return scored(self.runtime, token_ids, 1).to(self.device)

    def _align(self, logits: torch.Tensor) -> torch.Tensor:
        """``[1, V_drafter]`` → ``[1, V_target]`` with padding/unused ids at -inf."""
        v = logits.shape[-1]
        if v >= self.target_vocab_size:
            logits = logits[:, : self.target_vocab_size].clone()  # a copy: the padding ids are set below
        else:
            pad = logits.new_full((1, self.target_vocab_size - v), float("-inf"))
            logits = torch.cat([logits, pad], dim=-1)
        if self.num_tokenizer_ids < self.target_vocab_size:
            logits[:, self.num_tokenizer_ids :] = float("-inf")
        return logits
