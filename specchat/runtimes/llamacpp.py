"""The llama.cpp runtime: a GGUF model run by llama.cpp (through its C API) behind
:class:`specchat.core.runtime.ModelRuntime`.

What the seam needs maps onto llama.cpp's C API one to one, as in llama.cpp's own
``common/speculative.cpp``:

* a verify pass over k tokens = one ``llama_decode`` of a k-token batch with the output flag set
  on the last ``num_logits`` positions; ``llama_get_logits`` then holds their rows in order;
* a rollback after a rejection = ``llama_memory_seq_rm(mem, 0, n, -1)`` (drop positions ≥ n of
  sequence 0); llama.cpp refuses (returns false) a partial removal it cannot do, e.g. on a
  recurrent model, and we raise :class:`~specchat.core.runtime.CacheRollbackError` then;
* the prefix cache = the ids the context holds, kept as far as they match the next prompt;
* every ``llama_decode`` (and every load, which may run parallel regions too) runs on the
  process's one compute thread (:mod:`specchat.runtimes.compute_thread`), whichever thread asks:
  libgomp keeps an OpenMP pool per thread that ever used one, and more pooled threads than CPUs
  make its barriers sleep.

The weights (:class:`LlamaCppModel`) are loaded once and shared: each runtime is one llama.cpp
context (KV cache) on them, so a drafter on the target's own weights (the hybrid's model part)
costs a context, not a second copy. The algorithm stays in :mod:`specchat.core`; llama.cpp's
sampler is never used.

The library: llama-cpp-python's build when installed (compiled for this CPU), else the prebuilt
one in the ``xllamacpp`` wheel, bound by :mod:`specchat.runtimes.llama_api` (:func:`library_name`);
:func:`unavailable_reason` says why this runtime is not offered when neither is there.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from specchat.core.runtime import CacheRollbackError, ModelSize, common_prefix
from specchat.runtimes.compute_thread import on_compute_thread
from specchat.runtimes.llama_api import (  # noqa: F401 (re-exported: which library, and whether it can run)
    LIBRARIES,
    LIBRARY_ENV,
    LLAMA_CPP_REQUIREMENT,
    ctrl_c_after_the_call,
    gpu_offload,
    has_quantizer,
    library_name,
    unavailable_reason,
)
from specchat.runtimes.llama_api import library as _lib

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 8192
"""Positions a context holds unless the model trained on fewer or the entry says otherwise:
llama.cpp allocates the whole KV cache when a context is created (Qwen2.5-Coder-1.5B, f16:
28 KiB per position, 224 MiB for 8192)."""

DEFAULT_BATCH = 512  # positions per llama_decode call (prefill chunks); a verify pass is far shorter

AMX_HINT = ("this llama.cpp was built with its AMX kernels, which crash on Q4_K weights (llama.cpp issue "
            "#20824), so specchat runs it without its repacked weight buffers, about 20 % slower; rebuild it "
            "without AMX for the full speed: CMAKE_ARGS=\"-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 "
            "-mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'\" "
            "pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36")


def amx_build() -> bool:
    """True when the installed llama.cpp has its AMX kernels (built with ``-march=native`` on an
    Intel CPU with AMX). Their matrix multiplication segfaults on Q4_K weights (llama.cpp issue
    #20824, seen here on the default Q4_K_M target's first prefill), so :class:`LlamaCppModel`
    then loads without llama.cpp's extra buffer types (``use_extra_bufts = False``): no AMX and
    no repacking, measured here at 12.8 tokens/s against 16.4 for a build without AMX. Warns
    once with the rebuild command (:data:`AMX_HINT`)."""
    global _amx_warned
    found = b"AMX_INT8 = 1" in (_lib().llama_print_system_info() or b"")
    if found and not _amx_warned:
        _amx_warned = True
        logger.warning("llama.cpp: %s", AMX_HINT)
    return found


_amx_warned = False


@contextlib.contextmanager
def plain_buffers():
    """While inside, llama-cpp-python's ``Llama`` loads a model as :class:`LlamaCppModel` does on
    an AMX build (:func:`amx_build`): without extra buffer types, so that it cannot crash in the
    AMX kernels (llama-cpp-python only: xllamacpp's build has no AMX). ``Llama`` does not take
    ``use_extra_bufts``; its ``llama_model_default_params`` is wrapped instead (for the bench's
    llama.cpp peer and the tests' reference decode)."""
    from llama_cpp import llama_cpp as bindings  # the module llama_cpp.Llama calls

    if not amx_build():
        yield
        return
    default = bindings.llama_model_default_params

    def params():
        out = default()
        out.use_extra_bufts = False
        return out

    bindings.llama_model_default_params = params
    try:
        yield
    finally:
        bindings.llama_model_default_params = default


def default_threads() -> int:
    """Threads llama.cpp uses by default: every CPU this process may run on (as ``llama-bench -t``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def gguf_model_size(path: Path) -> ModelSize:
    """Matmul weights of a GGUF file and their bytes as stored (the real quantization: Q4_K_M
    ≈ 4.8 bits per weight). Every 2-D ``*.weight`` tensor (and the bias next to one) counts,
    except the input embedding ``token_embd.weight`` (a lookup), which counts as the LM head
    when the file has no ``output.weight`` (tied embeddings). Read from the GGUF header
    (:func:`specchat.runtimes.gguf_header.read_header`: 0.1 s, not gguf.GGUFReader's 5.7 s)."""
    from specchat.runtimes.gguf_header import read_header

    tensors = {t.name: t for t in read_header(path).tensors}
    matmul = {name for name, t in tensors.items() if name.endswith(".weight") and len(t.shape) >= 2}
    matmul.discard("token_embd.weight")
    if "output.weight" not in tensors and "token_embd.weight" in tensors:
        matmul.add("token_embd.weight")
    matmul |= {name[: -len("weight")] + "bias" for name in matmul} & set(tensors)
    params = sum(int(tensors[name].n_elements) for name in matmul)
    nbytes = sum(int(tensors[name].n_bytes) for name in matmul)
    return ModelSize(params, nbytes)


_ABOVE_4_BITS = {"ALL_F32", "MOSTLY_F16", "MOSTLY_BF16", "MOSTLY_Q8_0", "MOSTLY_Q6_K", "MOSTLY_Q5_0", "MOSTLY_Q5_1",
                 "MOSTLY_Q5_K_S", "MOSTLY_Q5_K_M"}
_4_BITS = {"MOSTLY_Q4_0", "MOSTLY_Q4_1", "MOSTLY_Q4_K_S", "MOSTLY_Q4_K_M", "MOSTLY_IQ4_NL", "MOSTLY_IQ4_XS"}


def lower_bit_file_type(path: Path) -> str:
    """The file type of a drafter copy of the GGUF at ``path``, from its ``general.file_type``:
    ``Q4_0`` (a true int4 copy) of a file above 4 bits (F32, F16, BF16, Q8_0, Q6_K, Q5_*),
    ``Q2_K`` of a 4-bit one (Q4_*, IQ4_*: llama.cpp has no smaller 4-bit type).

    Raises:
        ValueError: the file is 3 bits or fewer already (or says no file type): no lower-bit copy.
    """
    from gguf import LlamaFileType

    from specchat.runtimes.gguf_header import read_header

    field = read_header(path).fields.get("general.file_type")
    name = LlamaFileType(field).name if isinstance(field, int) else "unknown"
    if name in _ABOVE_4_BITS:
        return "Q4_0"
    if name in _4_BITS:
        return "Q2_K"
    raise ValueError(f"{Path(path).name} is {name.removeprefix('MOSTLY_')}: there is no lower-bit copy of it "
                     "to draft with (the int4 kinds need a file of 4 bits or more)")


def lower_bit_how() -> str:
    """How the int4 kinds' lower-bit copy is made with the library in use, and about how long, in
    words for the loading stage: llama.cpp's quantizer (tens of seconds) or, without one
    (xllamacpp's library), ggml's, tensor by tensor (a minute or more: 63 s measured here)."""
    if unavailable_reason() is None and hasattr(_lib(), "llama_model_quantize"):
        return "made once with llama.cpp's quantizer: tens of seconds"
    return ("made once by ggml's quantizer tensor by tensor, Q2_K / Q4_0 where the rows fit and the rest as it is: "
            "a minute or more")


def lower_bit_copy(path: Path, folder: Path, *, threads: int | None = None) -> Path:
    """A lower-bit copy of the GGUF at ``path`` (:func:`lower_bit_file_type`), made once with
    llama.cpp's own quantizer (``llama_model_quantize``, re-quantizing from the file's types), or
    where the library has none (xllamacpp's) with ggml's, tensor by tensor
    (:func:`specchat.runtimes.gguf_requant.requantize`), into ``folder/<stem>-<type>-<key>.gguf``,
    the key from the source's path, size and mtime.
    Cost measured on this project's 2-core CPU for Qwen2.5-Coder-1.5B Q4_K_M: Q2_K 43 s,
    753 MB on disk (Q4_0 5 s); the copy decoded no faster than the file itself there (43.9 against
    44.2 ms per token: the 4-bit decode is compute-bound on that CPU).

    Raises:
        RuntimeError: no llama.cpp library, or one without the quantizer, or the quantizer failed (the
            message says which).
    """
    reason = unavailable_reason() or (None if has_quantizer() else
                                      f"{library_name()}'s llama.cpp library has no quantizer; the lower-bit copy needs "
                                      f"{LLAMA_CPP_REQUIREMENT}")
    if reason:
        raise RuntimeError(reason)
    import hashlib

    path = Path(path)
    file_type = lower_bit_file_type(path)
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = folder / f"{path.stem}-{file_type}-{key}.gguf"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    lib = _lib()
    partial = target.with_suffix(".part")
    if not hasattr(lib, "llama_model_quantize"):  # xllamacpp's library: ggml's quantizer, tensor by tensor
        from specchat.runtimes.gguf_requant import requantize

        try:
            requantize(path, partial, file_type, lib, threads=threads or default_threads())
        except BaseException:  # a failure, or Ctrl-C: no half-written copy left behind
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, target)
        return target
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.allow_requantize = True
    params.nthread = int(threads or default_threads())
    with ctrl_c_after_the_call():
        code = lib.llama_model_quantize(str(path).encode(), str(partial).encode(), ctypes.byref(params))
    if code != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp's quantizer could not make a {file_type} copy of {path.name} (code {code})")
    os.replace(partial, target)
    return target


class LlamaCppModel:
    """A GGUF model's weights loaded by llama.cpp, shared by every :class:`LlamaCppRuntime` on it.

    Args:
        path: the GGUF file.
        n_gpu_layers: layers offloaded to a GPU (-1 = all) when llama.cpp was built with one;
            0 on a CPU build.

    Raises:
        RuntimeError: no llama.cpp library (:func:`unavailable_reason`) or llama.cpp
            cannot load the file (not a GGUF, an architecture it does not know, damaged).
    """

    def __init__(self, path: str | Path, *, n_gpu_layers: int | None = None):
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        lib = _lib()
        self.path = Path(path)
        if not self.path.is_file():
            raise RuntimeError(f"{self.path}: no such GGUF file")
        params = lib.llama_model_default_params()
        params.n_gpu_layers = (-1 if lib.llama_supports_gpu_offload() else 0) if n_gpu_layers is None else n_gpu_layers
        if amx_build():  # llama.cpp's AMX kernels crash on Q4_K (llama.cpp #20824): keep the plain CPU buffers
            params.use_extra_bufts = False
        self._lib = lib
        with ctrl_c_after_the_call():
            self.ptr = on_compute_thread(lib.llama_model_load_from_file, str(self.path).encode(), params)
        if not self.ptr:
            raise RuntimeError(f"llama.cpp could not load {self.path} (not a GGUF file, damaged, or an architecture "
                               "this llama.cpp build does not support)")
        self.vocab = lib.llama_model_get_vocab(self.ptr)
        self.vocab_size = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(self.ptr))
        self._size: ModelSize | None = None

    def file_type(self) -> str | None:
        """llama.cpp's one-line description's quantization part, e.g. ``Q4_K - Medium``."""
        buf = ctypes.create_string_buffer(256)
        if self._lib.llama_model_desc(self.ptr, buf, len(buf)) < 0:
            return None
        words = buf.value.decode("utf-8", "replace").split(" ", 2)  # "<arch> <size> <file type>"
        return words[2] if len(words) == 3 else None

    def end_of_generation_ids(self) -> set[int]:
        """Token ids llama.cpp treats as the end of a generation (EOS, EOT and the rest)."""
        return {i for i in range(self.vocab_size) if self._lib.llama_vocab_is_eog(self.vocab, i)}

    def model_size(self) -> ModelSize:
        if self._size is None:
            self._size = gguf_model_size(self.path)
        return self._size

    def close(self) -> None:
        """Free the weights (every runtime on them must be released first)."""
        if getattr(self, "ptr", None):
            self._lib.llama_model_free(self.ptr)
            self.ptr = None


class LlamaCppRuntime:
    """A llama.cpp context (one KV cache) on a :class:`LlamaCppModel`, as a
    :class:`~specchat.core.runtime.ModelRuntime`.

    Args:
        model: the loaded weights (or a GGUF path, loaded here).
        context_length: positions the context holds (prompt + reply); default the smaller of
            the model's training context and :data:`DEFAULT_CONTEXT_LENGTH`. llama.cpp
            allocates the KV cache for all of them when the context is created.
        threads: CPU threads for decoding and batches (default :func:`default_threads`).
        precise: a float32 KV cache and no flash attention (llama.cpp's CPU flash attention
            rounds Q·K through f16): the logits of an F32 GGUF then match a float32 reference
            to ~1e-5 (the tests); the default (f16 cache, flash attention as llama.cpp picks)
            is llama.cpp's own and the faster one.

    :meth:`forward` returns float32 logits on the CPU (copied out of llama.cpp's buffer); a
    generation that overruns the context raises ValueError before any work.
    """

    name = "llamacpp"

    def __init__(
        self,
        model: LlamaCppModel | str | Path,
        *,
        context_length: int | None = None,
        threads: int | None = None,
        precise: bool = False,
        batch_size: int = DEFAULT_BATCH,
    ):
        self.weights = model if isinstance(model, LlamaCppModel) else LlamaCppModel(model)
        lib = self._lib = self.weights._lib
        trained = self.weights.n_ctx_train or DEFAULT_CONTEXT_LENGTH
        self.context_length = int(context_length or min(trained, DEFAULT_CONTEXT_LENGTH))
        self.threads = int(threads or default_threads())
        self.device = torch.device("cpu")
        self.vocab_size = self.num_input_ids = self.weights.vocab_size
        params = lib.llama_context_default_params()
        params.n_ctx = self.context_length
        params.n_batch = params.n_ubatch = self._batch_size = min(batch_size, self.context_length)
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        self.precise = precise
        if precise:
            params.type_k = params.type_v = lib.GGML_TYPE_F32
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        with ctrl_c_after_the_call():
            self.ctx = on_compute_thread(lib.llama_init_from_model, self.weights.ptr, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {self.context_length} positions for "
                               f"{self.weights.path.name} (out of memory?)")
        self._memory = lib.llama_get_memory(self.ctx)
        self._batch = lib.llama_batch_init(self._batch_size, 0, 1)
        self._ids: list[int] = []
        self._started = False

    # -- the seam --------------------------------------------------------------------------
    @property
    def num_cached(self) -> int:
        return len(self._ids)

    @property
    def cached_ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    def start(self, prefix_ids: Sequence[int], *, max_positions: int, reuse: bool = True) -> int:
        n = common_prefix(self._ids, prefix_ids) if reuse and self._started else 0
        if n < len(self._ids) and not self._remove_from(n):
            n = 0
            self._clear()
        del self._ids[n:]
        self._started = True
        return n

    def forward(self, token_ids: Sequence[int], *, num_logits: int) -> torch.Tensor | None:
        if not self._started:
            raise RuntimeError("LlamaCppRuntime.forward called before start()")
        ids = [int(t) for t in token_ids]
        k = len(ids)
        if not ids:
            raise ValueError("a forward pass needs at least one token")
        if not 0 <= num_logits <= k:
            raise ValueError(f"num_logits must be in 0..{k}, got {num_logits}")
        start = len(self._ids)
        if start + k > self.context_length:
            raise ValueError(f"{start + k} positions do not fit this llama.cpp context of {self.context_length}")
        bad = [t for t in ids if not 0 <= t < self.num_input_ids]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the model's vocabulary of {self.num_input_ids}")
        lib, batch = self._lib, self._batch
        rows: list[np.ndarray] = []
        first_scored = k - num_logits
        for offset in range(0, k, self._batch_size):
            chunk = ids[offset: offset + self._batch_size]
            scored = 0
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + offset + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                wanted = offset + i >= first_scored
                batch.logits[i] = wanted
                scored += wanted
            batch.n_tokens = len(chunk)
            status = on_compute_thread(lib.llama_decode, self.ctx, batch)  # one OpenMP pool: compute_thread
            if status != 0:
                self._remove_from(start)  # leave the cache as it was before this call
                raise RuntimeError(f"llama_decode failed with status {status} ({len(chunk)} tokens at position "
                                   f"{start + offset})")
            if scored:
                pointer = lib.llama_get_logits(self.ctx)
                rows.append(np.ctypeslib.as_array(pointer, shape=(scored, self.vocab_size)).copy())
        self._ids.extend(ids)
        if not num_logits:
            return None
        return torch.from_numpy(rows[0] if len(rows) == 1 else np.concatenate(rows))

    def truncate(self, num_positions: int) -> None:
        current = len(self._ids)
        if num_positions < 0 or num_positions > current:
            raise CacheRollbackError(f"cannot cut a cache of {current} positions to {num_positions}")
        if num_positions == current:
            return
        if not self._remove_from(num_positions):
            raise CacheRollbackError(f"llama.cpp cannot remove positions {num_positions}… of this model's cache "
                                     "(a recurrent or sliding-window memory); speculative decoding needs a cache that "
                                     "can roll back rejected drafts")
        del self._ids[num_positions:]

    def release(self) -> None:
        """Drop every cached position (the KV buffer stays allocated: llama.cpp sizes it once,
        for :attr:`context_length` positions, when the context is created)."""
        if getattr(self, "ctx", None):
            self._clear()
        self._ids, self._started = [], False

    def model_size(self) -> ModelSize:
        return self.weights.model_size()

    # -- beyond the seam -------------------------------------------------------------------
    def fork(self) -> LlamaCppRuntime:
        """A new runtime (its own empty context) on the same weights and settings."""
        return LlamaCppRuntime(self.weights, context_length=self.context_length, threads=self.threads,
                               precise=self.precise, batch_size=self._batch_size)

    def close(self) -> None:
        """Free the context (the weights stay loaded)."""
        if getattr(self, "ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self.ctx)
            self.ctx = None
        self._ids, self._started = [], False

    def __del__(self):  # noqa: D105
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _remove_from(self, position: int) -> bool:
        return bool(self._lib.llama_memory_seq_rm(self._memory, 0, position, -1))

    def _clear(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)
