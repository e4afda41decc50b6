"""Several chats in one browser: the list the page shows, kept across reloads, with New, switch,
Rename, Delete and Undo (of a Delete or a Clear).

One chat is active: its conversation is the session's (:class:`~specchat.ui.session.chat.ChatSession`)
and its copy in the browser is the page's ``saved`` value (:mod:`specchat.ui.session.saved`). The
others are kept here as such copies, with a title each (the first message, until renamed), in a
second value the browser keeps (:meth:`ChatShelf.state`; ``parse`` checks what comes back). A chat
switched to is restored as after a reload: the text of its replies, the history the model sees.

Nothing here touches the session; :class:`~specchat.ui.session.chat.ChatSession` calls it with the
active chat's copy and applies what comes back.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from specchat.ui.session.saved import SAVED_LIMIT_CHARS, parse_saved

CHATS_VERSION = 1
MAX_CHATS = 40  # the most chats kept (the oldest beyond it is dropped: localStorage holds ~5 MB)
TITLE_CHARS = 48
NEW_TITLE = "New chat"


def _content(saved: dict | None) -> tuple:
    """What a chat's copy says, for "did it change": what the model sees and the messages sent."""
    saved = saved or {}
    return (saved.get("history") or [], [e.get("message") for e in saved.get("exchanges") or []],
            saved.get("system_prompt", ""))


def title_of(saved: dict | None) -> str:
    """A chat's title from its copy: its first message, cut to :data:`TITLE_CHARS` on one line,
    without its Markdown marks (a code block pasted after a question: the question alone)."""
    exchanges = (saved or {}).get("exchanges") or []
    if not exchanges:
        return NEW_TITLE
    message = str(exchanges[0].get("message", ""))
    prose = message.split("```")[0]
    text = " ".join((prose if prose.strip() else message.replace("```", " ")).split())
    text = re.sub(r"^(?:[#>]+\s*)+", "", text.replace("`", "").replace("**", ""))
    return (text[: TITLE_CHARS - 1] + "…") if len(text) > TITLE_CHARS else (text or NEW_TITLE)


@dataclass
class Chat:
    """One chat of the list: its id, its title (``renamed``: the person's), its copy (None for the
    active chat, whose copy is the page's ``saved``)."""

    id: str
    title: str = NEW_TITLE
    renamed: bool = False
    saved: dict | None = None
    updated: float = 0.0  # when it last changed (a message, a reply; seconds since the epoch): the list's order


@dataclass
class ChatShelf:
    """The chats of one browser (module docstring). ``undo`` is the last chat deleted or cleared,
    with its copy, until another change."""

    chats: list[Chat] = field(default_factory=list)
    active: str = ""
    undo: Chat | None = None
    _ids: Any = field(default_factory=itertools.count, repr=False)
    # what the active chat's copy held when last noted (shown by a switch, restored by a reload, a
    # message, a reply): a chat moves up the list when its content changes, and only then (a click
    # or a reload does not move a chat under the pointer); None: not noted yet
    _seen: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.chats:
            self.active = self._new().id

    def _new(self) -> Chat:
        chat = Chat(f"c{int(time.time() * 1000):x}{next(self._ids)}", updated=time.time())
        self.chats.insert(0, chat)
        while len(self.chats) > MAX_CHATS:  # the least recently active goes (not the last in the list: a switch reorders nothing)
            self.chats.remove(min(self.chats[1:], key=lambda c: c.updated))
        return chat

    def get(self, chat_id: str) -> Chat | None:
        return next((c for c in self.chats if c.id == chat_id), None)

    @property
    def current(self) -> Chat:
        chat = self.get(self.active)
        if chat is None:  # never: every change keeps the active chat in the list
            chat = self._new()
            self.active = chat.id
        return chat

    def note_active(self, saved: dict) -> None:
        """The active chat's copy as it is now (a message, a reply, a reload): its title follows its
        first message, and it moves up the list if its content changed since it was last noted."""
        chat = self.current
        if not chat.renamed:
            chat.title = title_of(saved)
        content = _content(saved)
        if self._seen is not None and content != self._seen:
            chat.updated = time.time()
        self._seen = content

    def stash(self, saved: dict) -> None:
        """Keep the active chat's copy in the list (before another chat becomes active); it moves up
        the list only if it changed since it was last noted."""
        self.note_active(saved)
        self.current.saved = saved or {}
        self._seen = None

    def new(self, saved: dict) -> None:
        """New chat: the active one is kept (an empty one is reused, not piled up), a new empty one is active."""
        if not (saved or {}).get("exchanges") and not self.current.renamed:
            return
        self.stash(saved)
        self.active, self._seen = self._new().id, _content({})

    def switch(self, chat_id: str, saved: dict) -> dict | None:
        """Make ``chat_id`` active: returns its copy (to restore), or None if there is no such chat
        or it is active already."""
        target = self.get(chat_id)
        if target is None or chat_id == self.active:
            return None
        if not (saved or {}).get("exchanges") and not self.current.renamed:
            self.chats.remove(self.current)  # an empty chat left behind is not kept: New makes one when wanted
            self._seen = None
        else:
            self.stash(saved)
        self.active, copy, target.saved = chat_id, target.saved or {}, None
        self._seen = _content(copy)
        return copy

    def rename(self, title: str) -> bool:
        """Rename the active chat (a blank title gives back the first message). False if too long."""
        text = " ".join(title.split())
        if len(text) > 200:
            return False
        chat = self.current
        chat.renamed = bool(text)
        chat.title = text or NEW_TITLE
        return True

    def delete(self, saved: dict) -> dict:
        """Delete the active chat (kept in :attr:`undo`); the most recent other chat becomes active
        (a new empty one if none). Returns the copy to restore."""
        gone = self.current
        gone.saved = saved or {}
        self.chats.remove(gone)
        self._seen = None
        if gone.saved.get("exchanges") or gone.renamed:  # an empty chat is not worth an Undo (nor losing one for)
            self.undo = gone
        if not self.chats:
            self.active = self._new().id
            return {}
        nxt = max(self.chats, key=lambda c: c.updated)
        self.active, copy, nxt.saved = nxt.id, nxt.saved or {}, None
        self._seen = _content(copy)
        return copy

    def cleared(self, saved: dict) -> None:
        """Clear emptied the active chat: its copy before, kept in :attr:`undo`."""
        if (saved or {}).get("exchanges"):
            self.undo = Chat(self.active, self.current.title, self.current.renamed, saved, time.time())

    def take_undo(self, saved: dict) -> dict | None:
        """Undo the last Delete or Clear: that chat is active again (its copy returned, to
        restore); None when there is nothing to undo."""
        chat, self.undo = self.undo, None
        if chat is None:
            return None
        existing = self.get(chat.id)
        if existing is not None and chat.id == self.active and (saved or {}).get("exchanges"):
            # Clear, then new messages in the same chat: both are kept, the cleared one as a chat of its own
            chat = Chat(f"{chat.id}u{next(self._ids)}", chat.title, chat.renamed, chat.saved)
            existing = None
        if existing is None:  # deleted (or set aside above): back in the list
            self.stash(saved)
            self.chats.insert(0, Chat(chat.id, chat.title, chat.renamed, None, time.time()))
        elif chat.id != self.active:
            self.stash(saved)
            existing.saved = None
        self.active, self._seen = chat.id, _content(chat.saved)
        return chat.saved or {}

    def expire_undo(self) -> None:
        """A message was sent: an Undo offered before it is withdrawn (it would undo the wrong thing)."""
        self.undo = None

    # -- the list on the page, and its copy in the browser ---------------------------------------
    def choices(self) -> list[tuple[str, str]]:
        """The list as (title, id), most recently active first."""
        return [(c.title, c.id) for c in sorted(self.chats, key=lambda c: -c.updated)]

    def state(self) -> dict:
        """What the browser keeps: every chat but the active one's copy (that is the page's ``saved``)."""
        return {"version": CHATS_VERSION, "active": self.active,
                "chats": [{"id": c.id, "title": c.title, "renamed": c.renamed, "updated": c.updated,
                           "saved": None if c.id == self.active else c.saved} for c in self.chats]}

    @classmethod
    def parse(cls, value: Any) -> ChatShelf:
        """A list kept by the browser (:meth:`state`), checked; anything else (none yet, another
        version, tampered with) gives a fresh list with one empty chat. A chat whose copy fails
        :func:`~specchat.ui.session.saved.parse_saved` is kept with an empty copy."""
        if not isinstance(value, dict) or value.get("version") != CHATS_VERSION or not isinstance(value.get("chats"), list):
            return cls()
        if len(json.dumps(value)) > SAVED_LIMIT_CHARS:
            return cls()
        chats = []
        for c in value["chats"][:MAX_CHATS]:
            if not isinstance(c, dict) or not isinstance(c.get("id"), str) or not isinstance(c.get("title"), str):
                continue
            saved = c.get("saved")
            try:
                parse_saved(saved)
            except ValueError:
                saved = {}
            updated = c.get("updated")
            chats.append(Chat(c["id"][:40], c["title"][:200], c.get("renamed") is True, saved if isinstance(saved, dict) else None,
                              float(updated) if isinstance(updated, (int, float)) and not isinstance(updated, bool) else 0.0))
        if not chats:
            return cls()
        shelf = cls(chats=chats)
        active = value.get("active")
        shelf.active = active if isinstance(active, str) and shelf.get(active) is not None else chats[0].id
        shelf.current.saved = None
        return shelf
