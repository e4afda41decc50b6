"""Prompt n-gram lookup drafter (prompt lookup decoding; Saxena 2023).

No model: find the latest earlier occurrence of the last n committed tokens and propose what
followed it. The proposal is deterministic, so q is one-hot (``draft_probs=None``). When no
n-gram matches it proposes nothing and the round becomes one plain target step.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from specchat.core.config import GenerationConfig
from specchat.core.draft import Draft, DraftTrace


class NgramDrafter:
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

    def begin(self, prompt_ids: list[int]) -> None:
        pass

    def propose(
        self, ids: list[int], max_tokens: int, config: GenerationConfig, generator: torch.Generator
    ) -> Draft:
        tokens, copy_start, match_len = lookup_source(np.asarray(ids, dtype=np.int64), max_tokens, self.max_ngram, self.min_ngram)
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
