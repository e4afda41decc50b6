"""Hybrid drafter: lookup first, then the model.

Each round it first looks the context (prompt + reply so far) up for an earlier occurrence of
its last tokens, as prompt lookup does, and copies what followed: free, and often long and
right in code edits and answers that quote a passage. Only when the lookup finds no match of
at least ``min_match`` tokens does a model drafter (the sibling or the int4 copy) draft the
round. The lookup prefers, token by token, the continuation seen most often after the matched
suffix (the latest occurrence on a tie), in the manner of suffix decoding (Oliaro et al. 2024,
"SuffixDecoding"), and tries the longest suffix first (up to ``max_ngram`` tokens).

Which source drafts a round is a function of the committed tokens only, and each source's q
is the distribution its tokens were drawn from (one-hot for the lookup; the model's softmax
for the model), so verification keeps the output distribution exactly the target's
(Leviathan et al. 2023, Algorithm 1, applied round by round).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS, GenerationConfig
from specchat.core.draft import Draft, Drafter, DraftTrace
from specchat.drafters.model import ModelDrafter


def frequent_continuation(
    ids: np.ndarray, max_tokens: int, max_ngram: int, min_ngram: int
) -> tuple[list[int], int | None, int | None]:
    """The most frequent continuation of the longest earlier match of the context's suffix.

    The longest suffix of ``ids`` (``max_ngram`` tokens down to ``min_ngram``) that occurs
    earlier is found; among the places where it occurs, the continuation is built one token
    at a time: the token that follows most often among the places still in the running (on a
    tie, the one whose latest place is latest), keeping only the places that agree with it.

    Args:
        ids: ``[L]`` int64, the context.
        max_tokens: at most this many tokens are returned (>= 1).
        max_ngram, min_ngram: longest and shortest suffix to match (1 <= min <= max).

    Returns:
        ``(tokens, copy_start, match_len)`` with ``ids[copy_start - match_len : copy_start]``
        equal to the last ``match_len`` ids and ``tokens == ids[copy_start : copy_start +
        len(tokens)]`` (the latest place that agrees with every token); ``([], None, None)``
        when no suffix of at least ``min_ngram`` tokens occurs earlier.
    """
    length = len(ids)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = sliding_window_view(ids[: length - 1], n)  # window i covers ids[i : i+n], i+n <= length-1
        starts = np.flatnonzero((windows == ids[length - n :]).all(axis=1)) + n  # where each continuation starts
        if not starts.size:
            continue
        tokens: list[int] = []
        while len(tokens) < max_tokens:
            alive = starts[starts + len(tokens) < length]  # places whose continuation has this position
            if not alive.size:
                break
            nxt = ids[alive + len(tokens)]
            values, counts = np.unique(nxt, return_counts=True)
            best = values[counts == counts.max()]
            if best.size > 1:  # a tie: the token whose latest place is latest
                latest = {int(v): int(alive[nxt == v].max()) for v in best}
                token = max(latest, key=latest.__getitem__)
            else:
                token = int(best[0])
            tokens.append(token)
            starts = alive[nxt == token]
        if tokens:
            return tokens, int(starts.max()), n
    return [], None, None


class HybridDrafter(Drafter):
    """Draft from the context when it repeats itself, otherwise from a model.

    Args:
        model_drafter: the model part (a :class:`ModelDrafter` of its own: its KV cache is not
            shared with the standalone drafter of the same model).
        min_match: the shortest suffix match that makes a lookup round; shorter matches are
            too often wrong, so the model drafts those rounds. 3 by replaying the bench prompts'
            greedy rounds with costs measured on a 2-core CPU (``scripts/tune_hybrid.py``): with
            1, lookups of a single token displaced good model drafts in code (6.09 tokens/s
            against the model alone's 7.48); from 3 on, code equals the model alone and edits
            gain 1.27× over it; past 3, passages lose some of their gain (10.21 → 9.22).
        max_ngram: the longest suffix tried.
        long_match: a lookup round whose match is at least this long is a ``"lookup-long"`` round,
            a shorter one a ``"lookup-short"`` round (:meth:`round_source`); adaptive γ keeps a
            controller for each, since their acceptance differs. Default ``max_ngram``: replaying
            the bench prompts' greedy replies on llama.cpp (SmolLM2-360M, 96 tokens, every
            position), the lookup's first token was right 95 % of the time after an 8-token
            match (305 positions) against 59 % after a 3-token one (54 positions), 75–90 % in
            between; a short match failing in a reply's first lines paused the lookup for the
            whole code block that followed it.
        name: shown in the UI.

    Raises:
        ValueError: ``not 1 <= min_match <= max_ngram`` or ``not min_match <= long_match <=
            max_ngram``.
    """

    has_model = True

    def __init__(self, model_drafter: ModelDrafter, *, min_match: int = 3, max_ngram: int = 8,
                 long_match: int | None = None, name: str = "hybrid"):
        if not 1 <= min_match <= max_ngram:
            raise ValueError(f"need 1 <= min_match <= max_ngram, got {min_match}, {max_ngram}")
        long_match = max_ngram if long_match is None else long_match
        if not min_match <= long_match <= max_ngram:
            raise ValueError(f"need min_match <= long_match <= max_ngram, got {min_match}, {long_match}, {max_ngram}")
        self.model_drafter = model_drafter
        self.min_match = min_match
        self.max_ngram = max_ngram
        self.long_match = long_match
        self.name = name
        self.device = model_drafter.device
        self.num_lookup_rounds = 0  # of the current generation (for the record; not used to decide)
        self.num_model_rounds = 0
        self._last: tuple[int, tuple[int, ...], tuple] | None = None  # the latest lookup, reused

    @property
    def runtime(self):
        """The model part's runtime (for its size: ``ModelRuntime.model_size``)."""
        return self.model_drafter.runtime

    @property
    def kept_ids(self) -> tuple[int, ...] | None:
        """The model part's kept conversation prefix (see :meth:`ModelDrafter.keep_prefix`)."""
        return self.model_drafter.kept_ids

    def forget_prefix(self) -> None:  # ChatService.forget_prefix drops it
        self.model_drafter.forget_prefix()

    @property
    def max_catch_up_tokens(self) -> int:
        """The model drafter's bound on a catch-up (:data:`specchat.drafters.model.MAX_CATCH_UP_TOKENS`)."""
        return self.model_drafter.max_catch_up_tokens

    def begin(self, prompt_ids: list[int]) -> None:
        for _ in self.begin_in_steps(prompt_ids):
            pass

    def begin_in_steps(self, prompt_ids: list[int]) -> Generator[tuple[int, int, float], None, None]:
        """:meth:`begin` in steps: the model drafter's (:meth:`ModelDrafter.begin_in_steps`)."""
        # within a generation the committed ids only grow, so their length and tail name the context
        self.num_lookup_rounds = self.num_model_rounds = 0
        self._last = None
        yield from self.model_drafter.begin_in_steps(prompt_ids)

    def keep_prefix(self, ids: list[int]) -> None:
        self.model_drafter.keep_prefix(ids)

    def _lookup(self, ids: list[int]) -> tuple[list[int], int | None, int | None]:
        """:func:`frequent_continuation` of ``ids`` up to :data:`MAX_NUM_SPECULATIVE_TOKENS` tokens
        (the last result is reused for the same context: :meth:`round_source` then
        :meth:`propose`). Its first k tokens are what the lookup proposes for at most k."""
        key = (len(ids), tuple(ids[-self.max_ngram - 1 :]))
        if self._last is None or self._last[:2] != key:
            found = frequent_continuation(np.asarray(ids, dtype=np.int64), MAX_NUM_SPECULATIVE_TOKENS,
                                          self.max_ngram, self.min_match)
            self._last = (*key, found)
        return self._last[2]

    def round_source(self, ids: list[int]) -> str:
        """Which source drafts the next round for the committed ``ids``: ``"lookup-long"`` (a
        match of at least ``long_match`` tokens), ``"lookup-short"`` or ``"model"``. The engine
        keeps an adaptive-γ controller per source (their acceptance and costs differ). A
        function of ``ids`` only, so the choice of γ never looks at the tokens it drafts."""
        tokens, _, match_len = self._lookup(ids)
        if not tokens or match_len is None:  # (a lookup that found tokens has a match length)
            return "model"
        return "lookup-long" if match_len >= self.long_match else "lookup-short"

    def free_draft(self, ids: list[int]) -> list[int]:
        """What a lookup round would draft for ``ids`` (free), or [] when the model would draft the
        round (not free): adaptive γ judges it against the target's token in a round that drafts
        nothing."""
        return self._lookup(ids)[0]

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        """The lookup's continuation (q one-hot, no model step) when the context's last
        ``min_match`` or more tokens occurred before; else the model drafter's draft. The model
        catches up on the tokens committed in lookup rounds in its next step (one forward pass
        over all of them)."""
        tokens, copy_start, match_len = self._lookup(ids)
        tokens = tokens[:max_tokens]  # a prefix of the continuation: every place it names agrees with it
        if tokens:
            self.num_lookup_rounds += 1
            trace = DraftTrace(copy_start=copy_start, match_len=match_len) if config.trace else None
            return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), None, 0, trace)
        self.num_model_rounds += 1
        return self.model_drafter.propose(ids, max_tokens, config, generator)

    def rollback(self, num_valid: int) -> None:
        self.model_drafter.rollback(num_valid)

    def end(self) -> None:
        self.model_drafter.end()
