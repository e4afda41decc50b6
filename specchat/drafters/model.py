"""Model drafter: a small sibling model or an int4 copy of the target proposes tokens.

It keeps its own KV cache. Invariant between calls: the cache holds a prefix of the committed
sequence that is at most ``len(ids) - 1`` long; ``propose`` feeds whatever committed tokens it
has not seen (one normally; two after full acceptance, since the last draft token is never fed
to the drafter; the whole prompt on the first call) and then one token per further draft.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specchat.core.config import GenerationConfig
from specchat.core.kv import KeptPrefix, cut_cache, keep_prefix, take_prefix
from specchat.core.sampling import logits_to_probs
from specchat.drafters.base import Draft, DraftTrace, embedding_rows, synced_now

# With adaptive γ and greedy decoding, drafting stops early once the drafter's own top
# probability (softmax of its raw logits) falls below this: a greedy draft is accepted when the
# two argmaxes agree, which an unsure drafter often misses, and every further draft step would
# build on it. 0.4 is transformers' default assistant_confidence_threshold. Not when sampling:
# there acceptance depends on how close q is to p, not on how peaked q is (a flat q equal to p
# is always accepted), so the γ controller alone decides.
CONFIDENCE_THRESHOLD = 0.4


class ModelDrafter:
    """Draft with a causal LM that shares the target's tokenizer.

    Args:
        model: the drafter model (eval mode). Its embedding may have more or fewer rows than
            the target's (Qwen2.5 pads 151,936 vs 152,064): logits are cut or padded with -inf
            to ``target_vocab_size``.
        target_vocab_size: V of the target's logits; ``draft_probs`` rows have this length.
        num_tokenizer_ids: ``len(tokenizer)``; ids at or above it are padding rows and are
            never proposed.
        name: shown in the UI ("sibling", "int4").
        device: the target's device (where proposals go).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        target_vocab_size: int,
        num_tokenizer_ids: int,
        name: str,
        device: torch.device | str = "cpu",
    ):
        self.model = model
        self.name = name
        self.target_vocab_size = target_vocab_size
        self.num_tokenizer_ids = min(num_tokenizer_ids, target_vocab_size)
        self.device = torch.device(device)
        self.model_device = next(model.parameters()).device
        self.num_input_ids = embedding_rows(model, output=False)
        self.cache: DynamicCache | None = None
        self.kept: KeptPrefix | None = None  # the last generation's cache, for the next begin()

    @property
    def cache_len(self) -> int:
        return 0 if self.cache is None else self.cache.get_seq_length()

    def begin(self, prompt_ids: list[int]) -> None:
        """A cache prefilled with all prompt tokens but the last: the kept cache of the last
        generation (:meth:`keep_prefix`) as far as the prompt starts with the same ids, then
        the rest computed."""
        prefix = prompt_ids[:-1]
        if prefix and max(prefix) >= self.num_input_ids:  # an id the drafter cannot read: no prefill
            self.kept, self.cache = None, DynamicCache(config=self.model.config)
            return
        cache, reused = take_prefix(self.kept, prefix)
        self.kept = None
        self.cache = cache if cache is not None else DynamicCache(config=self.model.config)
        if len(prefix) > reused:
            self._forward(prefix[reused:], logits=False)

    def keep_prefix(self, ids: list[int]) -> None:
        """Keep the cache for the next :meth:`begin` (the engine calls this after a generation that
        ended normally, before :meth:`end`): it holds the states of a prefix of ``ids``."""
        self.kept = keep_prefix(self.cache, ids)

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        """Draw up to ``max_tokens`` tokens autoregressively from the drafter (q warped like p).

        Greedy (temperature 0) drafts are the argmax and q is one-hot (``draft_probs=None``).
        With ``config.adaptive_gamma`` and greedy decoding, drafting stops after a token whose
        drafter top probability is below :data:`CONFIDENCE_THRESHOLD` (at least one is drafted).
        How many tokens are drafted never changes which are committed (verification decides),
        so the output distribution is unchanged.
        """
        if self.cache is None:
            raise RuntimeError("ModelDrafter.propose called before begin()")
        if self.cache_len >= len(ids):
            raise RuntimeError(f"drafter cache ({self.cache_len}) must be shorter than ids ({len(ids)})")
        pending = ids[self.cache_len :]
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
            logits = self._align(self._forward(pending, logits=True))
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
        """Cut the cache to at most ``num_valid`` tokens (the engine passes committed_len − 1)."""
        if self.cache is not None and self.cache_len > num_valid:
            cut_cache(self.cache, num_valid)

    def end(self) -> None:
        self.cache = None

    def _forward(self, token_ids: list[int], *, logits: bool) -> torch.Tensor | None:
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.model_device)
        out = self.model(
            input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=1
        )
        return out.logits[:, -1, :].to(self.device) if logits else None

    def _align(self, logits: torch.Tensor) -> torch.Tensor:
        """``[1, V_drafter]`` → ``[1, V_target]`` with padding/unused ids at -inf."""
        v = logits.shape[-1]
        if v >= self.target_vocab_size:
            logits = logits[:, : self.target_vocab_size].float()
        else:
            pad = logits.new_full((1, self.target_vocab_size - v), float("-inf"))
            logits = torch.cat([logits.float(), pad], dim=-1)
        if self.num_tokenizer_ids < self.target_vocab_size:
            logits[:, self.num_tokenizer_ids :] = float("-inf")
        return logits
