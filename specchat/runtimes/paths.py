"""Where specchat keeps files on this machine (no torch import: the app's page uses it too)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import platformdirs

CACHE_DIR_ENV = "SPECCHAT_CACHE_DIR"


def cache_root() -> Path:
    """Root of specchat's cache: ``$SPECCHAT_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("specchat")``
    (``~/.cache/specchat`` on Linux). Converted models live under ``<root>/models/``."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("specchat"))


def browser_secret() -> str:
    """The key the page's conversation is encrypted with in the browser's localStorage (Gradio's
    ``BrowserState``): made once per machine and kept in ``<cache root>/browser-secret``, so that a
    conversation survives a restart of the app too. Where the file cannot be written (a read-only
    disk), a new key each start: the conversation then survives reloads only."""
    path = cache_root() / "browser-secret"
    try:
        text = path.read_text(encoding="utf-8").strip()
        if len(text) >= 16:
            return text
    except OSError:
        pass
    key = secrets.token_urlsafe(24)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(key, encoding="utf-8")
        path.chmod(0o600)
    except OSError:
        pass
    return key
