"""One browser session of the chat: its conversation, its replies, and what the page shows.

The page's handlers (:mod:`specchat.ui.page.wiring`) hold no logic. Everything a session does lives
in :class:`ChatSession`, in plain Python with no gradio import, so the tests drive it directly.
A ChatSession owns its parts: the :class:`~specchat.conversation.Conversation` (what the model
sees, the rules of a turn), :class:`~specchat.ui.session.views.SessionViews` (what the page
shows, rendered from the replies of :mod:`specchat.ui.session.reply`), the queue of messages sent
(:mod:`specchat.ui.session.queue`) and the race (:mod:`specchat.ui.session.race`). This module
holds what changes the conversation: sending (and waiting behind a reply that streams), Stop,
Clear, streaming one reply (wait for the models, stream, finish), opening a trace file.

Handlers turn a :class:`View` (what to change on the page, ``None`` = leave it) into updates. One
ChatSession per browser session, kept by a :class:`SessionStore`, dropped when the tab closes.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from specchat.analysis.ledger import ModelSizes
from specchat.conversation import Conversation, ReplySettings, StreamFn, Turn
from specchat.core.events import PrefillEvent, RoundEvent, TokenEvent
from specchat.service_api import ChatServiceProtocol
from specchat.ui.html.markdown import continuation_lead
from specchat.ui.session.chats import ChatShelf
from specchat.ui.session.last_reply import LastReply
from specchat.ui.session.prefetch import IDLE, Prefetched
from specchat.ui.session.queue import MessageQueue, RunSlot, Ticket
from specchat.ui.session.race import SessionRace
from specchat.ui.session.reply import Exchange, Phase, Reply, Run, is_blank_message
from specchat.ui.session.saved import SAVED_VERSION, parse_saved, restore_state, saved_state
from specchat.ui.session.store import SessionStore
from specchat.ui.session.view import STREAMED_FIELDS, View
from specchat.ui.session.views import CHART_SCOPES, SessionViews

# The reply's text refresh while streaming: 4 Hz, or 2.5 Hz on 4 cores or fewer, where drawing each
# update stalls one of llama.cpp's threads, and so both (docs/BENCHMARKS.md, "The page's speed").
TEXT_INTERVAL_S = 0.25 if (os.cpu_count() or 1) > 4 else 0.4
STATS_INTERVAL_S = 1.0  # the stats line under the chat while streaming (1 Hz; the reader cannot follow faster)
# While a reply streams, the charts, the timeline and the ledger redraw every 3 s, each only while on
# screen (SessionViews.panels_visible), and at the reply's end: redrawing five plotly figures every
# 2 s took the browser from 15 % to 20 % of a core on 2 cores (bench-page), CPU llama.cpp lost.
PLOT_INTERVAL_S = 3.0
KEPT_LIVE_CHATS = 8  # chats set aside in this tab whose replies keep their events (colours, charts) when shown again


def _announces_timing(item: Any) -> bool:  # a round after which the engine times a target-only step: draw nothing
    return isinstance(item, RoundEvent) and item.timing_next


def _drawn(item: Any) -> bool:  # an item a reply's update may be drawn at
    return isinstance(item, PrefillEvent) or (isinstance(item, RoundEvent) and not item.timing_next)


AUTO = "auto"  # the drafter menu's "picked by measurement": the service's start-up pick (ChatSession.resolve_drafter)


class Sent(NamedTuple):
    """What :meth:`ChatSession.note_sent` says of a message sent."""

    ticket: int | None  # its id, for ChatSession.respond (None: a blank message, not queued)
    waits: bool  # it waits behind a reply that streams or another message that waits


class ChatSession:
    """The conversation of one browser session and everything done to it.

    It owns its parts: the :class:`~specchat.conversation.Conversation` (what the model sees),
    the views (:class:`SessionViews`: the exchanges on the page, the selection, the panels), the
    queue of messages sent and not started (:class:`MessageQueue`), the one streaming reply or
    race (:class:`RunSlot`) and the race (:class:`SessionRace`); the saved copy in the browser is
    :mod:`specchat.ui.session.saved`. The page's handlers call the methods below and
    ``views``/``race`` directly.

    Args:
        service: anything with the ChatService interface (``stream_chat``, ``loading``,
            ``startup_error``); shared by all sessions, which it serialises.
        stream: how a reply is streamed; defaults to ``service.stream_chat`` (the app passes
            its ZeroGPU wrapper on Spaces).
        text_interval_s / stats_interval_s / plot_interval_s: how often a streaming reply
            refreshes its text, the stats line under the chat and the figures (seconds); the
            last update is always complete.
        clock: seconds, for the throttling (tests pass a fake).

    Thread safety: ``note_sent``, ``stop`` and ``clear`` may be called from other threads
    while ``respond`` streams (the app runs them without a queue).
    """

    def __init__(
        self,
        service: ChatServiceProtocol,
        *,
        stream: StreamFn | None = None,
        text_interval_s: float = TEXT_INTERVAL_S,
        stats_interval_s: float = STATS_INTERVAL_S,
        plot_interval_s: float = PLOT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.service = service
        # (**more: continue_from, passed only for a Continue)
        self.stream: StreamFn = stream or (lambda history, message, drafter, config, cancel, **more: service.stream_chat(
            history, message, drafter=drafter, config=config, cancel=cancel, prefill_progress=True, **more))
        self.text_interval_s = text_interval_s
        self.stats_interval_s = stats_interval_s
        self.plot_interval_s = plot_interval_s
        self.clock = clock
        self._lock = threading.RLock()
        self.conversation = Conversation(trace=True)  # a fresh seed per reply, recorded in its trace
        self.views = SessionViews(service)
        self.slot = RunSlot(self._lock)
        self.queue = MessageQueue(self._lock, self.slot, self.views.add_exchange)
        self.race = SessionRace(service, stream=self.stream, slot=self.slot, views=self.views,
                                resolve_drafter=self.resolve_drafter, clock=clock)
        self.last = LastReply(self.conversation, self.views, self.queue, self._lock)  # Regenerate, Edit, Continue
        self.shelf = ChatShelf()  # the other chats of this browser (the page's list)
        self.copy_key = secrets.token_urlsafe(12)  # in the browser's copy: which session wrote it (SessionStore.freshest)
        self._set_aside: list[tuple[dict, list[Exchange], int]] = []  # (copy, its exchanges, reply count): _load
        self._settled: tuple[Exchange, float] | None = None  # the last reply that ended, and when
        self._deferred = View()  # what a reply's stream left for the page's panel tick and its end (defer)

    @property
    def history(self) -> list[dict[str, str]]:
        """What the model sees: the kept turns as plain text (the conversation's)."""
        return self.conversation.messages

    @property
    def busy(self) -> bool:
        """True while a reply streams or a message waits."""
        return self.queue.busy

    def resolve_drafter(self, drafter: str) -> str:
        """The drafter a reply runs with: ``drafter`` itself, or for :data:`AUTO` the service's
        start-up pick (``service.picked``, known once the models are loaded; when it made none,
        what the service itself falls back to: ``calibrate.pick`` without a calibration)."""
        if drafter != AUTO:
            return drafter
        if self.service.picked:
            return self.service.picked.drafter
        from specchat.analysis import calibrate

        return calibrate.pick(None, list(self.service.drafter_kinds()), self.service.runtime)

    # -- a reply's stream on the page: the transcript and the stats line at once, the rest later --
    def defer(self, view: View) -> View:
        """Split ``view`` for a page whose reply stream carries only the transcript and the stats
        line: those parts (and the toasts) are returned, to send at once; every other part is kept,
        the latest value of each, until :meth:`take_deferred` (the page's panel tick while the reply
        streams, and once after it ends).

        Why: Gradio rebuilds, on every streamed update, each output component the update leaves
        alone (8.4 ms an update for the 16 outputs of the whole page, 0.7 ms for two, measured
        with Blocks.postprocess_data on this 2-core machine), CPU the model's threads then lack.
        """
        rest = {f.name: getattr(view, f.name) for f in dataclasses.fields(View)
                if f.name not in STREAMED_FIELDS and getattr(view, f.name) is not None}
        if rest:
            with self._lock:
                self._deferred = dataclasses.replace(self._deferred, **rest)
        return View(transcript=view.transcript, stats=view.stats, toasts=view.toasts, streaming=view.streaming)

    def take_deferred(self, only: tuple[str, ...] | None = None) -> View:
        """The parts :meth:`defer` kept since they were last taken (None where none), all of
        them or ``only`` these View fields (the others stay kept)."""
        with self._lock:
            if only is None:
                view, self._deferred = self._deferred, View()
            else:
                taken: dict[str, Any] = {name: getattr(self._deferred, name) for name in only}
                view = View(**taken)
                cleared: dict[str, Any] = dict.fromkeys(only)
                self._deferred = dataclasses.replace(self._deferred, **cleared)
        return view

    # -- sending, Stop, Clear -----------------------------------------------------------------
    def note_sent(self, message: str | None = None) -> Sent:
        """A message was sent (the box emptied): its ticket id and whether it waits; it waits
        behind a reply that streams or another message that waits. It is shown in the chat at
        once, marked "queued" with a cancel button (:meth:`cancel_queued`), carried by the reply
        streaming now (only a reply's stream writes the transcript: a second writer would break
        Gradio's streaming diff). Pass the id to :meth:`respond`. A blank ``message`` is not
        counted (``respond`` refuses it at once, without waiting): its id is None; a None
        ``message`` counts as a message that is not shown."""
        if message is not None and is_blank_message(message):
            return Sent(None, self.queue.busy)
        if message is not None:
            self.shelf.expire_undo()  # an Undo of Clear or Delete offered before this message is withdrawn
        return Sent(*self.queue.note(message))

    def cancel_queued(self, exchange_id: int) -> str:
        """The cancel button of a queued message: it will not be sent (its bubble says so). Returns
        what to tell the user (also when it has started already: then Stop stops it)."""
        if not self.queue.cancel_by_exchange(exchange_id):
            return "That message is no longer waiting (it has started, or was cancelled): Stop stops a reply."
        return ("Cancelled: that message will not be sent. Its text stays in the chat: once nothing streams, ↑ in the "
                "empty box puts your last message back to edit and send.")

    def _carry(self, *shown: Exchange) -> tuple[Exchange, ...]:
        return self.queue.carry(self.views.exchanges, *shown)

    def stop(self) -> str | None:
        """Stop: the streaming reply ends after its current round (or the prefill after its
        current forward pass) and keeps what it wrote; messages waiting behind it are cancelled
        with it (each is shown, marked "not sent"). Returns what to tell the user when messages
        were cancelled, else None."""
        self.race.stopped.set()
        with self._lock:
            self.slot.cancel()
            waiting = self.queue.cancel_waiting("not sent: Stop cancelled it while it waited")
        if not waiting:
            return None
        what = "your queued message was" if waiting == 1 else f"your {waiting} queued messages were"
        return f"Stopped; {what} cancelled and not sent (shown in the chat)."

    def clear(self) -> View:
        """Empty the conversation: a streaming reply stops and is dropped, waiting messages are
        dropped, the charts and the table start over. Undo (:meth:`undo`) brings it back."""
        self.shelf.cleared(self._aside())
        with self._lock:
            self.slot.cancel(discard=True)
            self.queue.discard_all()
            self.last.forget()
            self.conversation.clear()
            self.views.reset()  # the new conversation's replies are #1, #2, …
            self._settled = None
        return self.views.view()

    def close(self) -> None:
        """The tab closed: stop the work and let go of the conversation."""
        with self._lock:
            self.slot.cancel(discard=True)
            self.conversation.clear()
            self.views.reset()

    # -- the copy kept in the browser -----------------------------------------------------------
    def saved(self) -> dict:
        """The conversation as the page keeps it in the browser (:func:`saved_state`), with this
        session's ``key`` (a page reloaded gets what the session held last:
        :meth:`SessionStore.freshest`)."""
        copy = saved_state(self.views, self.conversation)
        return {**copy, "key": self.copy_key} if copy else copy

    def _aside(self) -> dict:
        """This chat's copy as it leaves the screen (another chat shown, Delete, Clear). While the
        tab lives, its replies are kept with it (the last :data:`KEPT_LIVE_CHATS` chats), so when
        the same copy comes back (:meth:`_load`) they show with their colours, charts and
        inspector, not as restored text."""
        copy = self.saved()
        # (not while a reply streams, as Clear allows: the copy keeps it cut short, as the model will see it)
        if copy and not self.busy and any(e.reply is not None for e in self.views.exchanges):
            self._set_aside = [*self._set_aside, (copy, list(self.views.exchanges), self.views.reply_count)][-KEPT_LIVE_CHATS:]
        return copy

    def restore(self, saved: Any) -> View | None:
        """After a reload, the conversation kept in the browser (:func:`restore_state`); None
        (nothing changes) when there is none to restore or this page has one already."""
        with self._lock:
            restored = restore_state(self.views, self.conversation, saved)
        return self.views.view() if restored else None

    # -- several chats (specchat.ui.session.chats) ------------------------------------------------
    def new_chat(self) -> View | None:
        """New chat: this one stays in the list, an empty one is active. None while busy."""
        if self.busy:
            return None
        self.shelf.new(self._aside())
        return self._load({})

    def switch_chat(self, chat_id: str) -> View | None:
        """Make another chat of the list active. None while busy, or for no such chat."""
        if self.busy:
            return None
        copy = self.shelf.switch(chat_id, self._aside())
        return None if copy is None else self._load(copy)

    def delete_chat(self) -> View | None:
        """Delete the active chat (Undo brings it back); the last one used before it is active. None while busy."""
        if self.busy:
            return None
        return self._load(self.shelf.delete(self._aside()))

    def undo(self) -> View | None:
        """Undo the last Delete or Clear. None while busy or with nothing to undo."""
        if self.busy:
            return None
        copy = self.shelf.take_undo(self._aside())
        return None if copy is None else self._load(copy)

    def _load(self, copy: dict) -> View:
        """Show the chat ``copy`` (:func:`saved_state`'s form; {} for an empty chat) as after a
        reload, or, when this tab set it aside (:meth:`_aside`), with its replies as they were."""
        with self._lock:
            self.conversation.clear()
            self.conversation.system_prompt = ""  # the chat's own (its copy's), not the last chat's
            self.views.reset()
            self._settled = None
            restore_state(self.views, self.conversation, copy)
            kept = next((k for k in self._set_aside if k[0] is copy), None)
            if kept is not None:
                self._set_aside.remove(kept)
                self.views.exchanges, self.views.reply_count = list(kept[1]), kept[2]
        return self.views.view()

    # -- a recorded reply ---------------------------------------------------------------------
    def open_trace(self, path: str) -> View:
        """Add a recorded reply (a trace file) to the conversation and select its first token:
        every view shows it as it showed live. Needs no model. It does not enter the history the
        model sees.

        Raises:
            TraceError: a file that is not a specchat trace (the message says why).
        """
        from specchat.analysis.trace import read_trace

        trace = read_trace(path)
        header = trace.header
        with self._lock:
            self.views.reply_count += 1
            number = self.views.reply_count
        message = str(header.get("message") or f"(the prompt of {Path(path).name}: {len(header.get('prompt_ids', []))} tokens)")
        reply = Reply(number, message, ReplySettings.from_trace(header), source=Path(path).name,
                      sizes=ModelSizes.from_json(header.get("model_sizes")))
        for event in trace.events:
            reply.add(event)
        if reply.running:  # a trace cut short (no done line)
            reply.phase = Phase.STOPPED
        self.views.add_exchange(Exchange(message, reply))
        self.views.selected, self.views.selected_round = (number, 0 if reply.rounds.tokens else None), 0
        return self.views.view()

    # -- one reply ------------------------------------------------------------------------------
    def respond(self, message: str, settings: ReplySettings, ticket: int | None = None) -> Iterator[View]:
        """Stream one reply to ``message`` (``ticket``: its id from :meth:`note_sent`): Views,
        throttled, the last one complete.

        A blank message yields a warning and goes back to the box. A message that Stop or Clear
        cancelled while it waited yields no model work. A failure is shown in the reply (the
        exchange stays on the page but out of the history) and the message goes back to the box.

        Raises:
            ValueError: an out-of-range setting (before anything is shown; only an API call can
                send one, the page's controls are bounded).
        """
        if is_blank_message(message):  # not counted by note_sent: refused at once, nothing waits
            yield View(textbox=message or None, toasts=(("warning", "Type a message first."),))
            return
        run = Run()
        taken = self.queue.take(ticket, message, run)
        continues = self.last.continuation(ticket)  # a Continue's ticket: the exchange its reply continues
        if taken is not None and taken.state == "discarded":  # Clear emptied the transcript already
            yield View()
            return
        if taken is not None and taken.state == "cancelled":
            exchange = taken.exchange or self.views.add_exchange(Exchange(message, note=taken.why))
            yield View(transcript=self.views.feed(*self._carry(exchange)))
            return
        try:
            yield from self._respond(message, settings, run, taken.exchange if taken is not None else None, continues)
        finally:
            run.cancel.set()  # also on GeneratorExit (tab closed): the engine stops between rounds
            self.slot.release(run)

    def _respond(self, message: str, settings: ReplySettings, run: Run, exchange: Exchange | None,
                 continues: Exchange | None = None) -> Iterator[View]:
        """A reply in three phases: wait for the models, stream, finish. ``continues``: the
        exchange whose reply this one writes on from (Continue)."""
        # ValueError for an out-of-range setting (or nothing left to continue), before any change
        turn = (self.conversation.begin(message, settings) if continues is None
                else self.conversation.begin_continuation(settings))
        prefix = turn.continue_from
        self.views.reply_count += 1
        reply = Reply(self.views.reply_count, message, settings, config=turn.config, target=self.service.target_name)
        self.views.follow(reply.number)
        if exchange is None or exchange not in self.views.exchanges:
            exchange = self.views.add_exchange(Exchange(message, reply))
        else:  # the bubble shown since it was sent, marked queued: its reply starts
            exchange.reply, exchange.queued, exchange.note = reply, False, None
        exchange.prefix = prefix
        if prefix:  # a Continue reads as the reply it writes on (code goes on as code, a list keeps its numbers)
            reply.renderer.continue_inside(continuation_lead(prefix))
        # the reply before, if it ended a moment ago: its last update and this one's first may reach
        # the browser together (a message that waited), and the transcript must not miss its end;
        # not once it has left the chat (Edit or Regenerate took it back: it would be drawn again)
        settled = self._settled if self._settled and self._settled[0] in self.views.exchanges else None
        before = (settled[0],) if settled and self.clock() - settled[1] < 5.0 else ()
        if self.service.loading:
            reply.phase = Phase.WAITING
            yield View(transcript=self.views.feed(*self._carry(*before, exchange)), stats=self.views.stats())
            ready = yield from self._wait_for_models(run, exchange, message)
            if not ready:
                return
        drafter = self.resolve_drafter(settings.drafter)
        if drafter != settings.drafter:  # "auto": the reply runs with the pick, and its label says which
            turn.settings = settings = dataclasses.replace(settings, drafter=drafter)
            reply.settings, reply.drafter = settings, drafter
        reply.phase = Phase.RUNNING
        yield View(transcript=self.views.feed(*self._carry(*before, exchange)), stats=self.views.stats(),
                   table=self.views.table())
        try:
            yield from self._stream_reply(turn, reply, run, exchange)
        except Exception as exc:  # SpecchatError, ValueError, a failing model: show it, keep the text
            reply.fail(str(exc) or type(exc).__name__)
            turn.fail()
            yield View(transcript=self.views.feed(*self._carry(exchange)), stats=self.views.stats(),
                       table=self.views.table(), figures=self.views.figures(),
                       textbox=message, toasts=(("warning", f"Generation failed: {exc}"),))
            return
        finally:
            if reply.running:  # closed mid-stream (a closed tab): what it wrote is kept
                reply.phase = Phase.STOPPED
            # a failed reply, or one stopped before it wrote anything (in a long prefill), is shown
            # but not kept in what the model sees (the conversation's rule; Clear drops it too)
            exchange.kept = self.conversation.finish(turn)
            if continues is not None and exchange.kept:  # the continued reply lives on in this one
                continues.kept = False
            if not run.discard:
                self._settled = (exchange, self.clock())
        yield from self._finish_reply(run, exchange)

    def _wait_for_models(self, run: Run, exchange: Exchange, message: str) -> Generator[View, None, bool]:
        """While the models load in the background: wait, visibly (messages sent meanwhile are
        shown). Returns (as the generator's value) whether they loaded; if not (a failure, Stop,
        Clear), the exchange is taken back and the message goes back to the box."""
        while self.service.loading and not run.cancel.is_set():
            time.sleep(0.5)
            carried = self._carry()  # messages sent meanwhile
            yield View(transcript=self.views.feed(*carried)) if carried else View()
        error = self.service.startup_error
        if error is None and not run.cancel.is_set():
            return True
        self.views.exchanges.remove(exchange)
        self.views.reply_count -= 1
        if run.discard:
            yield View()
            return False
        toasts = (("warning", f"The models could not be loaded: {error}"),) if error else ()
        yield View(transcript=self.views.feed(removed=(exchange.id,)), textbox=message, toasts=toasts)
        return False

    def _stream_reply(self, turn: Turn, reply: Reply, run: Run, exchange: Exchange) -> Iterator[View]:
        """Stream the engine's events into ``reply`` (and ``turn``), yielding throttled Views.

        The engine computes on while an update is on its way (:class:`Prefetched`; this thread sleeps
        through tokens and until the next draw is due); a timing round waits until nothing is drawn."""
        last_stats = last_plot = self.clock()
        last_text = float("-inf")  # drawn at once until the reply shows text: the first tokens are not held back

        def start() -> Iterator[Any]:
            more = {} if turn.continue_from is None else {"continue_from": turn.continue_from}
            return self.stream(turn.history, turn.message, turn.settings.drafter, turn.config, run.cancel, **more)

        stream = Prefetched(start, run.cancel, pause_after=_announces_timing, wakes=lambda item: not isinstance(item, TokenEvent))
        quiet_until = None  # time.monotonic() of the next draw due (None: the first is drawn at once)
        try:
            holding = False  # the last item announced a timing round: draw nothing until the next item
            while True:
                try:
                    item = stream.next_or_idle(max(self.text_interval_s, 0.05), quiet_until=quiet_until)
                except StopIteration:
                    break
                if item is IDLE:  # no round ended meanwhile (a long round, a prefill pass): show messages sent since
                    if self.queue.dirty and not holding and not run.discard:
                        yield View(transcript=self.views.feed(*self._carry()), streaming=True)
                    continue
                holding = _announces_timing(item)
                toast = reply.add(item)
                turn.add(item)
                if reply.sizes is None and isinstance(item, RoundEvent):  # the drafter is loaded by now
                    reply.sizes = self.views.model_sizes(reply.drafter)
                if run.discard:  # Clear: the engine stops at the round's end (cancel is set); show nothing more
                    continue
                now = self.clock()
                # redraw at a round's end (never between a round's tokens and its RoundEvent,
                # so the counts agree), at most every text_interval_s, or to show a toast; never
                # just before a timing round, whose target-only step the browser's drawing on
                # the same CPU would slow (t₁ would read high and every speedup with it)
                # (a long prefill's progress too; with an interval, a later round already queued is drawn instead)
                drawable = _drawn(item) and (isinstance(item, RoundEvent) or reply.prefill is not None)
                later = self.text_interval_s > 0 and stream.queued(_drawn)
                if toast is None and (not drawable or now - last_text < self.text_interval_s or later):
                    continue
                panels = {}
                if (self.views.panels_visible and now - last_plot >= self.plot_interval_s
                        and self.views.focus() is reply):
                    last_plot = now
                    panels = self.views.panel_views(self.views.panels_visible, live=True)
                # each round drawn at once until the reply shows text (a code block's fence alone does not);
                # asked only until then: it parses the reply's Markdown, as the feed below does again
                if quiet_until is not None or reply.renderer.shows_text:
                    last_text, quiet_until = now, time.monotonic() + self.text_interval_s
                stats = None
                if now - last_stats >= self.stats_interval_s:
                    stats, last_stats = self.views.stats(), now
                yield View(transcript=self.views.feed(*self._carry(exchange)), stats=stats,
                           toasts=(toast,) if toast else (), streaming=True, **panels)
        finally:
            stream.close()

    def _finish_reply(self, run: Run, exchange: Exchange) -> Iterator[View]:
        """The reply's end at once, then the panels on screen (the charts take the browser a moment
        to draw); those off screen are drawn when they come on screen (``views.show_panels``).
        After Clear: the empty chat (Gradio re-sends a stream's last update)."""
        if run.discard:
            yield self.views.view()
            return
        yield View(transcript=self.views.feed(*self._carry(exchange)), stats=self.views.stats())
        yield self.views.view(transcript=self.views.feed(*self._carry(exchange)), panels=self.views.panels_visible)


__all__ = ["CHART_SCOPES", "Sent", "Ticket", "SAVED_VERSION", "ChatSession", "Exchange", "Phase", "Reply",
           "ReplySettings", "SessionStore", "View", "parse_saved"]
