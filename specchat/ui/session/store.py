"""The :class:`~specchat.ui.session.chat.ChatSession` of each browser session (tab), by Gradio's
session hash, with a cap on how many are kept; and, for a reload, the conversation a tab's
session held when it went (the browser's own copy is up to a save interval older)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

DROPPED_KEPT_S = 600.0  # how long the conversation of a closed tab waits for its reload
DROPPED_KEPT = 32  # the most such conversations kept


class _Session(Protocol):
    """What the store needs of a session."""

    @property
    def busy(self) -> bool: ...

    copy_key: str  # written into the browser's copy (saved()): which session wrote it

    def saved(self) -> dict: ...

    def close(self) -> None: ...


ChatSession = TypeVar("ChatSession", bound=_Session)  # a ChatSession (the store does not import it)


class SessionStore(Generic[ChatSession]):
    """The :class:`ChatSession` of each browser session, by Gradio's session hash.

    Args:
        factory: makes a new session.
        capacity: the most sessions kept; the least recently used idle one is closed beyond it
            (a client that never sends the tab's unload event cannot grow memory for ever).
    """

    def __init__(self, factory: Callable[[], ChatSession], *, capacity: int = 256):
        self.factory = factory
        self.capacity = capacity
        self._sessions: OrderedDict[str, ChatSession] = OrderedDict()
        self._dropped: OrderedDict[str, tuple[float, dict]] = OrderedDict()  # copy key -> (when, saved())
        self._lock = threading.Lock()

    def get(self, key: str | None) -> ChatSession:
        """The session for ``key`` (created on first use). None (no browser session, e.g. a
        direct call) gets a fresh session that is not kept."""
        if key is None:
            return self.factory()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = self.factory()
                idle = [k for k, s in self._sessions.items() if k != key and not s.busy]
                for old in idle[: max(len(self._sessions) - self.capacity, 0)]:
                    self._sessions.pop(old).close()
            self._sessions.move_to_end(key)
            return session

    def drop(self, key: str | None) -> None:
        """The tab closed (or reloads): stop its reply and forget its conversation, keeping its
        last copy a while for :meth:`freshest` (a reply streaming now is kept as far as it got)."""
        with self._lock:
            session = self._sessions.pop(key, None) if key is not None else None
        if session is None:
            return
        copy = session.saved()  # before close(): a streaming reply is kept as a reply cut short
        session.close()
        if copy:
            with self._lock:
                self._dropped[session.copy_key] = (time.monotonic(), copy)
                while len(self._dropped) > DROPPED_KEPT:
                    self._dropped.popitem(last=False)

    def freshest(self, saved: Any, asking: ChatSession) -> Any:
        """The copy a reopened page restores, for ``saved``, the one its browser kept: what the
        session that wrote it holds now (still here: the reload's unload may come after the new
        page's load), or held when its tab went (taken: once), if that was less than
        :data:`DROPPED_KEPT_S` ago; else ``saved`` itself. The browser's copy is rewritten only
        every few seconds while a reply streams, so it can miss the reply's last words."""
        key = saved.get("key") if isinstance(saved, dict) else None
        if not isinstance(key, str) or not key:
            return saved
        with self._lock:
            dropped = self._dropped.pop(key, None)
            live = next((s for s in self._sessions.values() if s is not asking and s.copy_key == key), None)
        if live is not None:
            return live.saved() or saved
        if dropped is not None and time.monotonic() - dropped[0] < DROPPED_KEPT_S:
            return dropped[1]
        return saved

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions
