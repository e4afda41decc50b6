"""The one place where a KV cache is cut back (rolled back) to a committed length, and the
prefix cache that keeps a conversation's states between generations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import Cache


class CacheRollbackError(RuntimeError):
    """The cache cannot be cut back to the requested length; it is left untouched."""


def cut_cache(cache: Cache, length: int) -> None:
    """Cut ``cache`` back to its first ``length`` positions (no-op if already that long).

    Raises:
        CacheRollbackError: ``length`` is negative or longer than the cache, a layer cannot be
            cropped (sliding-window or linear-attention layers past their window), or the
            cache did not end at ``length``. A cache that cannot be cut is refused, never
            silently corrupted.
    """
    current = int(cache.get_seq_length())  # a 0-d tensor for a static cache
    if length < 0 or length > current:
        raise CacheRollbackError(f"cannot cut a cache of {current} positions to {length}")
    if length == current:
        return
    for i, layer in enumerate(cache.layers):
        # check every layer before cutting any, so a refusal leaves the cache untouched;
        # a sliding-window layer past its window has dropped the states a cut would need
        window = getattr(layer, "sliding_window", None)
        past_window = window is not None and layer.get_seq_length() >= window and not getattr(layer, "record_past", False)
        if not getattr(layer, "is_croppable", False) or past_window:
            raise CacheRollbackError(
                f"layer {i} of the KV cache ({type(layer).__name__}) cannot be cut back"
                + (f" past its sliding window of {window} positions" if past_window else "")
                + "; speculative decoding needs a cache that can roll back rejected drafts"
            )
    cache.crop(length - current)  # transformers 5: a negative count of positions to remove
    if int(cache.get_seq_length()) != length:
        raise CacheRollbackError(f"cache has {int(cache.get_seq_length())} positions after cutting to {length}")


# ---- the prefix cache: a conversation's KV states kept between generations ----------------------
@dataclass
class KeptPrefix:
    """A KV cache kept after a generation, with the token ids whose states it holds
    (``len(ids) == cache.get_seq_length()``). A later prompt that starts with some of these ids
    reuses their states and prefills only the rest: a KV state at position i depends on the
    tokens 0…i alone (causal attention) and the model's weights, so matching token ids is
    exactly the condition for reuse, whichever session or drafter made them."""

    ids: tuple[int, ...]
    cache: Cache


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def keep_prefix(cache: Cache | None, ids: Sequence[int]) -> KeptPrefix | None:
    """Keep ``cache`` for reuse, holding the states of ``ids[:L]``, L = min(cache length,
    len(ids) − 1): the engine's invariant after every round (the last committed token is never
    in a cache yet; rejected drafts and tokens past a stop were cut). None when nothing is kept
    (no cache, or one that cannot be cut)."""
    if cache is None:
        return None
    length = min(int(cache.get_seq_length()), len(ids) - 1)
    if length <= 0:
        return None
    try:
        cut_cache(cache, length)
    except CacheRollbackError:
        return None
    return KeptPrefix(tuple(int(t) for t in ids[:length]), cache)


def take_prefix(kept: KeptPrefix | None, ids: Sequence[int]) -> tuple[Cache | None, int]:
    """The kept cache cut to the longest common prefix of its ids and ``ids``, and that length;
    ``(None, 0)`` when nothing is shared (or the cache cannot be cut). The kept cache is handed
    over: the caller owns it."""
    if kept is None:
        return None, 0
    n = common_prefix(kept.ids, ids)
    if n == 0:
        return None, 0
    try:
        cut_cache(kept.cache, n)
    except CacheRollbackError:
        return None, 0
    return kept.cache, n
