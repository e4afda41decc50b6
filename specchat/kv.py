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
        if not getattr(layer, "is_croppable", False):
            raise CacheRollbackError(
                f"layer {i} of the KV cache ({type(layer).__name__}) cannot be cut back; "
                "speculative decoding needs a croppable cache"
            )
    cache.crop(length - current)  # transformers 5: a negative count of positions to remove
    if cache.get_seq_length() != length:
        raise CacheRollbackError(f"cache has {cache.get_seq_length()} positions after cutting to {length}")
