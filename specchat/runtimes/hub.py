"""Hugging Face Hub downloads, for a model that has a Hub id and no offline source: off by
default (specchat makes no network connections), allowed with ``--allow-download`` or
``$SPECCHAT_ALLOW_DOWNLOAD``; the download lives in specchat's cache under ``hub/<name>``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from specchat.errors import ModelSourceError
from specchat.offline import ALLOW_DOWNLOAD_ENV, allow_hub, download_allowed, offline_by_user  # noqa: F401 (re-exported)
from specchat.runtimes.gguf_cache import cache_root
from specchat.runtimes.registry import ModelEntry

HUB_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
"""What a download fetches: config, weights in safetensors, tokenizer and chat template files."""


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
    if entry.hub_id is None:
        raise ModelSourceError(f"model {entry.name!r} has no hub_id: nothing to download")
    target = hub_dir_for(entry, cache_dir)
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")) and (target / ".complete").is_file():
        return target
    if offline_by_user():
        raise ModelSourceError(
            f"model {entry.name!r} would be downloaded from the Hub ({entry.hub_id}), but HF_HUB_OFFLINE is set; "
            f"unset it to allow the download, or download it yourself and pass the directory as the model."
        )
    allow_hub()  # lifts the offline switch specchat itself set (specchat.offline)
    if snapshot_download is None:
        from huggingface_hub import snapshot_download as hub_snapshot_download

        snapshot_download = hub_snapshot_download
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
    (target / ".complete").write_text(f"{entry.hub_id}\n", encoding="utf-8")
    return target
