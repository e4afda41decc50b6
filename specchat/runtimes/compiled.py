"""The target's decode and verify passes compiled: ``torch.compile`` (inductor, with
``freezing``, which folds the weights into the graph and prepacks them for the CPU's matrix
kernels) over one ``StaticCache`` that lives as long as the model.

One graph, dynamic in the pass length, serves every round: a pass of n positions (a verify pass
is γ + 1) runs as it is, and a decode step (n = 1) is padded to 2 with a copy of its token. The
padding writes states past the real ones, which are then cut off the cache (the static cache
only moves its length back; the next pass overwrites those slots before any query can see them:
causal attention lets position i see keys 0…i only, and every key below the cache's length was
written by a real token). The logits of the padding are dropped. A pass longer than the largest
bucket (a prefill) runs eagerly on the same cache.

Why one cache for the model's lifetime: with ``freezing`` the compiled graph must be called with
the cache it was compiled with (a fresh ``StaticCache`` object gave wrong logits without a
recompile on torch 2.13, measured here), so this class owns it and hands out nothing else.

What it buys, measured on a 2-vCPU Intel Xeon (AVX-512 bf16, no AMX), the 1.5B target in bf16,
the compiled and the eager pass interleaved in one process, medians of 9
(``python scripts/probe_compile.py --cache-len 1024 2048 4096``): a 1-position pass 254 ms vs 355 ms eager (1.40×), an 8-position pass
407 vs 533 ms (1.31×), with a cache of 1024 positions. Every pass attends over the whole static
cache, so a longer cache eats the gain: 1.26× / 0.99× at 2048 positions, 1.07× / 0.98× at 4096.
Hence 1024 positions, and a generation that may outgrow them runs eagerly. Without freezing the
compiled pass was no faster than eager; ``torch.compile(options={"freezing": True})`` did not
apply it, so it is patched into inductor's config around each call. Building four static graphs
(1, 4, 8, 13 positions) took 4 minutes on 2 cores and a frozen copy of the weights each (bench
peak 17.4 GB); the one dynamic graph took 2½-4½ minutes (bench peak 12.1 GB) and runs as fast (``n`` = 4 / 8 / 13: 1.41× / 1.28× / 1.27×
eager). With freezing, inductor's on-disk cache did not shorten a second start much (64 s vs
70 s for one graph).

Exactness: the compiled kernels round differently from the eager ones, as every kernel choice
does; the target-only path runs through the same compiled graphs (a decode step is padded to 2),
so comparisons of speed and output stay like for like, and verification (Leviathan et al.
2023, Algorithm 1) is unchanged: the output distribution is the compiled target's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, StaticCache

# a decode step is padded to 2 positions: dynamo specialises a dimension of size 1, so a
# 1-position pass would need a graph (and a frozen copy of the weights) of its own; verify
# passes of γ + 1 = 2…13 positions (the app's γ_max is 12) all run the one dynamic graph
DEFAULT_BUCKETS = tuple(range(2, 14))
DEFAULT_MAX_CACHE_LEN = 1024  # positions: every pass attends over all of them, so longer costs (measured below)


class CompiledTarget:
    """The target's forward passes, compiled (one graph, dynamic in the pass length) over one
    static KV cache.

    Args:
        model: the target, eval mode, on its device. It is not changed (``torch.compile``
            wraps it), so other users of the model (transformers' ``generate`` in the bench)
            still run it eagerly.
        max_cache_len: positions the static cache holds (prompt + reply + the largest bucket
            must fit; a generation that does not fit runs eagerly on a dynamic cache).
        buckets: the compiled pass lengths, ascending, each ≥ 1; a pass is padded to the
            smallest bucket ≥ its length, and one longer than the last runs eagerly.

    Raises:
        ValueError: empty, unsorted or non-positive buckets, or a cache shorter than the largest
            bucket.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_cache_len: int = DEFAULT_MAX_CACHE_LEN,
        buckets: Sequence[int] = DEFAULT_BUCKETS,
    ):
        buckets = tuple(int(b) for b in buckets)
        if not buckets or any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"buckets must be distinct positive pass lengths in ascending order, got {buckets}")
        if max_cache_len <= buckets[-1]:
            raise ValueError(f"max_cache_len {max_cache_len} must exceed the largest bucket {buckets[-1]}")
        self.model = model
        self.buckets = buckets
        self.max_cache_len = int(max_cache_len)
        self.device = next(model.parameters()).device
        self.cache = StaticCache(config=model.config, max_cache_len=self.max_cache_len)
        # dynamic: one graph for every pass length ≥ 2. With freezing each graph holds its own
        # prepacked copy of the weights (3 GB for the 1.5B target in bf16): in the bench, four
        # static graphs (1, 4, 8, 13) peaked at 17.4 GB, the dynamic one at 12.1 GB, as fast
        self._compiled = torch.compile(model, dynamic=True)
        self.compiled_buckets: set[int] = set()  # buckets run through the graph at least once
        self.compile_s: dict[int, float] = {}  # seconds each bucket's first call took (the first: the compile)

    @property
    def max_bucket(self) -> int:
        return self.buckets[-1]

    def fits(self, num_positions: int) -> bool:
        """Whether a generation that may reach ``num_positions`` positions (prompt + reply)
        can run on the static cache, with room for the largest bucket's padding."""
        return num_positions + self.max_bucket <= self.max_cache_len

    def seq_length(self) -> int:
        return int(self.cache.get_seq_length())

    def reset(self) -> StaticCache:
        """The static cache emptied (its length set to 0; the stale states are overwritten
        before they can be read), for a generation that reuses nothing."""
        length = self.seq_length()
        if length:
            self.cache.crop(-length)
        return self.cache

    def bucket_for(self, n: int) -> int | None:
        """The smallest bucket ≥ ``n``; None when ``n`` exceeds them all (eager pass)."""
        return next((b for b in self.buckets if b >= n), None)

    def forward(self, token_ids: Sequence[int], *, logits_to_keep: int) -> torch.Tensor:
        """Feed ``token_ids`` after the cached prefix; ``[k, V]`` logits of the last
        ``k = logits_to_keep`` positions (all of them for 0), in the model's dtype.

        Must run under ``torch.inference_mode()`` (freezing needs weights that do not train).

        Raises:
            ValueError: no tokens, or the cache cannot hold the pass (``fits`` was not checked).
        """
        n = len(token_ids)
        if n == 0:
            raise ValueError("a forward pass needs at least one token")
        length = self.seq_length()
        bucket = self.bucket_for(n)
        width = bucket if bucket is not None else n
        if length + width > self.max_cache_len:
            raise ValueError(
                f"the static cache holds {self.max_cache_len} positions; {length} are used and this "
                f"pass needs {width} more"
            )
        if bucket is None:  # longer than every bucket (a prefill): eagerly, on the same cache
            input_ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
            out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
            return out.logits[0]
        if not self.cache.is_initialized:  # allocate the cache eagerly, never inside the graph
            self.model(input_ids=torch.tensor([[int(token_ids[0])]], device=self.device), cache=self.cache, use_cache=True)
            self.cache.crop(-1)
        padded = [*token_ids, *([token_ids[-1]] * (bucket - n))]
        input_ids = torch.tensor([padded], dtype=torch.long, device=self.device)
        first = bucket not in self.compiled_buckets
        t0 = time.perf_counter()
        # freezing as a config patch around the call: passed as torch.compile(options=…) it was
        # not applied here (no gain over eager, measured), patched globally it was (1.3-1.5×)
        import torch._inductor.config as inductor_config  # here: importing inductor takes ~0.8 s

        with inductor_config.patch(freezing=True):
            out = self._compiled(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=bucket)
        if first:
            self.compiled_buckets.add(bucket)
            self.compile_s[bucket] = time.perf_counter() - t0
        if bucket > n:
            self.cache.crop(n - bucket)  # the padding's states: cut off, overwritten by the next pass
        logits = out.logits[0, :n]
        return logits[-logits_to_keep:] if logits_to_keep else logits

    def warm_up(self, progress: Callable[[str], None] | None = None) -> float:
        """Build the graph now (2½-4½ minutes for the 1.5B target on 2 CPU cores; one
        progress line) and run every bucket once through it; the cache is left empty. Returns
        the seconds spent."""
        t0 = time.perf_counter()
        token = 0
        with torch.inference_mode():
            for bucket in self.buckets:
                if bucket in self.compiled_buckets:
                    continue
                if progress is not None and not self.compiled_buckets:
                    progress(f"Compiling the target's passes of {self.buckets[0]}-{self.max_bucket} positions "
                             "(one graph; a few minutes on 2 CPU cores)")
                self.reset()
                self.forward([token] * bucket, logits_to_keep=1)
            self.reset()
        return time.perf_counter() - t0


def compile_runtime(runtime: Any, runtime_name: str, progress: Callable[[str], None] | None = None) -> CompiledTarget:
    """Compile a loaded target's decode and verify passes (one graph, a few minutes on 2 CPU
    cores, reported through ``progress``), then hand them to its runtime: generations that start
    afterwards use them, target-only ones too. Safe while another generation runs eagerly (the
    graphs have a cache of their own). Returns the compiled target (the one made before, if any).

    Raises:
        SpecchatError: ``runtime_name`` is not "transformers" (only transformers' passes compile).
    """
    from specchat.errors import SpecchatError

    if runtime_name != "transformers":
        raise SpecchatError(f"--compile compiles transformers' passes; the target runs on {runtime_name}")
    # a TransformersRuntime (what ChatService.load builds for "transformers"; not imported: it imports this module)
    if runtime.compiled is not None:
        return runtime.compiled
    compiled = CompiledTarget(runtime.model, max_cache_len=min(runtime.context_length, DEFAULT_MAX_CACHE_LEN))
    compiled.warm_up(progress)
    runtime.compiled = compiled  # read once per generation, at its start
    return compiled


def compile_after_ready(compile_target: Callable[[Callable[[str], None]], CompiledTarget]) -> None:
    """``--compile`` once the app is Ready: run ``compile_target`` (:meth:`ChatService.compile_target`)
    and say each stage on the progress board (the page) and stderr (the terminal); a failure is
    said and logged, and the target keeps running eagerly."""
    import logging
    import sys

    from specchat.progress import BOARD

    def say(text: str) -> None:
        BOARD.stage(text)
        print(text, file=sys.stderr, flush=True)

    try:
        compiled = compile_target(lambda text: say(f"{text}, in the background"))
        say(f"The target is compiled ({sum(compiled.compile_s.values()):.0f} s): replies from now on use it")
    except Exception as exc:
        say(f"Compiling the target failed ({exc}); it keeps running eagerly")
        logging.getLogger(__name__).error("compiling the target failed; it runs eagerly", exc_info=exc)
