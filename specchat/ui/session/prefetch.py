"""A reply's events computed in a thread of their own, while the page draws the ones before.

A streaming Gradio handler is a generator: after each update it yields, the generator stays
suspended until Gradio has post-processed the update, diffed it and queued it for the browser,
and only then asks for the next one. Were the engine's event stream read straight from that
generator, the engine would sit idle for all of it: on a 2-core machine, llama.cpp waited about
10 ms per update, 0.76 s of a 20.3 s reply of 256 tokens (3.7 %, measured with the default pair
and the target alone). :class:`Prefetched` runs the stream in a thread that keeps computing while
the handler's update is on its way.

One exception to "keep computing": before a *timing round* (a round that times the target alone,
which every speedup on the page is measured against), the thread waits until the handler has
taken every event so far and asked for more, so that no update of this reply is being prepared
while the target-only step is timed (the same rule the handler follows when it never draws just
before a timing round).

The reader is woken only when it has something to do. A handler that draws at most every 0.4 s
has nothing to do with the ~40 events a second a reply makes in between (a token and a round's
end each), so :meth:`Prefetched.next_or_idle` can be told to sleep until the next draw is due
(``quiet_until``) and, after that, to wake only for items that could be drawn (``wakes``); the
pause before a timing round and the stream's end wake it at once. (Measured on a 2-core machine,
the ~40 wake-ups a second did not slow decoding by themselves: ~5 a second is simply less work.)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

IDLE = object()  # Prefetched.next_or_idle: nothing came within the timeout


class Prefetched:
    """Iterate over ``make_stream()``'s items, computed ahead in a daemon thread.

    Args:
        make_stream: called once, in the thread, to make the iterator (so that whatever it does
            first, such as encoding the chat, also runs there).
        cancel: set by :meth:`close`; the stream is expected to stop soon after (the engine
            checks it between rounds).
        pause_after: ``pause_after(item)`` True: once ``item`` is queued, the thread waits until
            the reader has taken it and asked for the next item (or :meth:`close`).
        wakes: ``wakes(item)`` False: ``item`` does not wake a reader waiting in
            :meth:`next_or_idle` (it is queued and returned with the next item that does, or at
            the reader's timeout). Every item wakes it by default.

    Iterating re-raises, in the reader's thread, any exception the stream raised, after the
    items it produced before it. :meth:`close` does not wait for the thread: a stream in the
    middle of a long step (a prefill) finishes it in the background; the service's own lock
    keeps the next reply from starting before it.
    """

    def __init__(self, make_stream: Callable[[], Iterator[Any]], cancel: threading.Event, *,
                 pause_after: Callable[[Any], bool] = lambda item: False,
                 wakes: Callable[[Any], bool] = lambda item: True, name: str = "specchat-stream"):
        self._make_stream = make_stream
        self._cancel = cancel
        self._pause_after = pause_after
        self._wakes = wakes
        self._items: deque = deque()
        self._cond = threading.Condition()
        self._reading = False  # the reader holds an item it has not finished with
        self._finished = False
        self._closed = False
        self._listening = True  # a waiting reader is to be woken by the next item that wakes it
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        stream = None
        try:
            stream = self._make_stream()
            for item in stream:
                with self._cond:
                    if self._closed:
                        break
                    self._items.append(item)
                    pause = self._pause_after(item)
                    if pause or (self._listening and self._wakes(item)):
                        self._cond.notify_all()
                    if pause:
                        while (self._items or self._reading) and not self._closed:
                            self._cond.wait()
        except BaseException as exc:  # handed to the reader, which raises it
            self._error = exc
        finally:
            close = getattr(stream, "close", None)  # a generator's (a plain iterator has none)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: S110 (closing after a failure: the failure is what counts)
                    pass
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def __iter__(self) -> Prefetched:
        return self

    def __next__(self) -> Any:
        return self.next_or_idle(None)

    def next_or_idle(self, timeout: float | None, *, quiet_until: float | None = None) -> Any:
        """Like ``next()``, but when no item comes within ``timeout`` seconds return
        :data:`IDLE` (the reader may then do something else, e.g. show a message sent meanwhile,
        and ask again); ``timeout`` None waits for an item (``next()``). Raises StopIteration at
        the end, and the stream's error after its items.

        ``quiet_until`` (a ``time.monotonic()`` time): until then only the stream's pause
        (``pause_after``), its end or :meth:`close` wake the reader; items that come meanwhile
        are returned after it (at ``quiet_until``, or at ``timeout`` if that is sooner). Items
        already queued are returned at once either way. After ``quiet_until`` (or without it) the
        first item that ``wakes`` wakes the reader."""
        with self._cond:
            self._reading = False  # the reader is done with the item before: it asks for the next
            self._cond.notify_all()
            start = time.monotonic()
            end = None if timeout is None else start + timeout
            while not self._items and not self._finished:
                now = time.monotonic()
                if end is not None and now >= end:
                    break
                if quiet_until is not None and now < quiet_until:
                    # not woken by an item: by the pause, the end, close, or the time (then the
                    # items queued meanwhile, if any, end the loop)
                    self._listening = False
                    self._cond.wait((quiet_until if end is None else min(quiet_until, end)) - now)
                    continue
                self._listening = True
                self._cond.wait(None if end is None else end - now)
            self._listening = True
            if self._items:
                self._reading = True
                return self._items.popleft()
            if not self._finished:
                return IDLE
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration

    def queued(self, predicate: Callable[[Any], bool]) -> bool:
        """Whether an item for which ``predicate`` is True waits in the queue (made, not yet read)."""
        with self._cond:
            return any(predicate(item) for item in self._items)

    def close(self) -> None:
        """Stop reading: set ``cancel`` and let the thread end on its own (items still queued
        are dropped)."""
        self._cancel.set()
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
