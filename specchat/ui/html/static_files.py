"""The page's JavaScript and CSS, kept as real files in ``specchat/ui/html/static/`` and read once, at
import. No gradio import.

The wheel carries them as package data (pyproject.toml's ``[tool.setuptools.package-data]``,
checked by tests/test_package.py). Each file ends with one newline; :func:`static_text` returns
it as written, and the modules that inject a file (:mod:`specchat.ui.html.transcript`,
:mod:`specchat.ui.html.render`, :mod:`specchat.ui.page.layout`) frame it exactly as the page received it
when it was a Python string.
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().with_name("static")


def static_text(name: str) -> str:
    """The text of ``specchat/ui/html/static/NAME`` (UTF-8)."""
    return (STATIC / name).read_text(encoding="utf-8")
