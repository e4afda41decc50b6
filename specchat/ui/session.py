"""One browser session of the chat: its conversation, its replies, and what the page shows.

The page's handlers (:mod:`specchat.ui.wiring`) hold no logic. Everything a session does lives
in :class:`ChatSession`, in plain Python with no gradio import, so the tests drive it directly.
This module holds the conversation's state and what changes it: sending (and waiting behind a
reply that streams), Stop, Clear, streaming one reply, opening a trace file. What the page
shows of it is :class:`~specchat.ui.session_views.SessionViews` (rendered from the replies,
:mod:`specchat.ui.reply`), the race :class:`~specchat.ui.session_race.SessionRace`; both are
base classes of ChatSession.

Handlers get a :class:`View` (what to change on the page, ``None`` = leave it) and turn it into
``{component: value}`` updates. One :class:`ChatSession` per browser session, kept by a
:class:`SessionStore` and dropped when the tab closes.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specchat.analysis.ledger import ModelSizes
from specchat.core.events import PrefillEvent, RoundEvent
from specchat.ui.prefetch import IDLE, Prefetched
from specchat.ui.race import RaceLane
from specchat.ui.reply import Exchange, Phase, Reply, ReplySettings, Run, is_blank_message
from specchat.ui.session_race import SessionRace
from specchat.ui.session_saved import SAVED_VERSION, SessionSaved, parse_saved
from specchat.ui.session_views import CHART_SCOPES, SessionViews
from specchat.ui.view import STREAMED_FIELDS, View

TEXT_INTERVAL_S = 0.25  # the reply's text refresh while streaming (4 Hz)
STATS_INTERVAL_S = 1.0  # the stats line under the chat while streaming (1 Hz; the reader cannot follow faster)
# While a reply streams, the charts, the timeline and the ledger redraw every 3 s, each only while
# it is on screen (the page says so: ChatSession.panels_visible); the last update of a reply
# always redraws them. The browser draws on the same CPU as the models: redrawing five
# plotly figures every 2 s took the browser from 15 % to 20 % of a core on a 2-core machine
# (specchat bench-page), CPU that llama.cpp's two threads then did not get.
PLOT_INTERVAL_S = 3.0

StreamFn = Callable[..., Iterator[Any]]
AUTO = "auto"  # the drafter menu's "picked by measurement": the service's start-up pick (ChatSession.resolve_drafter)


@dataclasses.dataclass
class Ticket:
    """A message sent and not started yet (:meth:`ChatSession.note_sent`).

    Attributes:
        message: its text (None: noted without it, nothing shown).
        exchange: its bubble, shown from the moment it was sent (marked queued while it waits).
        state: ``"waiting"``, ``"cancelled"`` (Stop, or its own cancel button) or ``"discarded"`` (Clear).
        why: what its bubble says once cancelled.
    """

    message: str | None
    exchange: Exchange | None = None
    state: str = "waiting"
    why: str = ""


class ChatSession(SessionViews, SessionRace, SessionSaved):
    """The conversation of one browser session and everything done to it.

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
        service: Any,
        *,
        stream: StreamFn | None = None,
        text_interval_s: float = TEXT_INTERVAL_S,
        stats_interval_s: float = STATS_INTERVAL_S,
        plot_interval_s: float = PLOT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.service = service
        self._stream = stream or (lambda history, message, drafter, config, cancel: service.stream_chat(
            history, message, drafter=drafter, config=config, cancel=cancel, prefill_progress=True))
        self.text_interval_s = text_interval_s
        self.stats_interval_s = stats_interval_s
        self.plot_interval_s = plot_interval_s
        self.clock = clock
        self.history: list[dict[str, str]] = []  # plain-text turns: what the model sees
        self.exchanges: list[Exchange] = []  # what the chat shows
        self.chart_scope = CHART_SCOPES[0]
        self._lock = threading.Lock()
        self._run: Run | None = None
        self._tickets: deque[Ticket] = deque()  # messages sent, not started yet, in the order sent
        self._dirty: dict[int, Exchange] = {}  # exchanges changed outside a reply's stream, for it to carry
        self._reply_count = 0
        self.selected: tuple[int, int | None] | None = None  # (reply number, token index) in the inspector
        self.selected_round: int | None = None
        self.pinned = False  # the clicked reply keeps the focus while new replies stream
        self.race_lanes: tuple[RaceLane, RaceLane] | None = None
        self.race_greedy = True
        self._trace_dir: str | None = None
        self._race_stop = threading.Event()  # Stop during a race's replay
        self._feed_seq = itertools.count(1)
        self._exchange_ids = itertools.count(1)
        self._settled: tuple[Exchange, float] | None = None  # the last reply that ended, and when
        self.panels_visible: set[str] = set()  # live panels on screen: "charts", "timeline", "ledger" (the page says)
        self._stale: set[str] = set()
        self._deferred = View()  # what a reply's stream left for the page's panel tick and its end (defer)
        self.system_prompt = ""  # the latest reply's system prompt (kept with the conversation in the browser)

    @property
    def busy(self) -> bool:
        """True while a reply streams or a message waits."""
        return self._run is not None or bool(self._tickets)

    def resolve_drafter(self, drafter: str) -> str:
        """The drafter a reply runs with: ``drafter`` itself, or for :data:`AUTO` the service's
        start-up pick (``service.picked``, known once the models are loaded; when it made none,
        what the service itself falls back to: ``calibrate.pick`` without a calibration)."""
        if drafter != AUTO:
            return drafter
        picked = getattr(self.service, "picked", None)
        if picked:
            return picked[0]
        from specchat.analysis import calibrate

        kinds = list(self.service.drafter_kinds()) if hasattr(self.service, "drafter_kinds") else []
        return calibrate.pick(None, kinds, getattr(self.service, "runtime", "transformers"))

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
        return View(transcript=view.transcript, stats=view.stats, toasts=view.toasts)

    def take_deferred(self, only: tuple[str, ...] | None = None) -> View:
        """The parts :meth:`defer` kept since they were last taken (None where none), all of
        them or ``only`` these View fields (the others stay kept)."""
        with self._lock:
            if only is None:
                view, self._deferred = self._deferred, View()
            else:
                taken = {name: getattr(self._deferred, name) for name in only}
                view = View(**taken)
                self._deferred = dataclasses.replace(self._deferred, **dict.fromkeys(only))
        return view

    # -- sending, Stop, Clear -----------------------------------------------------------------
    def note_sent(self, message: str | None = None) -> bool:
        """A message was sent (the box emptied); True when it waits behind a reply that streams
        or another message that waits. It is shown in the chat at once, marked "queued" with a
        cancel button (:meth:`cancel_queued`), carried by the reply streaming now (only a reply's
        stream writes the transcript: a second writer would break Gradio's streaming diff). A
        blank ``message`` is not counted (``respond`` refuses it at once, without waiting); None
        counts as a message that is not shown."""
        with self._lock:
            busy = self._run is not None or bool(self._tickets)
            if message is not None and is_blank_message(message):
                return busy
            ticket = Ticket(message)
            if message is not None:  # its place in the chat, from now on: sent order is shown order
                ticket.exchange = self.add_exchange(Exchange(message, queued=True))
                if busy:
                    self._dirty[ticket.exchange.id] = ticket.exchange
            self._tickets.append(ticket)
        return busy

    def cancel_queued(self, exchange_id: int) -> str:
        """The cancel button of a queued message: it will not be sent (its bubble says so). Returns
        what to tell the user (also when it has started already: then Stop stops it)."""
        with self._lock:
            ticket = next((t for t in self._tickets if t.exchange is not None and t.exchange.id == exchange_id), None)
            if ticket is None:
                return "That message is no longer waiting (it has started, or was cancelled): Stop stops a reply."
            if ticket.state == "waiting":
                self._cancel(ticket, "not sent: you cancelled it while it waited")
        return "Cancelled: that message will not be sent."

    def _cancel(self, ticket: Ticket, why: str) -> None:
        """Mark a waiting message cancelled (under the lock); its bubble says ``why``."""
        ticket.state, ticket.why = "cancelled", why
        if ticket.exchange is not None:
            ticket.exchange.queued, ticket.exchange.note = False, why
            self._dirty[ticket.exchange.id] = ticket.exchange

    def _carry(self, *shown: Exchange) -> tuple[Exchange, ...]:
        """``shown`` and the exchanges changed outside any stream since (queued, cancelled), for
        the feed of the update being sent."""
        with self._lock:
            dirty, self._dirty = self._dirty, {}
        ids = {e.id for e in shown}
        return (*shown, *(e for i, e in dirty.items() if i not in ids and e in self.exchanges))

    def stop(self) -> str | None:
        """Stop: the streaming reply ends after its current round (or the prefill after its
        current forward pass) and keeps what it wrote; messages waiting behind it are cancelled
        with it (each is shown, marked "not sent"). Returns what to tell the user when messages
        were cancelled, else None."""
        self._race_stop.set()
        with self._lock:
            if self._run is not None:
                self._run.cancel.set()
            waiting = [t for t in self._tickets if t.state == "waiting"]
            for ticket in waiting:
                self._cancel(ticket, "not sent: Stop cancelled it while it waited")
        if not waiting:
            return None
        what = "your queued message was" if len(waiting) == 1 else f"your {len(waiting)} queued messages were"
        return f"Stopped; {what} cancelled and not sent (shown in the chat)."

    def clear(self) -> View:
        """Empty the conversation: a streaming reply stops and is dropped, waiting messages are
        dropped, the charts and the table start over."""
        with self._lock:
            if self._run is not None:
                self._run.discard = True
                self._run.cancel.set()
            # every waiting message is dropped, those Stop already cancelled too (they would
            # otherwise show up on the new chat, marked "not sent")
            for ticket in self._tickets:
                ticket.state = "discarded"
            self._dirty = {}
            self.history, self.exchanges = [], []
            self._reply_count = 0  # the new conversation's replies are #1, #2, …
            self.selected = self.selected_round = None
            self._settled = None
        return self.view()

    def close(self) -> None:
        """The tab closed: stop the work and let go of the conversation."""
        with self._lock:
            if self._run is not None:
                self._run.discard = True
                self._run.cancel.set()
            self.history, self.exchanges = [], []
            self._reply_count = 0

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
            self._reply_count += 1
            number = self._reply_count
        message = str(header.get("message") or f"(the prompt of {Path(path).name}: {len(header.get('prompt_ids', []))} tokens)")
        reply = Reply(number, message, ReplySettings.from_trace(header), source=Path(path).name,
                      sizes=ModelSizes.from_json(header.get("model_sizes")))
        for event in trace.events:
            reply.add(event)
        if reply.running:  # a trace cut short (no done line)
            reply.phase = Phase.STOPPED
        self.add_exchange(Exchange(message, reply))
        self.selected, self.selected_round = (number, 0 if reply.rounds.tokens else None), 0
        return self.view()

    # -- one reply ------------------------------------------------------------------------------
    def respond(self, message: str, settings: ReplySettings) -> Iterator[View]:
        """Stream one reply to ``message``: Views, throttled, the last one complete.

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
        with self._lock:
            ticket = self._take_ticket(message)
            if ticket is None or ticket.state == "waiting":
                self._run = run
        if ticket is not None and ticket.state == "discarded":  # Clear emptied the transcript already
            yield View()
            return
        if ticket is not None and ticket.state == "cancelled":
            exchange = ticket.exchange or self.add_exchange(Exchange(message, note=ticket.why))
            yield View(transcript=self.feed(*self._carry(exchange)))
            return
        try:
            yield from self._respond(message, settings, run, ticket.exchange if ticket is not None else None)
        finally:
            run.cancel.set()  # also on GeneratorExit (tab closed): the engine stops between rounds
            with self._lock:
                if self._run is run:
                    self._run = None

    def _take_ticket(self, message: str) -> Ticket | None:
        """The waiting message ``respond`` was called for (under the lock): the first sent with
        this text, else the first sent without one (``note_sent()``); None for a message that
        was never noted (an API call)."""
        ticket = next((t for t in self._tickets if t.message == message), None)
        ticket = ticket or next((t for t in self._tickets if t.message is None), None)
        if ticket is not None:
            self._tickets.remove(ticket)
        return ticket

    def _respond(self, message: str, settings: ReplySettings, run: Run, exchange: Exchange | None) -> Iterator[View]:
        config = settings.config()  # ValueError for an out-of-range setting, before any change
        self._reply_count += 1
        reply = Reply(self._reply_count, message, settings, config=config)
        if self.selected is not None and self.selected[0] != reply.number and not self.pinned:
            self.selected = self.selected_round = None  # the views follow the new reply (unless pinned)
        history = list(self.history)
        if exchange is None or exchange not in self.exchanges:
            exchange = self.add_exchange(Exchange(message, reply))
        else:  # the bubble shown since it was sent, marked queued: its reply starts
            exchange.reply, exchange.queued, exchange.note = reply, False, None
        # the reply before, if it ended a moment ago: its last update and this one's first may reach
        # the browser together (a message that waited), and the transcript must not miss its end
        before = (self._settled[0],) if self._settled and self.clock() - self._settled[1] < 5.0 else ()

        if getattr(self.service, "loading", False):  # still loading in the background: wait, visibly
            reply.phase = Phase.WAITING
            yield View(transcript=self.feed(*self._carry(*before, exchange)), stats=self.stats())
            while getattr(self.service, "loading", False) and not run.cancel.is_set():
                time.sleep(0.5)
                carried = self._carry()  # messages sent meanwhile
                yield View(transcript=self.feed(*carried)) if carried else View()
            error = getattr(self.service, "startup_error", None)
            if error is not None or run.cancel.is_set():
                self.exchanges.remove(exchange)
                self._reply_count -= 1
                if run.discard:
                    yield View()
                    return
                toasts = (("warning", f"The models could not be loaded: {error}"),) if error else ()
                # the message goes back to the box
                yield View(transcript=self.feed(removed=(exchange.id,)), textbox=message, toasts=toasts)
                return
        drafter = self.resolve_drafter(settings.drafter)
        if drafter != settings.drafter:  # "auto": the reply runs with the pick, and its label says which
            settings = dataclasses.replace(settings, drafter=drafter)
            reply.settings, reply.drafter = settings, drafter
        reply.phase = Phase.RUNNING
        yield View(transcript=self.feed(*self._carry(*before, exchange)), stats=self.stats(), table=self.table())

        stream = None
        last_stats = last_plot = self.clock()
        last_text = float("-inf")  # the first round is drawn at once: the first tokens are not held back
        try:
            # the engine computes the next round while the page's last update is on its way
            # (a timing round waits until nothing of this reply is being drawn)
            self.system_prompt = settings.system_prompt
            system = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt.strip() else []
            stream = Prefetched(lambda: self._stream(system + history, message, settings.drafter, config, run.cancel),
                                run.cancel, pause_after=lambda item: isinstance(item, RoundEvent) and item.timing_next)
            holding = False  # the last item announced a timing round: draw nothing until the next item
            while True:
                try:
                    item = stream.next_or_idle(max(self.text_interval_s, 0.05))
                except StopIteration:
                    break
                if item is IDLE:  # no round ended meanwhile (a long round, a prefill pass): show messages sent since
                    if self._dirty and not holding and not run.discard:
                        yield View(transcript=self.feed(*self._carry()))
                    continue
                holding = isinstance(item, RoundEvent) and item.timing_next
                toast = reply.add(item)
                if reply.sizes is None and isinstance(item, RoundEvent):  # the drafter is loaded by now
                    reply.sizes = self._model_sizes(reply.drafter)
                if run.discard:  # Clear: the engine stops at the round's end (cancel is set); show nothing more
                    continue
                now = self.clock()
                # redraw at a round's end (never between a round's tokens and its RoundEvent,
                # so the counts agree), at most every text_interval_s, or to show a toast; never
                # just before a timing round, whose target-only step the browser's drawing on
                # the same CPU would slow (t₁ would read high and every speedup with it)
                drawable = (isinstance(item, RoundEvent) and not item.timing_next) or (
                    isinstance(item, PrefillEvent) and reply.prefill is not None)  # a long prefill's progress
                if toast is None and (not drawable or now - last_text < self.text_interval_s):
                    continue
                panels = {}
                if self.panels_visible and now - last_plot >= self.plot_interval_s and self._focus() is reply:
                    last_plot = now
                    panels = self._panel_views(self.panels_visible, live=True)
                last_text = now
                stats = None
                if now - last_stats >= self.stats_interval_s:
                    stats, last_stats = self.stats(), now
                yield View(transcript=self.feed(*self._carry(exchange)), stats=stats, toasts=(toast,) if toast else (),
                           **panels)
        except Exception as exc:  # SpecchatError, ValueError, a failing model: show it, keep the text
            reply.fail(str(exc) or type(exc).__name__)
            yield View(transcript=self.feed(*self._carry(exchange)), stats=self.stats(), table=self.table(),
                       figures=self.figures(),
                       textbox=message, toasts=(("warning", f"Generation failed: {exc}"),))
            return
        finally:
            if hasattr(stream, "close"):
                stream.close()
            if reply.running:  # closed mid-stream (a closed tab): what it wrote is kept
                reply.phase = Phase.STOPPED
            # a failed reply, or one stopped before it wrote anything (in a long prefill), is shown
            # but not kept in what the model sees
            answered = reply.phase is not Phase.FAILED and (reply.phase is not Phase.STOPPED or reply.metrics.num_committed)
            if answered and not run.discard:
                self.history = history + [
                    {"role": "user", "content": message},
                    {"role": "assistant", "content": reply.renderer.text},
                ]
            if not run.discard:
                self._settled = (exchange, self.clock())
        if run.discard:  # Clear: end on the empty chat (Gradio re-sends a stream's last update)
            yield self.view()
            return
        # the reply's end at once, then the panels on screen (the charts take the browser a moment
        # to draw); those off screen are drawn when they come on screen (show_panels)
        yield View(transcript=self.feed(*self._carry(exchange)), stats=self.stats())
        yield self.view(transcript=self.feed(*self._carry(exchange)), panels=self.panels_visible)


class SessionStore:
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


__all__ = [
    "CHART_SCOPES",
    "SAVED_VERSION",
    "ChatSession",
    "Exchange",
    "Phase",
    "Reply",
    "ReplySettings",
    "SessionStore",
    "View",
    "parse_saved",
]
