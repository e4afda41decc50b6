"""The messages a browser session sent that have not started yet, and the reply (or race) that
streams: :class:`MessageQueue` and :class:`RunSlot`, parts of
:class:`~specchat.ui.session.chat.ChatSession`. No gradio import.

A message is noted the moment it is sent (:meth:`MessageQueue.note`: its bubble shows at once,
marked queued, with a cancel button) and taken when its reply starts
(:meth:`MessageQueue.take`), by the ticket's id. Both share the session's lock with the
:class:`RunSlot`, so "is anything streaming or waiting" is one consistent answer.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections import deque
from collections.abc import Callable

from specchat.ui.session.reply import Exchange, Run


@dataclasses.dataclass
class Ticket:
    """A message sent and not started yet.

    Attributes:
        id: unique in the session (:meth:`MessageQueue.note` returns it; ``respond`` takes it).
        message: its text (None: noted without it, nothing shown).
        exchange: its bubble, shown from the moment it was sent (marked queued while it waits).
        state: ``"waiting"``, ``"cancelled"`` (Stop, or its own cancel button) or ``"discarded"`` (Clear).
        why: what its bubble says once cancelled.
    """

    id: int
    message: str | None
    exchange: Exchange | None = None
    state: str = "waiting"
    why: str = ""


class RunSlot:
    """The one reply or race that streams in a session (at most one), and its cancel switch."""

    def __init__(self, lock: threading.RLock):
        self.lock = lock
        self.run: Run | None = None

    def claim(self, run: Run) -> bool:
        """Make ``run`` the streaming one; False (nothing changes) when another streams."""
        with self.lock:
            if self.run is not None:
                return False
            self.run = run
            return True

    def release(self, run: Run) -> None:
        """``run`` has ended (nothing changes when another took its place)."""
        with self.lock:
            if self.run is run:
                self.run = None

    def cancel(self, *, discard: bool = False) -> None:
        """Stop the streaming run after its current round; ``discard``: its updates are no longer wanted (Clear)."""
        with self.lock:
            if self.run is not None:
                self.run.discard = self.run.discard or discard
                self.run.cancel.set()


class MessageQueue:
    """The messages sent and not started yet, in the order sent, and the bubbles changed outside
    any stream since the last update (for the streaming reply to carry: a second writer of the
    transcript would break Gradio's streaming diff).

    Args:
        lock: the session's lock (shared with its :class:`RunSlot`).
        slot: the session's streaming run.
        add_exchange: shows a new bubble in the chat (the session's views).
    """

    def __init__(self, lock: threading.RLock, slot: RunSlot, add_exchange: Callable[[Exchange], Exchange]):
        self.lock = lock
        self.slot = slot
        self.add_exchange = add_exchange
        self.tickets: deque[Ticket] = deque()
        self.dirty: dict[int, Exchange] = {}  # exchange id → exchange changed outside a stream
        self._ids = itertools.count(1)

    @property
    def busy(self) -> bool:
        """True while a reply streams or a message waits."""
        with self.lock:
            return self.slot.run is not None or bool(self.tickets)

    def note(self, message: str | None) -> tuple[int, bool]:
        """Note a message sent: ``(ticket id, whether it waits behind a reply or another message)``.
        A ``message`` is shown at once, marked queued (None: counted, not shown)."""
        with self.lock:
            busy = self.slot.run is not None or bool(self.tickets)
            ticket = Ticket(next(self._ids), message)
            if message is not None:  # its place in the chat, from now on: sent order is shown order
                ticket.exchange = self.add_exchange(Exchange(message, queued=True))
                if busy:
                    self.dirty[ticket.exchange.id] = ticket.exchange
            self.tickets.append(ticket)
        return ticket.id, busy

    def take(self, ticket_id: int | None, message: str, run: Run) -> Ticket | None:
        """The ticket a reply starts for, removed from the queue, and ``run`` made the streaming
        one when that ticket still waits (or there is none). ``ticket_id`` None (a caller that
        did not keep the id: an API call, a test): the first waiting with this text, else the
        first noted without one. None: a message that was never noted."""
        with self.lock:
            if ticket_id is not None:
                ticket = next((t for t in self.tickets if t.id == ticket_id), None)
            else:
                ticket = next((t for t in self.tickets if t.message == message), None)
                ticket = ticket or next((t for t in self.tickets if t.message is None), None)
            if ticket is not None:
                self.tickets.remove(ticket)
            if ticket is None or ticket.state == "waiting":
                self.slot.run = run
            return ticket

    def cancel_by_exchange(self, exchange_id: int) -> bool:
        """The cancel button of a queued message; False when it no longer waits."""
        with self.lock:
            ticket = next((t for t in self.tickets if t.exchange is not None and t.exchange.id == exchange_id), None)
            if ticket is None:
                return False
            if ticket.state == "waiting":
                self._cancel(ticket, "not sent: you cancelled it while it waited")
            return True

    def cancel_waiting(self, why: str) -> int:
        """Cancel every waiting message (each bubble says ``why``); how many there were."""
        with self.lock:
            waiting = [t for t in self.tickets if t.state == "waiting"]
            for ticket in waiting:
                self._cancel(ticket, why)
        return len(waiting)

    def discard_all(self) -> None:
        """Clear: every noted message is dropped, those already cancelled too (they would otherwise
        show up on the new chat, marked "not sent")."""
        with self.lock:
            for ticket in self.tickets:
                ticket.state = "discarded"
            self.dirty = {}

    def carry(self, exchanges: list[Exchange], *shown: Exchange) -> tuple[Exchange, ...]:
        """``shown`` and the exchanges (still in ``exchanges``) changed outside any stream since,
        for the feed of the update being sent."""
        with self.lock:
            dirty, self.dirty = self.dirty, {}
        ids = {e.id for e in shown}
        return (*shown, *(e for i, e in dirty.items() if i not in ids and e in exchanges))

    def _cancel(self, ticket: Ticket, why: str) -> None:
        """Mark a waiting message cancelled (under the lock); its bubble says ``why``."""
        ticket.state, ticket.why = "cancelled", why
        if ticket.exchange is not None:
            ticket.exchange.queued, ticket.exchange.note = False, why
            self.dirty[ticket.exchange.id] = ticket.exchange


__all__ = ["MessageQueue", "RunSlot", "Ticket"]
