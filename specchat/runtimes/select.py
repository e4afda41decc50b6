"""Which runtime runs a model (``--runtime transformers|llamacpp|auto``), and loading a GGUF
on llama.cpp with its tokenizer: the service's way to the llama.cpp runtime.

``auto`` is a rule today, not a measurement: llama.cpp for a model that has a GGUF when
llama-cpp-python is installed and the model runs on the CPU (there llama.cpp's 4-bit kernels
decode the default target 2–4× faster than transformers' bf16), else transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from specchat.runtimes import llamacpp, loading
from specchat.runtimes.registry import ModelEntry

RUNTIME_NAMES: tuple[str, ...] = ("auto", "transformers", "llamacpp")


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime a model runs on and why (``reason``: one line for the page and the CLI);
    ``unavailable``: why llama.cpp is not offered on this machine, when it is not."""

    name: str
    reason: str
    unavailable: str | None = None


def choose_runtime(entry: ModelEntry, requested: str, device: torch.device) -> RuntimeChoice:
    """Resolve ``requested`` (``auto`` | ``transformers`` | ``llamacpp``; an entry's own
    ``runtime`` in models.yaml applies when ``auto`` is requested) for ``entry`` on ``device``.

    Raises:
        ValueError: an unknown name, or llama.cpp asked for a model with no GGUF, or llama.cpp
            asked for while llama-cpp-python is missing (the message says how to install it),
            or transformers asked for a user's ``.gguf`` file.
    """
    if requested not in RUNTIME_NAMES:
        raise ValueError(f"unknown runtime {requested!r} (known: {', '.join(RUNTIME_NAMES)})")
    wanted = entry.runtime if requested == "auto" else requested
    missing = llamacpp.unavailable_reason()
    if wanted == "llamacpp":
        if not entry.has_gguf:
            raise ValueError(f"model {entry.name!r} has no GGUF file, so llama.cpp cannot run it; use --runtime transformers")
        if missing:
            raise ValueError(f"--runtime llamacpp: {missing}")
        return RuntimeChoice("llamacpp", "asked for" if requested == "llamacpp" else "models.yaml says runtime: llamacpp")
    if wanted == "transformers":
        if entry.gguf_file is not None and entry.gguf is None:
            raise ValueError(f"{entry.gguf_file} is a GGUF file: it runs on llama.cpp (--runtime llamacpp); "
                             "for transformers pass a Hugging Face-format directory")
        why = "asked for" if requested == "transformers" else "models.yaml says runtime: transformers"
        return RuntimeChoice("transformers", why + (f"; llama.cpp is not offered: {missing}" if missing else ""), missing)
    if not entry.has_gguf:
        return RuntimeChoice("transformers", "auto: the model has no GGUF file for llama.cpp")
    if missing:
        return RuntimeChoice("transformers", f"auto: llama.cpp is not offered ({missing})", missing)
    if device.type != "cpu" and not llamacpp.gpu_offload():
        return RuntimeChoice("transformers", f"auto: the model runs on {device.type} and this llama.cpp build is CPU-only")
    return RuntimeChoice("llamacpp", "auto: a GGUF model and llama-cpp-python installed")


def load_llamacpp(entry: ModelEntry, *, threads: int | None = None, progress: bool = True, lower_bit: bool = False):
    """Load ``entry``'s GGUF on llama.cpp as it is (no conversion), or with ``lower_bit`` a
    lower-bit copy of it (:func:`~specchat.runtimes.llamacpp.lower_bit_copy`, made once into
    ``cache_root()/gguf/``: the int4 drafter kinds on llama.cpp), and its tokenizer (converted
    from the GGUF's metadata once, with the chat template; seconds).

    Returns:
        ``(runtime, tokenizer)``: a :class:`~specchat.runtimes.llamacpp.LlamaCppRuntime` with its
        own context (``runtime.weights`` the loaded GGUF) and the Hugging Face tokenizer.

    Raises:
        ModelSourceError, ChecksumError: the GGUF is missing or damaged.
        RuntimeError: llama.cpp cannot load it.
    """
    path = loading.gguf_file_for(entry, progress=progress)
    tokenizer = loading.load_tokenizer(loading.gguf_tokenizer_dir(entry, Path(path)))
    if lower_bit:
        path = llamacpp.lower_bit_copy(Path(path), loading.cache_root() / "gguf", threads=threads)
    runtime = llamacpp.LlamaCppRuntime(llamacpp.LlamaCppModel(path), context_length=entry.context_length, threads=threads)
    return runtime, tokenizer


def unavailable_drafters(target_name: str, offered: list[str]) -> dict[str, str]:
    """The drafter kinds of the table a target does not offer, and why (one line each)."""
    from specchat.drafters import kinds as drafter_kinds

    return {name: f"{target_name} has no sibling model (a smaller one with its tokenizer)"
            for name in drafter_kinds.KIND_NAMES if name not in offered and drafter_kinds.get(name).needs_sibling}


def describe(runtime) -> str:
    """What runs a model, in a few words: ``llama.cpp (Q4_K_M GGUF, 4.9 bits/weight, 2 threads)``
    or ``transformers (PyTorch, bfloat16)``."""
    size = runtime.model_size()
    bits = 8 * size.weight_bytes / max(1, size.matmul_params)
    if getattr(runtime, "name", "") == "llamacpp":
        kind = runtime.weights.file_type() or "GGUF"
        return f"llama.cpp ({kind}, {bits:.1f} bits/weight, {runtime.threads} threads)"
    dtype = str(next(runtime.model.parameters()).dtype).removeprefix("torch.")
    return f"transformers ({dtype}, {bits:.1f} bits/weight)"


def describe_service(service, drafter: str | None = None) -> str:
    """One line for the page and the CLI: what runs the target and ``drafter``'s model, and why
    llama.cpp is not offered when it is not ("" before the target is loaded)."""
    engine = getattr(service, "engine", None)
    if engine is None:
        return ""
    parts = [f"target on {describe(engine.target)}"]
    model = getattr(service, "_drafters", {}).get(drafter) if drafter else None
    runtime = getattr(getattr(model, "model_drafter", model), "runtime", None)
    if runtime is not None:
        parts.append(f"drafter on {describe(runtime)}")
    unavailable = getattr(getattr(service, "runtime_choice", None), "unavailable", None)
    if unavailable:
        parts.append(f"llama.cpp is not offered: {unavailable}")
    return " · ".join(parts)
