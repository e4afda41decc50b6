"""The one place where a KV cache is cut back (rolled back) to a committed length."""

from __future__ import annotations

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
    current = cache.get_seq_length()
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
    if cache.get_seq_length() != length:
        raise CacheRollbackError(f"cache has {cache.get_seq_length()} positions after cutting to {length}")
