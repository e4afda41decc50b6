"""llama.cpp's C API (the part specchat uses) and which llama.cpp library provides it.

Two libraries can: llama-cpp-python's (a source build, 7–19 minutes of compiling on 2 CPU cores,
through its own ctypes bindings) and the prebuilt one in the ``xllamacpp`` wheel (Linux with glibc
≥ 2.17 on x86-64 with AVX2 or aarch64, macOS, Windows; every CPython ≥ 3.10; seconds to install),
whose extension module exports llama.cpp's C API (``llama_decode``, ``llama_memory_seq_rm``, …;
not ``llama_model_quantize``, but ggml's ``ggml_quantize_chunk``). specchat does not use
xllamacpp's own Python API: :class:`LlamaLibrary` loads that library with :mod:`ctypes` and
declares the C functions it calls, as ``common/speculative.cpp`` in llama.cpp calls them.
:func:`library` gives the one library a process uses (:func:`library_name`).

The struct layouts below are those of ``include/llama.h`` at the llama.cpp build the pinned
wheel carries (:data:`XLLAMACPP_REQUIREMENT`; llama.cpp b11549). They change between llama.cpp
builds, so :func:`library_path` refuses any other xllamacpp version, and :func:`load_xllamacpp`
checks the defaults the library returns against the header's (:func:`_check_layout`) first.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import logging
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.runtimes.compute_thread import on_compute_thread

logger = logging.getLogger(__name__)

XLLAMACPP_VERSION = "2026.10.11549"
XLLAMACPP_REQUIREMENT = f"xllamacpp=={XLLAMACPP_VERSION}"
"""The wheel whose llama.cpp this module's structs describe (llama.cpp b11549)."""

LLAMA_CPP_REQUIREMENT = "llama-cpp-python==0.3.36"
"""The source build specchat is tested with (~7 min of compiling on 2 CPU cores): used instead of
xllamacpp's prebuilt library when installed (built for this CPU, it is the faster of the two on
one with AVX-512; see :func:`library_name`)."""

LIBRARY_ENV = "SPECCHAT_LLAMA_LIBRARY"
"""Environment variable naming the llama.cpp library to use: ``xllamacpp`` or ``llama-cpp-python``."""

LIBRARIES = ("llama-cpp-python", "xllamacpp")

# -- types (llama.h) ---------------------------------------------------------------------------
llama_token = ctypes.c_int32
llama_pos = ctypes.c_int32
llama_seq_id = ctypes.c_int32
c_void_p, c_bool, c_int32, c_uint32, c_float, c_size_t = (ctypes.c_void_p, ctypes.c_bool, ctypes.c_int32,
                                                          ctypes.c_uint32, ctypes.c_float, ctypes.c_size_t)
c_enum = ctypes.c_int  # C enums are ints on every ABI llama.cpp builds for

GGML_TYPE_F32 = 0
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
LLAMA_FTYPE_MOSTLY_Q4_0 = 2
LLAMA_FTYPE_MOSTLY_Q2_K = 10
GGML_LOG_LEVEL_ERROR = 4

llama_progress_callback = ctypes.CFUNCTYPE(c_bool, c_float, c_void_p)
ggml_log_callback = ctypes.CFUNCTYPE(None, c_enum, ctypes.c_char_p, c_void_p)


class llama_model_params(ctypes.Structure):  # noqa: N801 (llama.h's names)
    _fields_ = [
        ("devices", c_void_p),
        ("tensor_buft_overrides", c_void_p),
        ("n_gpu_layers", c_int32),
        ("split_mode", c_enum),
        ("load_mode", c_enum),
        ("lazy_mode", c_enum),
        ("main_gpu", c_int32),
        ("tensor_split", ctypes.POINTER(c_float)),
        ("progress_callback", llama_progress_callback),
        ("progress_callback_user_data", c_void_p),
        ("kv_overrides", c_void_p),
        ("vocab_only", c_bool),
        ("check_tensors", c_bool),
        ("use_extra_bufts", c_bool),
        ("no_host", c_bool),
        ("no_alloc", c_bool),
        ("load_mtp", c_bool),
    ]


class llama_context_params(ctypes.Structure):  # noqa: N801
    _fields_ = [
        ("n_ctx", c_uint32),
        ("n_batch", c_uint32),
        ("n_ubatch", c_uint32),
        ("n_seq_max", c_uint32),
        ("n_rs_seq", c_uint32),
        ("n_outputs_max", c_uint32),
        ("n_outputs_max_per_seq", c_uint32),
        ("n_threads", c_int32),
        ("n_threads_batch", c_int32),
        ("ctx_type", c_enum),
        ("rope_scaling_type", c_enum),
        ("pooling_type", c_enum),
        ("attention_type", c_enum),
        ("flash_attn_type", c_enum),
        ("rope_freq_base", c_float),
        ("rope_freq_scale", c_float),
        ("yarn_ext_factor", c_float),
        ("yarn_attn_factor", c_float),
        ("yarn_beta_fast", c_float),
        ("yarn_beta_slow", c_float),
        ("yarn_orig_ctx", c_uint32),
        ("defrag_thold", c_float),
        ("cb_eval", c_void_p),
        ("cb_eval_user_data", c_void_p),
        ("type_k", c_enum),
        ("type_v", c_enum),
        ("moe_cache_size", c_size_t),
        ("abort_callback", c_void_p),
        ("abort_callback_data", c_void_p),
        ("embeddings", c_bool),
        ("offload_kqv", c_bool),
        ("no_perf", c_bool),
        ("op_offload", c_bool),
        ("swa_full", c_bool),
        ("kv_unified", c_bool),
        ("samplers", c_void_p),
        ("n_samplers", c_size_t),
        ("ctx_other", c_void_p),
    ]


class llama_batch(ctypes.Structure):  # noqa: N801
    _fields_ = [
        ("n_tokens", c_int32),
        ("token", ctypes.POINTER(llama_token)),
        ("embd", ctypes.POINTER(c_float)),
        ("pos", ctypes.POINTER(llama_pos)),
        ("n_seq_id", ctypes.POINTER(c_int32)),
        ("seq_id", ctypes.POINTER(ctypes.POINTER(llama_seq_id))),
        ("logits", ctypes.POINTER(ctypes.c_int8)),
    ]


class llama_model_quantize_params(ctypes.Structure):  # noqa: N801
    _fields_ = [
        ("nthread", c_int32),
        ("ftype", c_enum),
        ("output_tensor_type", c_enum),
        ("token_embedding_type", c_enum),
        ("allow_requantize", c_bool),
        ("quantize_output_tensor", c_bool),
        ("only_copy", c_bool),
        ("pure", c_bool),
        ("keep_split", c_bool),
        ("dry_run", c_bool),
        ("imatrix", c_void_p),
        ("kv_overrides", c_void_p),
        ("tt_overrides", c_void_p),
        ("prune_layers", c_void_p),
        ("max_buf_size", c_size_t),
    ]


# name: (argument types, result type); pointers to llama.cpp's opaque objects are c_void_p
_FUNCTIONS = {
    "llama_backend_init": ([], None),
    "llama_log_set": ([ggml_log_callback, c_void_p], None),
    "llama_print_system_info": ([], ctypes.c_char_p),
    "llama_supports_gpu_offload": ([], c_bool),
    "llama_model_default_params": ([], llama_model_params),
    "llama_context_default_params": ([], llama_context_params),
    "llama_model_quantize_default_params": ([], llama_model_quantize_params),
    "llama_model_load_from_file": ([ctypes.c_char_p, llama_model_params], c_void_p),
    "llama_model_free": ([c_void_p], None),
    "llama_model_get_vocab": ([c_void_p], c_void_p),
    "llama_model_n_ctx_train": ([c_void_p], c_int32),
    "llama_model_desc": ([c_void_p, ctypes.c_char_p, c_size_t], c_int32),
    "llama_model_quantize": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(llama_model_quantize_params)],
                             c_uint32),
    "llama_vocab_n_tokens": ([c_void_p], c_int32),
    "llama_vocab_is_eog": ([c_void_p, llama_token], c_bool),
    "llama_init_from_model": ([c_void_p, llama_context_params], c_void_p),
    "llama_free": ([c_void_p], None),
    "llama_get_memory": ([c_void_p], c_void_p),
    "llama_memory_clear": ([c_void_p, c_bool], None),
    "llama_memory_seq_rm": ([c_void_p, llama_seq_id, llama_pos, llama_pos], c_bool),
    "llama_batch_init": ([c_int32, c_int32, c_int32], llama_batch),
    "llama_batch_free": ([llama_batch], None),
    "llama_decode": ([c_void_p, llama_batch], c_int32),
    "llama_get_logits": ([c_void_p], ctypes.POINTER(c_float)),
    # ggml's quantizer, for a lower-bit copy without llama_model_quantize (runtimes/gguf_requant.py)
    "ggml_quantize_init": ([c_enum], None),
    "ggml_quantize_chunk": ([c_enum, ctypes.POINTER(c_float), c_void_p, ctypes.c_int64, ctypes.c_int64,
                             ctypes.c_int64, ctypes.POINTER(c_float)], c_size_t),
}


class LlamaLibrary:
    """The loaded library: each C function of :data:`_FUNCTIONS` as an attribute with its
    signature set, plus this module's constants and structs (``lib.GGML_TYPE_F32``, …)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._dll = ctypes.CDLL(str(self.path))
        for name, (argtypes, restype) in _FUNCTIONS.items():
            function = getattr(self._dll, name, None)
            if function is None:
                continue
            function.argtypes, function.restype = argtypes, restype
            setattr(self, name, function)
        for name in ("GGML_TYPE_F32", "LLAMA_FLASH_ATTN_TYPE_DISABLED", "LLAMA_FTYPE_MOSTLY_Q4_0",
                     "LLAMA_FTYPE_MOSTLY_Q2_K", "GGML_LOG_LEVEL_ERROR", "ggml_log_callback",
                     "llama_progress_callback"):
            setattr(self, name, globals()[name])

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:  # the C functions and constants set in __init__
            ...


def library_path() -> Path:
    """Where the installed xllamacpp keeps its library (its extension module).

    Raises:
        ImportError: xllamacpp is not installed, or not the version this module binds (the
            message has the ``pip install`` command).
    """
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"xllamacpp is not installed: pip install {XLLAMACPP_REQUIREMENT}")
    version = importlib.metadata.version("xllamacpp")
    if version != XLLAMACPP_VERSION:
        raise ImportError(f"xllamacpp {version} is installed; specchat binds llama.cpp's C API as built in "
                          f"{XLLAMACPP_VERSION} (struct layouts change between builds): pip install {XLLAMACPP_REQUIREMENT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("xllamacpp*.so")) + sorted(folder.glob("xllamacpp*.pyd"))
    if not found:
        raise ImportError(f"no llama.cpp library in {folder} (a damaged xllamacpp install?)")
    return found[0]


_library: LlamaLibrary | None = None


def load_xllamacpp() -> LlamaLibrary:
    """The library, loaded once, with llama.cpp's backend initialised.

    Raises:
        ImportError: as :func:`library_path`.
        OSError: the library is there but does not load here (the message is the loader's).
        RuntimeError: its structs are not laid out as this module declares them.
    """
    global _library
    if _library is None:
        lib = LlamaLibrary(library_path())
        _check_layout(lib)
        on_compute_thread(lib.llama_backend_init)  # (ggml's CPU set-up: on the thread that decodes)
        _library = lib
    return _library


def _check_layout(lib: LlamaLibrary) -> None:
    """The default parameters llama.cpp returns must read as llama.h's defaults (``n_ctx`` 512,
    ``n_batch`` 2048, ``n_ubatch`` 512, one sequence, f16 K and V, the flags' defaults): a shifted
    field would show as a wrong value here, before any load or decode uses it."""
    context = lib.llama_context_default_params()
    model = lib.llama_model_default_params()
    seen = {"n_ctx": context.n_ctx, "n_batch": context.n_batch, "n_ubatch": context.n_ubatch,
            "n_seq_max": context.n_seq_max, "type_k": context.type_k, "type_v": context.type_v,
            "no_perf": context.no_perf, "op_offload": context.op_offload, "kv_unified": context.kv_unified,
            "samplers": context.samplers, "ctx_other": context.ctx_other, "model.devices": model.devices,
            "model.use_extra_bufts": model.use_extra_bufts, "model.vocab_only": model.vocab_only}
    expected = {"n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1, "type_k": 1, "type_v": 1,
                "no_perf": True, "op_offload": True, "kv_unified": False, "samplers": None, "ctx_other": None,
                "model.devices": None, "model.use_extra_bufts": True, "model.vocab_only": False}
    wrong = {k: v for k, v in seen.items() if expected[k] != v}
    if wrong:
        raise RuntimeError(f"the llama.cpp library at {lib.path} does not lay out its parameters as specchat expects "
                           f"({wrong}); install {XLLAMACPP_REQUIREMENT}")


@contextlib.contextmanager
def ctrl_c_after_the_call():
    """Hold a Ctrl-C that comes while llama.cpp works in C, and hand it on once the call returns.

    llama.cpp calls specchat's log callback from inside a load; Python runs its SIGINT handler
    there, and a KeyboardInterrupt raised inside a ctypes callback is printed and dropped
    ("Exception ignored on calling ctypes callback function"): the Ctrl-C would be lost and the
    load would go on. Here the handler only notes the Ctrl-C; the handler that was in place
    (Python's, which raises KeyboardInterrupt) runs after the call. In a thread other than the
    main one (where Python runs no signal handler) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held and callable(previous):
        previous(signal.SIGINT, None)


# -- which library: one per process ---------------------------------------------------------
_init_lock = threading.Lock()
_loaded = None  # the library in use: llama-cpp-python's module or llama_api.LlamaLibrary
_loaded_name: str | None = None
_log_callback = None  # keep the ctypes callback alive while llama.cpp may call it


def _library_error(name: str) -> str | None:
    """Why the library ``name`` cannot be used here (None when it can)."""
    try:
        if name == "xllamacpp":
            library_path()
        else:
            import llama_cpp  # noqa: F401
    except ImportError as exc:
        return str(exc)
    except OSError as exc:  # the shared library is there but does not load
        return f"{name} is installed but its llama.cpp library does not load: {exc}"
    return None


def library_name() -> str | None:
    """The llama.cpp library this process uses, one for the whole process (two llama.cpp builds in
    one process would bind each other's symbols): ``$SPECCHAT_LLAMA_LIBRARY`` when set, else
    llama-cpp-python when installed (a build for this CPU: here 66 against 71 ms per token and
    136 against 167 ms per 5-token verify pass for Qwen2.5-Coder-1.5B Q4_K_M), else xllamacpp's
    prebuilt library (an AVX2 build; installed by ``requirements.txt`` in seconds). None when
    neither can be used."""
    if _loaded_name is not None:
        return _loaded_name
    wanted = os.environ.get(LIBRARY_ENV, "").strip()
    if wanted:
        return wanted if wanted in LIBRARIES and _library_error(wanted) is None else None
    return next((name for name in LIBRARIES if _library_error(name) is None), None)


def unavailable_reason() -> str | None:
    """None when llama.cpp can run here, else why not (in words, with the command that fixes it)."""
    if _loaded is not None:  # loaded once for the process: nothing to look up again
        return None
    wanted = os.environ.get(LIBRARY_ENV, "").strip()
    if wanted and wanted not in LIBRARIES:
        return f"{LIBRARY_ENV}={wanted!r} names no llama.cpp library specchat knows ({', '.join(LIBRARIES)})"
    if wanted:
        error = _library_error(wanted)
        return f"{LIBRARY_ENV}={wanted}: {error}" if error else None
    if library_name() is not None:
        return None
    return (f"no llama.cpp library is installed ({_library_error('xllamacpp')}); install the prebuilt one with "
            f"`pip install {XLLAMACPP_REQUIREMENT}` (seconds), or build one for this CPU with "
            f"`pip install {LLAMA_CPP_REQUIREMENT}` (cmake and a C++ compiler, about 7 minutes on 2 CPU cores)")


def library_version() -> str | None:
    """The library in use and its package's version, e.g. ``"xllamacpp 2026.10.11549"``; None when
    no llama.cpp library can be used. Reads package metadata: imports nothing."""
    import importlib.metadata

    name = library_name()
    if name is None:
        return None
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def gpu_offload() -> bool:
    """True when the installed llama.cpp was built with a GPU backend (CUDA, Metal, …)."""
    return unavailable_reason() is None and bool(library().llama_supports_gpu_offload())


def has_quantizer() -> bool:
    """True when the library in use can make the lower-bit copy the int4 kinds on llama.cpp read:
    with llama.cpp's quantizer (``llama_model_quantize``: llama-cpp-python's library) or with
    ggml's (``ggml_quantize_chunk``: xllamacpp's, through :mod:`specchat.runtimes.gguf_requant`)."""
    lib = library() if unavailable_reason() is None else None
    return lib is not None and (hasattr(lib, "llama_model_quantize") or hasattr(lib, "ggml_quantize_chunk"))


def library():
    """The library (:func:`library_name`), loaded and initialised once (backend, and llama.cpp's
    log reduced to errors).

    Raises:
        RuntimeError: no llama.cpp library can be used (:func:`unavailable_reason`).
    """
    global _loaded, _loaded_name, _log_callback

    with _init_lock:
        if _loaded is None:
            reason = unavailable_reason()
            if reason:
                raise RuntimeError(reason)
            name = library_name()
            lib: Any  # our LlamaLibrary, or llama-cpp-python's module: the same C names
            if name == "xllamacpp":
                lib = load_xllamacpp()
                callback_type = lib.ggml_log_callback
            else:
                import llama_cpp

                lib = llama_cpp
                on_compute_thread(lib.llama_backend_init)
                callback_type = lib.llama_log_callback

            @callback_type
            def log(level, text, user_data):  # GGML_LOG_LEVEL_ERROR = 4
                if level == 4 and text:
                    logger.error("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

            _log_callback = log
            lib.llama_log_set(log, ctypes.c_void_p(0))
            _loaded, _loaded_name = lib, name
    return _loaded
