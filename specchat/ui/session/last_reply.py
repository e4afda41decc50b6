"""What the person can do to the last reply: Regenerate, Edit (and resend), Continue.

Each acts on the conversation's last exchange once nothing streams or waits, and says why not
otherwise:

- **Regenerate**: the reply stays on the page (marked: no longer part of the conversation) and
  its message is sent again, with the settings on the page now: the same message with another
  drafter is a like-for-like comparison, one row each in the table.
- **Edit** (↑ in the empty box, or the Edit button): the last message goes back into the box and
  the exchange stays until the edited message is sent; then it leaves the page and the
  conversation, and the edited message is sent in its place (Esc, or emptying the box, cancels).
- **Continue**: a reply cut at its token limit (or stopped) is written on from its last token: a
  new exchange whose reply continues the one above (messages Stop cancelled below the reply move
  below it); the model sees them as one reply (:meth:`Conversation.begin_continuation`).

Regenerate and Continue send through the session's queue like a typed message (a ticket each);
the session asks :meth:`LastReply.continuation` which ticket is a Continue.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from specchat.conversation import Conversation
from specchat.ui.html.render import NOTHING_WRITTEN
from specchat.ui.session.queue import MessageQueue
from specchat.ui.session.reply import Exchange
from specchat.ui.session.saved import UNANSWERED
from specchat.ui.session.view import View
from specchat.ui.session.views import SessionViews

REGENERATED_NOTE = "regenerated below: this reply is no longer part of the conversation"
EDITED_NOTE = "regenerated, then its message was taken back to edit: this reply is no longer part of the conversation"


class Resend(NamedTuple):
    """A message to send again (Regenerate, Continue): its text and its ticket, or None and why not."""

    message: str | None
    ticket: int | None
    view: View  # what the page changes at once (a note on the old reply, a toast)


class LastReply:
    """The actions on the last reply of one session (module docstring); the session owns one.

    Args:
        conversation, views, queue: the session's (what the model sees, what the page shows,
            the messages sent and the streaming run).
        lock: the session's lock.
    """

    def __init__(self, conversation: Conversation, views: SessionViews, queue: MessageQueue, lock: threading.RLock):
        self.conversation, self.views, self.queue, self._lock = conversation, views, queue, lock
        self._continuing: dict[int, Exchange] = {}  # a Continue's ticket → the exchange it continues

    def _last(self, action: str) -> tuple[Exchange | None, str]:
        """The last exchange, if ``action`` may act on it now, else (None, why not)."""
        if self.queue.busy:
            return None, f"{action}: a reply is still being written or a message waits. Stop them first."
        answered = self._answered()
        if not answered:
            return None, f"There is no reply to {action.lower()} yet."
        last = answered[-1]
        if last.reply is not None and last.reply.running:
            return None, f"{action}: the reply is still being written. Stop it first."
        return last, ""

    def _answered(self) -> list[Exchange]:
        """The exchanges with a reply (one shown or restored): a message Stop cancelled before it
        started, or a cancelled Continue, is passed over."""
        return [e for e in self.views.exchanges if e.reply is not None or e.restored is not None]

    def _chain(self, last: Exchange) -> list[Exchange]:
        """``last`` and, when it is a Continue's, the exchanges it continues, back to the one that
        answered the message."""
        answered = self._answered()
        chain = [last]
        i = answered.index(last)
        while chain[0].continues and i > 0:
            i -= 1
            chain.insert(0, answered[i])
        return chain

    def _take_back(self, last: Exchange) -> list[Exchange]:
        """``last`` and, when it is a Continue's, the exchanges it continues back to the one that
        answered the message (the model sees them as one reply, so they are regenerated or edited as
        one), that reply taken out of the conversation if it was in it."""
        chain = self._chain(last)
        if any(e.kept for e in chain):
            self.conversation.take_back()
        return chain

    def regenerate(self) -> Resend:
        """Send the last message again (the old reply stays, marked; after a Continue, the reply
        and its continuations are marked together). A last message that was never answered (the
        page reloaded while it waited or before its reply wrote anything) is sent in its place."""
        with self._lock:
            tail = self.views.exchanges[-1] if self.views.exchanges else None
            if (tail is not None and not self.queue.busy and tail.reply is None and tail.restored is None
                    and (tail.note or "").startswith(UNANSWERED)):  # (a message Stop cancelled stays cancelled)
                self.views.exchanges.remove(tail)
                ticket, _ = self.queue.note(tail.message)
                return Resend(tail.message, ticket, View(transcript=self.views.feed(*self._queued(ticket),
                                                                                    removed=(tail.id,))))
            last, why = self._last("Regenerate")
            if last is None:
                return Resend(None, None, View(toasts=(("info", why),)))
            chain = self._take_back(last)
            for e in chain:
                e.kept = False
            first = chain[0]
            first.note = REGENERATED_NOTE if (first.reply is not None or first.restored is not None) else first.note
            ticket, _ = self.queue.note(first.message)
            return Resend(first.message, ticket, View(transcript=self.views.feed(*chain, *self._queued(ticket))))

    def edit(self, editing: int | None = None) -> View:
        """Take the last exchange back (after a Continue, the reply and its continuations): off the
        page and out of the conversation, its message into the box.

        The page calls it when an edited message is sent (↑ or Edit put the last message into the
        box, and the exchange stayed until then): ``editing`` is the id of the exchange whose
        message was put there; when it is no longer the last one (Regenerate or another tab
        answered since), nothing is taken back and the toast says the message goes as a new one."""
        with self._lock:
            # a message never answered (Stop cancelled it while it waited; a Continue of the reply
            # before may be below it): not in what the model sees, it just leaves the page
            unanswered = next((e for e in self.views.exchanges if e.id == editing and e.reply is None
                               and e.restored is None and not e.queued), None)
            if unanswered is not None and not self.queue.busy:
                self.views.exchanges.remove(unanswered)
                return View(transcript=self.views.feed(removed=(unanswered.id,)), textbox=unanswered.message)
            last, why = self._last("Edit")
            if editing is not None and self.queue.busy:  # (Regenerate pressed while editing, say)
                why = "A reply is being written or a message waits: your edited message is sent as a new one, after them."
            elif last is not None and editing is not None and self._chain(last)[0].id != editing:
                last, why = None, "The message you were editing is no longer the last one: yours is sent as a new message."
            if last is None:
                return View(toasts=(("info", why),))
            chain = self._take_back(last)
            for e in chain:
                self.views.exchanges.remove(e)
            # a reply regenerated as the one taken back: nothing is "below" it any more
            orphans = [e for e in self.views.exchanges if e.note == REGENERATED_NOTE and e.message == chain[0].message
                       and not any(x.message == e.message for x in self._after(e))]
            for e in orphans:
                e.note = EDITED_NOTE
            return View(transcript=self.views.feed(*orphans, removed=tuple(e.id for e in chain)), textbox=chain[0].message,
                        table=self.views.table(), stats=self.views.stats())  # the stats line: the reply now latest

    def _after(self, exchange: Exchange) -> list[Exchange]:
        """The exchanges shown below ``exchange``."""
        return self.views.exchanges[self.views.exchanges.index(exchange) + 1:]

    def continue_(self) -> Resend:
        """Write on from the end of the last reply (it must be in the conversation)."""
        with self._lock:
            last, why = self._last("Continue")
            if last is not None and not last.kept:
                last, why = None, "Only a reply that is part of the conversation can be continued (not a failed or replaced one)."
            elif last is not None and _ended_by_itself(last):
                last, why = None, ("The reply ended by itself (the model closed its turn): there is nothing to continue. "
                                   "Ask for more in a message (\"go on\", \"more detail\").")
            if last is None:
                return Resend(None, None, View(toasts=(("info", why),)))
            # messages never answered below the reply (Stop cancelled them while they waited) go
            # below its Continue: the continuation is shown right after what it continues
            unanswered = self._after(last)
            ticket, _ = self.queue.note(last.message)
            self._continuing[ticket] = last
            shown = self._queued(ticket)
            for exchange in shown:
                exchange.continues = True
            moved = tuple(self.views.move_to_end(e) for e in unanswered)
            return Resend(last.message, ticket, View(transcript=self.views.feed(*shown, *unanswered, removed=moved)))

    def continuation(self, ticket: int | None) -> Exchange | None:
        """The exchange a reply for ``ticket`` continues (taken: asked once), or None."""
        with self._lock:
            return None if ticket is None else self._continuing.pop(ticket, None)

    def forget(self) -> None:
        """Clear: no Continue waits any more."""
        with self._lock:
            self._continuing.clear()

    def _queued(self, ticket: int) -> tuple[Exchange, ...]:
        """The bubble the queue made for ``ticket`` (shown at once, marked queued)."""
        return tuple(t.exchange for t in self.queue.tickets if t.id == ticket and t.exchange is not None)


def _ended_by_itself(exchange: Exchange) -> bool:
    """Whether the exchange's reply ended at the model's end of turn: no status line (only unusual
    endings get one: stopped, cut at max new tokens, a full context, cut short by a reload, an error),
    or "nothing written" (a Continue of such a reply). Continue writes nothing more on it."""
    status = exchange.reply.renderer.status if exchange.reply is not None else (
        exchange.restored.status if exchange.restored is not None else "stopped")
    return not status or status == NOTHING_WRITTEN
