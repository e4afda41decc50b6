"""A streaming reply's text on the page past Gradio's event stream: a live channel per reply. No gradio import.

Why: Gradio (6.31) handles each message of an event's stream in the browser with work that does
not depend on what the message changes: for every component any event has updated so far it sets
a loading status and takes a deep copy (Svelte's ``$state.snapshot``) of all its properties, the
plots' figures and the browser's copy of the chat included; on this 2-core machine that was most
of the browser's ~20 ms per update (a CPU profile of one 256-token reply: Gradio's status update
~2 s, the transcript's own script ~0.2 s), CPU that the model's two threads then lack. So while a
reply streams, its text goes to the page through a channel of its own: the page's script reads
``GET /specchat/live/<key>`` (server-sent events; :mod:`specchat.ui.page.live`) and applies each
value as it applies a Gradio one, the stats line under the chat included (a value's ``stats``).
The reply's start and its end still go through Gradio, and so does every update while no page
reads the channel (no script, a proxy that buffers the stream, the route not mounted): the
channel is an optimisation that falls back by itself.

A value is a wired transcript *feed* (:mod:`specchat.ui.html.transcript`): the state of the
exchanges that changed, keyed by id. A reader that falls behind gets one value: the values it has
not had, folded (:func:`fold`: every exchange they carry, the latest state of each), so an
exchange that changed once (a queued message shown, a note) is never lost behind a later round's.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PATH = "specchat/live/"  # the route's path, relative to the page's root (the script resolves it)


def fold(older: dict, newer: dict) -> dict:
    """Two wired feed values as one, ``newer`` applied after ``older``: ``newer``'s seq and epoch,
    the exchanges of both (``newer``'s where both carry one), the stats line (``newer``'s, else
    ``older``'s), and a reset if either had one (a reset in ``newer`` drops what ``older`` carried:
    the page would have dropped it too)."""
    if newer.get("reset"):
        return newer
    stats = {"stats": older["stats"]} if "stats" in older and "stats" not in newer else {}
    return {**newer, **stats, "reset": bool(older.get("reset")),
            "items": {**older.get("items", {}), **newer.get("items", {})}}


class LiveChannel:
    """One reply's live values, for the page's reader(s). Thread-safe: the reply's generator
    publishes from Gradio's worker thread, the route waits in another.

    Attributes:
        key: a random token (128 bits, URL-safe): only the page that was sent it can read.
        path: where the page reads it, relative to the page's root (``specchat/live/<key>``).
    """

    def __init__(self) -> None:
        self.key = secrets.token_urlsafe(16)
        self.path = PATH + self.key
        self._cond = threading.Condition()
        self._version = 0  # of the latest value
        self._taken = 0  # the version a reader last took
        self._value: dict | None = None
        self._closed = False
        self._readers = 0

    @property
    def readers(self) -> int:
        """How many pages read the channel now (connected to the route)."""
        return self._readers

    def attach(self) -> None:
        """A reader connected."""
        with self._cond:
            self._readers += 1

    def detach(self) -> None:
        """A reader went away (a reply's end, a closed tab, a dropped connection)."""
        with self._cond:
            self._readers = max(0, self._readers - 1)

    def publish(self, value: dict) -> None:
        """Make ``value`` (a wired transcript feed: JSON-able, not changed afterwards) the latest,
        folded onto the values no reader has taken yet (:func:`fold`), and wake the readers."""
        with self._cond:
            if self._value is not None and self._version > self._taken:
                value = fold(self._value, value)
            self._value, self._version = value, self._version + 1
            self._cond.notify_all()

    def close(self) -> None:
        """The reply ended: readers get the latest value (if they had not) and then the end."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self, after: int, timeout: float) -> tuple[int, str | None, bool]:
        """Block until a value newer than version ``after`` is published, the channel closes, or
        ``timeout`` seconds pass. Returns ``(version, payload, closed)``: ``payload`` is the
        latest value's JSON when it is newer than ``after`` (it is then taken: the next value is
        not folded onto it), else None."""
        with self._cond:
            self._cond.wait_for(lambda: self._version > after or self._closed, timeout)
            version, value, closed = self._version, self._value, self._closed
            if version > after:
                self._taken = version
        if version <= after or value is None:
            return version, None, closed
        return version, json.dumps(value, ensure_ascii=False, separators=(",", ":")), closed

    def offer(self, value: dict) -> dict | None:
        """A streaming reply's transcript update: published here when a page reads the channel
        (None: send nothing through Gradio), else ``value`` to send through Gradio, with the
        channel's path under ``"live"`` so that the page starts reading.

        A reader counts from its connection to the route until the route sees it gone (at most
        :data:`specchat.ui.page.live.POLL_S` later). Only the page that was sent the key reads: a
        second reader of the same key would keep the updates off Gradio for the first one too."""
        if self._readers:
            self.publish(value)
            return None
        return {**value, "live": self.path}


class LiveChannels:
    """The open channels by key (the process's: every browser session's replies)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, LiveChannel] = {}

    def get(self, key: str) -> LiveChannel | None:
        """The open channel of ``key``, or None (never opened, or closed)."""
        with self._lock:
            return self._open.get(key)

    @contextmanager
    def channel(self) -> Iterator[LiveChannel]:
        """A new channel for one reply, open while the ``with`` block runs, then closed."""
        channel = LiveChannel()
        with self._lock:
            self._open[channel.key] = channel
        try:
            yield channel
        finally:
            with self._lock:
                self._open.pop(channel.key, None)
            channel.close()


LIVE = LiveChannels()
"""The process's live channels: the page's handlers open them, the route (:mod:`specchat.ui.page.live`) reads them."""
