"""Which runtime runs a model (``--runtime transformers|llamacpp|auto``), and loading a GGUF
on llama.cpp with its tokenizer: the service's way to the llama.cpp runtime.

``auto`` goes by measurement where there is one: ``specchat calibrate --runtimes`` times the
target alone on each runtime on this machine (:mod:`specchat.analysis.runtimes`) and keeps the
record in specchat's cache (``runtimes.json``, one per machine, model, thread count and llama.cpp
library); ``auto`` then takes the faster. Without a record it is a rule: llama.cpp for a model that
has a GGUF when a llama.cpp library is installed (``requirements.txt`` installs xllamacpp's) and the
model runs on the CPU (there llama.cpp's 4-bit kernels
decoded the default target 4-5× faster than transformers' bf16 on this project's machine), else
transformers.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from specchat.runtimes import llamacpp, loading
from specchat.runtimes.registry import ModelEntry

if TYPE_CHECKING:
    from specchat.core.draft import Drafter
    from specchat.core.engine import SpeculativeEngine

RUNTIME_NAMES: tuple[str, ...] = ("auto", "transformers", "llamacpp")


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime a model runs on and why (``reason``: one line for the page and the CLI);
    ``unavailable``: why llama.cpp is not offered on this machine, when it is not."""

    name: str
    reason: str
    unavailable: str | None = None


RECORD_FILE = "runtimes.json"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measurement_key(entry: ModelEntry, threads: int | None) -> dict:
    """What a runtime measurement is valid for: this CPU, its cores, the model (name and GGUF
    checksum or file), the thread count asked for (None: the default) and the llama.cpp library
    (:func:`~specchat.runtimes.llamacpp.library_name`: builds differ in speed)."""
    source = entry.gguf.sha256 if entry.gguf is not None else str(entry.gguf_file)
    return {"processor": cpu_name(), "cpu_count": os.cpu_count(), "model": entry.name, "gguf": source,
            "threads": threads, "llama_library": llamacpp.library_name()}


def find_record(path: Path, key: dict) -> dict | None:
    """The record whose ``"key"`` is ``key`` in the JSON list of records at ``path`` (one of
    specchat's measurement files), or None (no file, an unreadable one, none for this key)."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return next((r for r in records if isinstance(r, dict) and r.get("key") == key), None) if isinstance(records, list) else None


def keep_record(path: Path, record: dict) -> Path:
    """Add ``record`` to the JSON list at ``path``, replacing the one with the same ``"key"``
    (the others stay: a cache shared by machines or models holds one record each); atomically."""
    try:
        records = [r for r in json.loads(path.read_text(encoding="utf-8"))
                   if isinstance(r, dict) and r.get("key") != record["key"]]
    except (OSError, ValueError, TypeError):
        records = []
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records + [record], indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_measurement(key: dict, path: Path | None = None) -> dict | None:
    """The runtime measurement on record for ``key`` (``{"key", "tokens_per_s": {runtime: x},
    "verify_ms": {runtime: [T(1), T(2), …]}, "measured_at"}``), or None (no file, an unreadable one,
    none for this key)."""
    record = find_record(path or loading.cache_root() / RECORD_FILE, key)
    return record if record is not None and isinstance(record.get("tokens_per_s"), dict) else None


def save_measurement(record: dict, path: Path | None = None) -> Path:
    """Keep ``record`` (replacing the one for the same key; written atomically)."""
    return keep_record(path or loading.cache_root() / RECORD_FILE, record)


def choose_runtime(entry: ModelEntry, requested: str, device: torch.device, threads: int | None = None) -> RuntimeChoice:
    """Resolve ``requested`` (``auto`` | ``transformers`` | ``llamacpp``; an entry's own
    ``runtime`` in models.yaml applies when ``auto`` is requested) for ``entry`` on ``device``;
    ``auto`` takes the runtime measured faster for this machine, model and ``threads`` when a
    measurement is on record (:func:`load_measurement`), else the rule of the module docstring.

    Raises:
        ValueError: an unknown name, or llama.cpp asked for a model with no GGUF, or llama.cpp
            asked for while no llama.cpp library is installed (the message says how to install one),
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
    record = load_measurement(measurement_key(entry, threads)) if device.type == "cpu" else None
    rates = {k: v for k, v in (record or {}).get("tokens_per_s", {}).items() if k in ("transformers", "llamacpp")}
    if record is not None and len(rates) == 2:
        best = max(rates, key=rates.__getitem__)
        figures = ", ".join(f"{'llama.cpp' if k == 'llamacpp' else k} {v:.1f}" for k, v in sorted(rates.items(), key=lambda kv: -kv[1]))
        return RuntimeChoice(best, f"auto: the faster here, measured {str(record.get('measured_at', ''))[:10]} "
                                   f"(target alone, tokens/s: {figures})")
    return RuntimeChoice("llamacpp", f"auto: a GGUF model on a CPU, llama.cpp installed ({llamacpp.library_name()}; not measured on this "
                                     "machine yet: specchat calibrate --runtimes)")


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


def unavailable_drafters(target_name: str, offered: list[str], runtime: str = "transformers") -> dict[str, str]:
    """The drafter kinds of the table a target does not offer, and why (one line each)."""
    from specchat.drafters import kinds as drafter_kinds

    why = {}
    for name in drafter_kinds.KIND_NAMES:
        kind = drafter_kinds.get(name)
        if name in offered:
            continue
        if kind.int4 and runtime == "llamacpp" and not llamacpp.has_quantizer():
            why[name] = (f"the llama.cpp library in use ({llamacpp.library_name()}) has no quantizer to make the 4-bit "
                         f"copy: `pip install {llamacpp.LLAMA_CPP_REQUIREMENT}` builds one that has")
        elif kind.needs_sibling:
            why[name] = f"{target_name} has no sibling model (a smaller one with its tokenizer)"
        elif kind.source == "hybrid":
            why[name] = "no model drafter is offered for its second part"
    return why


def describe(runtime) -> str:
    """What runs a model, in a few words: ``llama.cpp (Q4_K - Medium, 4.9 bits/weight, 2 threads, xllamacpp)``
    or ``transformers (PyTorch, bfloat16)``."""
    size = runtime.model_size()
    bits = 8 * size.weight_bytes / max(1, size.matmul_params)
    if getattr(runtime, "name", "") == "llamacpp":
        kind = runtime.weights.file_type() or "GGUF"
        threads = f"{runtime.threads} thread{'s' if runtime.threads != 1 else ''}"
        return f"llama.cpp ({kind}, {bits:.1f} bits/weight, {threads}, {llamacpp.library_name()})"
    dtype = str(next(runtime.model.parameters()).dtype).removeprefix("torch.")
    return f"transformers ({dtype}, {bits:.1f} bits/weight)"


class DescribedService(Protocol):
    """What :func:`describe_service` reads of a service (:class:`specchat.service.ChatService`)."""

    @property
    def engine(self) -> SpeculativeEngine | None:
        """The target's engine; None before the target is loaded."""
        ...

    @property
    def runtime_choice(self) -> RuntimeChoice | None:
        """Why the target runs where it does."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The target's tokenizer (a transformers one); None before the target is loaded."""
        ...

    def loaded_drafter(self, kind: str) -> Drafter | None:
        """The drafter of ``kind`` if it is loaded, else None."""
        ...


def describe_service(service: DescribedService, drafter: str | None = None) -> str:
    """One line for the page and the CLI: what runs the target and ``drafter``'s model, and why
    llama.cpp is not offered when it is not ("" before the target is loaded)."""
    from specchat.drafters.hybrid import HybridDrafter
    from specchat.drafters.model import ModelDrafter

    engine = service.engine
    if engine is None:
        return ""
    parts = [f"target on {describe(engine.target)}"]
    model = service.loaded_drafter(drafter) if drafter else None
    part = model.model_drafter if isinstance(model, HybridDrafter) else model
    if isinstance(part, ModelDrafter):
        parts.append(f"drafter on {describe(part.runtime)}")
    unavailable = service.runtime_choice.unavailable if service.runtime_choice is not None else None
    if unavailable:
        parts.append(f"llama.cpp is not offered: {unavailable}")
    from specchat.runtimes.chat import PLAIN_PROMPT_NOTE, has_chat_template

    tokenizer = service.tokenizer
    if tokenizer is not None and not has_chat_template(tokenizer):
        parts.append(PLAIN_PROMPT_NOTE)
    return " · ".join(parts)
