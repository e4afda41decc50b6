"""Prompt n-gram lookup drafter (prompt lookup decoding; Saxena 2023).

No model: find the latest earlier occurrence of the last n committed tokens and propose what
followed it. The proposal is deterministic, so q is one-hot (``draft_probs=None``). When no
n-gram matches it proposes nothing and the round becomes one plain target step.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS, GenerationConfig
from specchat.core.draft import Draft, Drafter, DraftTrace


class NgramDrafter(Drafter):
    """Propose the continuation of the latest earlier match of the context's last n tokens.

    Args:
        device: where the proposed token tensor goes (the target's device).
        max_ngram: longest suffix to match (tried first), >= min_ngram.
        min_ngram: shortest suffix to match, >= 1.
    """

    name = "ngram"

    def __init__(self, device: torch.device | str = "cpu", *, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.device = torch.device(device)
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._last: tuple | None = None  # (context key, the lookup's result), reused within a round

    def begin(self, prompt_ids: list[int]) -> None:
        self._last = None

    def _lookup(self, ids: list[int], max_tokens: int) -> tuple[list[int], int | None, int | None]:
        """:func:`lookup_source` of ``ids``; the last result is reused for the same context and
        length (:meth:`round_source`, :meth:`free_draft` and :meth:`propose` of one round)."""
        key = (len(ids), tuple(ids[-self.max_ngram - 1 :]), max_tokens)
        if self._last is None or self._last[0] != key:
            self._last = (key, lookup_source(np.asarray(ids, dtype=np.int64), max_tokens, self.max_ngram, self.min_ngram))
        return self._last[1]

    def round_source(self, ids: list[int]) -> str:
        """``"match-n"``, the length n of the suffix the lookup matched for the committed ``ids``,
        or ``"miss"``: adaptive γ keeps a controller per source, since a longer match is right far
        more often (a function of ``ids`` only: the choice of γ never looks at the drafted tokens)."""
        match_len = self._lookup(ids, MAX_NUM_SPECULATIVE_TOKENS)[2]
        return "miss" if match_len is None else f"match-{match_len}"

    def free_draft(self, ids: list[int]) -> list[int]:
        """What :meth:`propose` would draft for ``ids`` (a lookup: it costs nothing measurable), for
        adaptive γ to judge against the target's token in a round that drafts nothing."""
        return self._lookup(ids, MAX_NUM_SPECULATIVE_TOKENS)[0]

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        tokens, copy_start, match_len = self._lookup(ids, MAX_NUM_SPECULATIVE_TOKENS)
        tokens = tokens[:max_tokens]  # the continuation's first tokens: the same copy, cut
        trace = DraftTrace(copy_start=copy_start, match_len=match_len) if config.trace and tokens else None
        return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), None, 0, trace)

    def rollback(self, num_valid: int) -> None:
        pass

    def end(self) -> None:
        pass


def lookup(ids: np.ndarray, max_tokens: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The continuation (up to ``max_tokens`` ids) of the latest earlier match of a suffix.

    Longer suffixes are tried first. A match must start before the suffix itself and have at
    least one token after it. Returns [] when nothing matches.
    """
    return lookup_source(ids, max_tokens, max_ngram, min_ngram)[0]


def lookup_source(
    ids: np.ndarray, max_tokens: int, max_ngram: int, min_ngram: int
) -> tuple[list[int], int | None, int | None]:
    """:func:`lookup`, and where the copy came from: ``(tokens, copy_start, match_len)``, with
    ``ids[copy_start - match_len : copy_start]`` equal to the last ``match_len`` ids and
    ``tokens == ids[copy_start : copy_start + len(tokens)]``; ``([], None, None)`` on a miss."""
    length = len(ids)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = sliding_window_view(ids[: length - 1], n)  # starts 0 … length-1-n
        hits = np.flatnonzero((windows == ids[length - n :]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return ids[start : start + max_tokens].tolist(), start, n
    return [], None, None
