"""A Ctrl-C while a command starts ends it, even where a library swallowed the KeyboardInterrupt.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT comes. Early in the
imports that is often inside a library's own ``try: import X / except:`` (a bare ``except``
catches it too); the library goes on half-imported and a later import fails with an unrelated
error (transformers: "ModuleNotFoundError: Could not import module 'LlamaConfig'"), or nothing
fails and the chat opens as if the key had not been pressed. So the handler here notes each
Ctrl-C before the command's models are loaded, then raises as Python's own handler does:
:func:`came_while_starting` tells ``cli.main`` to end as interrupted whatever error followed,
and :func:`end_of_start` (called once the models are loaded) ends the command if a Ctrl-C
came and was swallowed. After that, Ctrl-C is the command's (stop a reply, leave the prompt).

Imports only :mod:`signal`: ``specchat.__main__`` installs it before any heavy import.
"""

from __future__ import annotations

import signal
from types import FrameType

_state = {"starting": True, "seen": 0}


def watch() -> None:
    """Install the noting handler where SIGINT has Python's default handler (a process started
    with SIGINT ignored, as a shell starts a background job, keeps it ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handle)


def _handle(signum: int, frame: FrameType | None) -> None:
    if _state["starting"]:
        _state["seen"] += 1
    raise KeyboardInterrupt


def came_while_starting() -> bool:
    """Whether a Ctrl-C came before :func:`end_of_start` (and :func:`watch` was installed)."""
    return _state["seen"] > 0


def end_of_start() -> None:
    """The command's start is over. Raises KeyboardInterrupt if a Ctrl-C came during it (one a
    library swallowed: otherwise it would have ended the start already)."""
    _state["starting"] = False
    if _state["seen"]:
        raise KeyboardInterrupt
