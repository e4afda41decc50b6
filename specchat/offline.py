"""specchat makes no network connection unless the user allows a download.

huggingface_hub (imported by transformers, gradio and gradio_client) reaches huggingface.co on
its own: a model's files, and, since huggingface_hub 1.x, a registry of "agent harnesses" that
``build_hf_headers`` fetches the first time any client builds its request headers. Its
``HF_HUB_OFFLINE`` switch stops all of that, but it is read once, when huggingface_hub is
imported. So importing :mod:`specchat` sets it (and turns telemetry and Gradio's analytics
off) before anything else can import huggingface_hub, unless the user set those variables
or allowed downloads (``$SPECCHAT_ALLOW_DOWNLOAD``).

``--allow-download`` is parsed after the import; :func:`allow_hub` then lifts the offline
switch that specchat set (never one the user set), in the environment and in
huggingface_hub's constants if it is already imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any

ALLOW_DOWNLOAD_ENV = "SPECCHAT_ALLOW_DOWNLOAD"
_TRUE = ("1", "true", "yes", "on")
_set_here: set[str] = set()  # the variables this module set (the user's own are left alone)


def download_allowed() -> bool:
    """True when the user allowed Hub downloads (``$SPECCHAT_ALLOW_DOWNLOAD`` is 1/true/yes)."""
    return os.environ.get(ALLOW_DOWNLOAD_ENV, "").strip().lower() in _TRUE


def stay_offline() -> None:
    """Set ``HF_HUB_OFFLINE=1`` (unless downloads are allowed), ``HF_HUB_DISABLE_TELEMETRY=1`` and
    ``GRADIO_ANALYTICS_ENABLED=False`` where the environment does not say otherwise. Called when
    :mod:`specchat` is imported; a no-op for a variable the user set."""
    wanted = {"HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    if not download_allowed():
        wanted["HF_HUB_OFFLINE"] = "1"
    for name, value in wanted.items():
        if name not in os.environ:
            os.environ[name] = value
            _set_here.add(name)


def offline_by_user() -> bool:
    """True when ``HF_HUB_OFFLINE`` is on and the user, not specchat, turned it on."""
    return "HF_HUB_OFFLINE" not in _set_here and os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def allow_hub() -> None:
    """Allow Hub downloads for this process (``--allow-download``): sets
    ``$SPECCHAT_ALLOW_DOWNLOAD`` and lifts the ``HF_HUB_OFFLINE`` that :func:`stay_offline` set,
    also in huggingface_hub's constants when it was imported already. A user's own
    ``HF_HUB_OFFLINE`` stays."""
    os.environ[ALLOW_DOWNLOAD_ENV] = "1"
    if "HF_HUB_OFFLINE" in _set_here:
        os.environ.pop("HF_HUB_OFFLINE", None)
        _set_here.discard("HF_HUB_OFFLINE")
        constants: Any = sys.modules.get("huggingface_hub.constants")  # a module: its flag is read at call time
        if constants is not None:
            constants.HF_HUB_OFFLINE = False
