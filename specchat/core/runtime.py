"""The runtime seam: what the engine and the model drafters ask of a model, and nothing more.

The algorithm (drafting, verification, rollback, events) lives in :mod:`specchat.core`; *how*
a model runs (transformers on PyTorch, eager or compiled; llama.cpp next) lives behind this
protocol in :mod:`specchat.runtimes`. The engine never touches a model object or a KV cache
class: it feeds token ids, gets float32 logits back, and tells the runtime how many cached
positions to keep. This is the split of llama.cpp's ``common/speculative.cpp`` (logits and a
sequence-removal call) and vLLM's rejection sampler (free of the proposers).

Adding a runtime: implement :class:`ModelRuntime` (one object per loaded model and KV cache)
and hand it to :class:`~specchat.core.engine.SpeculativeEngine` as the target or to
:class:`~specchat.drafters.model.ModelDrafter` as a drafter. Read the docstring of each
member; :class:`specchat.runtimes.transformers.TransformersRuntime` is the reference
implementation, and ``tests/test_runtime.py`` the contract any runtime must pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # imported by the torch-free ledger (ModelSize): torch only where a function needs it
    import torch


class CacheRollbackError(RuntimeError):
    """The KV cache cannot be cut back to the requested length; it is left untouched."""


@dataclass(frozen=True)
class ModelSize:
    """The arithmetic and the bytes of one forward position of a model.

    Attributes:
        matmul_params: weights in matrix multiplications per position (every linear layer, the
            LM head included; the input embedding is a lookup and is not counted). A position
            costs about 2 FLOPs per weight. For a 4-bit model: the unpacked count (its
            multiply-adds are the same, on dequantized weights).
        weight_bytes: bytes of those weights as stored (4-bit packed weights and their scales
            for an NF4 model): what one forward pass reads from memory, KV cache aside.
    """

    matmul_params: int
    weight_bytes: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def keep_for_reuse(runtime: ModelRuntime, ids: Sequence[int]) -> bool:
    """After a generation that ended normally: cut ``runtime``'s cache to the states of
    ``ids[:L]``, L = min(cached, len(ids) − 1), the invariant after every round (the last
    committed token is never in a cache yet; rejected drafts and tokens past a stop were cut).
    Returns whether a non-empty prefix is kept for the next prompt; False also when the cache
    cannot be cut (it is then left as it is, for the caller to release)."""
    try:
        runtime.truncate(min(runtime.num_cached, len(ids) - 1))
    except CacheRollbackError:
        return False
    return runtime.num_cached > 0


def scored(runtime: ModelRuntime, token_ids: Sequence[int], num_logits: int) -> torch.Tensor:
    """``runtime.forward`` of a pass that scores ``num_logits`` >= 1 positions: its
    ``[num_logits, vocab_size]`` float32 logits (never None, unlike a prefill's).

    Raises:
        RuntimeError: the runtime returned no logits (a broken runtime).
    """
    logits = runtime.forward(token_ids, num_logits=num_logits)
    if logits is None:
        raise RuntimeError(f"the runtime returned no logits for a pass that scores {num_logits} position(s)")
    return logits


def synced_now(device: torch.device) -> float:
    """``time.perf_counter()`` after the device's queued work has finished (CUDA runs
    asynchronously; on CPU nothing to wait for): seconds, for timing model work."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()


@runtime_checkable
class ModelRuntime(Protocol):
    """One loaded causal LM with one KV cache of its own.

    The runtime remembers which token ids its cached positions hold (``cached_ids``), so a
    later generation whose prompt starts with the same ids reuses their states: a KV state at
    position i depends on tokens 0…i alone (causal attention) and the weights, so matching ids
    is exactly the condition for reuse. That is the whole prefix cache; the engine decides
    when a cache is kept (a generation that ended normally) or released (abandoned, failed).

    Invariant kept by every method: ``len(cached_ids) == num_cached`` and position i of the
    cache holds the state of ``cached_ids[i]``.

    Attributes:
        device: where :meth:`forward` returns its logits (and the clock to sync for timing).
        vocab_size: V, the length of a logits row (the LM head's rows; may exceed the
            tokenizer's length, e.g. Qwen2.5 pads to 151,936 or 152,064).
        num_input_ids: ids below this can be fed (the input embedding's rows).
        context_length: positions the model may hold (prompt + reply).
    """

    device: torch.device
    vocab_size: int
    num_input_ids: int
    context_length: int

    @property
    def num_cached(self) -> int:
        """Positions held in the KV cache (0 when it holds none or was released)."""

    @property
    def cached_ids(self) -> tuple[int, ...]:
        """The token ids whose states the cache holds, in order (``len == num_cached``)."""

    def start(self, prefix_ids: Sequence[int], *, max_positions: int, reuse: bool = True) -> int:
        """Make the cache ready for a generation whose first :meth:`forward` extends
        ``prefix_ids``: keep the cached states of the longest common prefix of
        :attr:`cached_ids` and ``prefix_ids`` (none when ``reuse`` is False, or when they were
        kept in a form this generation cannot use), drop the rest, and return how many
        positions were kept. The caller then feeds ``prefix_ids[returned:]``.

        Args:
            prefix_ids: the ids the cache should end up holding before the first real pass.
            max_positions: the most positions this generation may reach (prompt + reply); a
                runtime may pick its cache by it (a static cache that fits, say).
            reuse: False prefills everything (the prefix cache off).
        """

    def forward(self, token_ids: Sequence[int], *, num_logits: int) -> torch.Tensor | None:
        """Feed ``token_ids`` (k ≥ 1 ids, each < ``num_input_ids``) at positions
        ``num_cached … num_cached + k − 1`` and append their states to the cache.

        Args:
            num_logits: how many of the last positions need logits: k for a verify pass
                (every position is scored), 1 for a draft step, 0 for a prefill.

        Returns:
            ``[num_logits, vocab_size]`` float32 raw logits (row j scores the token after
            ``token_ids[k − num_logits + j]``), on :attr:`device`; None when ``num_logits`` is 0.

        Raises:
            ValueError: no ids, or more positions than the cache can hold.
        """

    def truncate(self, num_positions: int) -> None:
        """Keep only the first ``num_positions`` cached positions (roll back rejected drafts).
        A no-op when the cache is already that long.

        Raises:
            CacheRollbackError: ``num_positions`` is negative or longer than the cache, or the
                cache cannot be cut (sliding-window layers past their window); the cache is then
                left untouched, never silently corrupted.
        """

    def release(self) -> None:
        """Drop the KV cache and its memory (``num_cached`` becomes 0). Safe to call twice."""

    def model_size(self) -> ModelSize:
        """The model's matmul weights and their stored bytes (for ĉ and the ledger)."""


@runtime_checkable
class ForkableRuntime(ModelRuntime, Protocol):
    """A runtime that can make another on the same weights (both runtimes of specchat can; beyond
    the seam the engine uses: the hybrid drafter's model part gets a cache of its own this way)."""

    def fork(self) -> ForkableRuntime:
        """A new runtime (its own empty cache) on the same weights and settings."""
        ...
