"""The :class:`~specchat.ui.session.chat.ChatSession` of each browser session (tab), by Gradio's
session hash, with a cap on how many are kept."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Session(Protocol):
    """What the store needs of a session."""

    @property
    def busy(self) -> bool: ...

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
        """The tab closed: stop its reply and forget its conversation."""
        with self._lock:
            session = self._sessions.pop(key, None) if key is not None else None
        if session is not None:
            session.close()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions
