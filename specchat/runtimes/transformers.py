"""The transformers runtime: a Hugging Face causal LM on PyTorch (eager, or with its passes
compiled) behind :class:`specchat.core.runtime.ModelRuntime`.

The only module that calls a transformers model's forward for the engine and the model
drafters, creates its KV cache (``DynamicCache``, or the compiled target's ``StaticCache``) and
cuts it back (:func:`cut_cache`, the one place a cache is rolled back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache, DynamicCache

from specchat.core.runtime import CacheRollbackError, ModelSize, common_prefix
from specchat.runtimes.compiled import CompiledTarget

__all__ = ["CacheRollbackError", "TransformersRuntime", "cut_cache", "embedding_rows", "model_size"]


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


def embedding_rows(model, *, output: bool) -> int:
    """Rows of a model's output (lm_head) or input embedding; ``config.vocab_size`` if the model
    does not expose them. Family members may pad these differently (Qwen2.5: 151,936 / 152,064)."""
    get = getattr(model, "get_output_embeddings" if output else "get_input_embeddings", None)
    layer = get() if get is not None else None
    weight = getattr(layer, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(model.config.vocab_size)


def model_size(model: Any) -> ModelSize:
    """Count a torch model's matmul weights and their stored bytes.

    Every ``torch.nn.Linear`` (bitsandbytes' ``Linear4bit`` is one) counts its weight once, also
    a weight shared by two modules (a tied LM head). A 4-bit weight counts its original shape
    (``weight.quant_state.shape``) as parameters and its packed bytes plus the quantization
    scales as bytes.
    """
    params = nbytes = 0
    seen: set[int] = set()
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        for tensor in (module.weight, module.bias):
            if tensor is None or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            state = getattr(tensor, "quant_state", None)
            shape = getattr(state, "shape", None)
            count = 1
            for dim in (shape if shape is not None else tensor.shape):
                count *= int(dim)
            params += count
            nbytes += tensor.numel() * tensor.element_size()
            absmax = getattr(state, "absmax", None)
            if absmax is not None:
                nbytes += absmax.numel() * absmax.element_size()
    return ModelSize(params, nbytes)


class TransformersRuntime:
    """A transformers causal LM and its KV cache, as a :class:`~specchat.core.runtime.ModelRuntime`.

    Args:
        model: causal LM in eval mode, on its device (``forward(input_ids, cache=…,
            use_cache=True, logits_to_keep=k)`` returning ``.logits`` ``[1, n, V]``).
        compiled: the model's passes compiled over one static cache
            (:class:`~specchat.runtimes.compiled.CompiledTarget`); a generation that fits in it
            (:meth:`start`'s ``max_positions``) runs on it, one that does not runs eagerly on a
            dynamic cache. May be set later (``runtime.compiled = …``): it is read at each
            :meth:`start`, so a generation already running stays on the cache it started on.
        context_length: positions the model may use; defaults to
            ``config.max_position_embeddings``.

    A cache kept from the last generation is reused only on the kind of cache it was made on
    (dynamic or the compiled target's static one).
    """

    name = "transformers"

    def __init__(self, model: Any, *, compiled: CompiledTarget | None = None, context_length: int | None = None):
        self.model = model
        self.compiled = compiled
        self.device = next(model.parameters()).device
        self.vocab_size = embedding_rows(model, output=True)
        self.num_input_ids = embedding_rows(model, output=False)
        self.context_length = int(context_length or model.config.max_position_embeddings)
        self.cache: Cache | None = None
        self._ids: list[int] = []  # the ids whose states the cache holds
        self._static = False  # the cache is the compiled target's static one
        self._size: ModelSize | None = None

    @property
    def num_cached(self) -> int:
        return 0 if self.cache is None else int(self.cache.get_seq_length())  # a 0-d tensor for a static cache

    @property
    def cached_ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    @property
    def static(self) -> bool:
        """Whether the current generation runs on the compiled target's static cache."""
        return self._static

    def start(self, prefix_ids: Sequence[int], *, max_positions: int, reuse: bool = True) -> int:
        compiled = self.compiled
        static = compiled is not None and compiled.fits(max_positions)
        cache = self.cache
        if cache is not None and (compiled is not None and cache is compiled.cache) != static:
            cache = None  # kept on the other kind of cache than this generation runs on
        n = common_prefix(self._ids, prefix_ids) if reuse and cache is not None else 0
        if n:
            try:
                cut_cache(cache, n)
            except CacheRollbackError:
                n = 0
        if n == 0:
            cache = compiled.reset() if static and compiled is not None else DynamicCache(config=self.model.config)
        self.cache, self._static = cache, static
        self._ids = [int(t) for t in prefix_ids[:n]]
        return n

    def forward(self, token_ids: Sequence[int], *, num_logits: int) -> torch.Tensor | None:
        if self.cache is None:
            raise RuntimeError("TransformersRuntime.forward called before start()")
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("a forward pass needs at least one token")
        keep = max(1, num_logits)  # transformers reads logits_to_keep=0 as "every position"
        if self._static and self.compiled is not None:  # (static: on the compiled target's cache)
            logits = self.compiled.forward(ids, logits_to_keep=keep)
        else:
            input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=keep).logits[0]
        self._ids.extend(ids)
        return logits.float() if num_logits else None

    def truncate(self, num_positions: int) -> None:
        if self.cache is None:
            if num_positions != 0:
                raise CacheRollbackError(f"cannot cut an empty cache to {num_positions} positions")
            return
        cut_cache(self.cache, num_positions)
        del self._ids[num_positions:]

    def release(self) -> None:
        self.cache, self._ids, self._static = None, [], False

    def fork(self) -> TransformersRuntime:
        """A new runtime (its own empty cache, eager) on the same model and context length."""
        return TransformersRuntime(self.model, context_length=self.context_length)

    def model_size(self) -> ModelSize:
        if self._size is None:
            self._size = model_size(self.model)
        return self._size
