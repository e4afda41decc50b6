"""One browser session of the chat: its conversation, its replies, and what the page shows.

``app.py`` holds the layout and the wiring only. Everything a session does lives here, in
plain Python with no gradio import, so the tests drive it directly: sending (and waiting behind
a reply that streams), Stop, Clear, each reply's events and statistics, the per-reply table,
and which charts to draw. A reply is data before it is HTML: its events are kept server-side
and every view (the colored text, the stats line, the charts, the table) is rendered from them.

Handlers get a :class:`View` (what to change on the page, ``None`` = leave it) and turn it into
``{component: value}`` updates. One :class:`ChatSession` per browser session, kept by a
:class:`SessionStore` and dropped when the tab closes.
"""

from __future__ import annotations

import dataclasses
import enum
import html
import random
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.analysis.ledger import Ledger, ModelSizes, count_ledger
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, DrafterFailedEvent, Event, RoundEvent, StopReason, TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds
from specchat.ui import charts
from specchat.ui.inspector import RaceLane, ReplyRounds, inspector_html, race_html, race_verdict, timeline_html
from specchat.ui.ledger_view import drafter_points, ledger_html
from specchat.ui.render import (
    ReplyRenderer,
    exchange_note_html,
    render_user,
    reply_html,
    stats_html,
    status_html,
    table_html,
)

TEXT_INTERVAL_S = 0.25  # chat + stats refresh while streaming (4 Hz)
# figure refresh while streaming (every 2 s; the final update is always full). The browser
# redraws four plotly figures on the same CPU as the models: on a 2-core machine at 1 Hz that
# drawing slowed the speculative rounds measurably.
PLOT_INTERVAL_S = 2.0

CHART_SCOPES = ("this reply", "whole conversation")


class Phase(str, enum.Enum):
    """Where a reply is."""

    WAITING = "waiting"  # the models are still loading
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"  # Stop (or a closed tab) ended it; the partial reply is kept
    FAILED = "failed"  # an error ended it; the exchange is shown but not kept in the history


@dataclass(frozen=True)
class ReplySettings:
    """The settings a reply is made with, captured when it starts (so a control changed while
    it streams never relabels it).

    Raises:
        ValueError: from :meth:`config`, for an out-of-range setting (the message gives the range).
    """

    drafter: str
    num_speculative_tokens: int
    adaptive_gamma: bool
    temperature: float
    top_p: float
    max_new_tokens: int

    def config(self, seed: int | None = None) -> GenerationConfig:
        """The engine's settings; speedups are always measured in the reply (timing rounds),
        every round is traced (the inspector, the timeline, the trace file), and the seed is
        drawn here so that the trace file records it."""
        return GenerationConfig(
            num_speculative_tokens=int(self.num_speculative_tokens),
            adaptive_gamma=bool(self.adaptive_gamma),
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            max_new_tokens=int(self.max_new_tokens),
            seed=random.randrange(2**63) if seed is None else seed,
            measure_speedup=True,
            trace=True,
        )

    @classmethod
    def from_trace(cls, header: dict) -> ReplySettings:
        """The settings recorded in a trace file's header (missing ones get the defaults)."""
        c = header.get("config") or {}
        return cls(
            drafter=str(header.get("drafter", "?")),
            num_speculative_tokens=int(c.get("num_speculative_tokens", 4)),
            adaptive_gamma=bool(c.get("adaptive_gamma", False)),
            temperature=float(c.get("temperature", 0.0)),
            top_p=float(c.get("top_p", 1.0)),
            max_new_tokens=int(c.get("max_new_tokens", 256)),
        )

    def gamma_label(self, drafter: str) -> str:
        """``γ adaptive ≤ 12``, ``γ = 4``, or ``γ —`` for target-only decoding."""
        if drafter_kinds.DRAFTER_KINDS.get(drafter) is not None and drafter_kinds.get(drafter).source == "none":
            return "γ —"
        if self.adaptive_gamma:
            return f"γ adaptive ≤ {self.num_speculative_tokens}"
        return f"γ = {self.num_speculative_tokens}"

    def sampling_label(self) -> str:
        """``T 0 (greedy) · top-p 1``."""
        temperature = "T 0 (greedy)" if self.temperature == 0 else f"T {self.temperature:g}"
        return f"{temperature} · top-p {self.top_p:g}"


@dataclass
class Reply:
    """One reply: the settings it was made with, its events, statistics and rendering.

    Attributes:
        number: 1-based, in this conversation.
        message: the user's message it answers.
        settings: captured when it started.
        drafter: the drafter that made it; differs from ``settings.drafter`` when that one could
            not be used (``fallback`` says why).
        events: every engine event and notice, in order (kept for the views that replay a reply).
    """

    number: int
    message: str
    settings: ReplySettings
    drafter: str = ""
    fallback: str | None = None
    metrics: SpeculationMetrics = field(default_factory=SpeculationMetrics)
    renderer: ReplyRenderer = field(default_factory=ReplyRenderer)
    events: list[Any] = field(default_factory=list)
    phase: Phase = Phase.RUNNING
    rounds: ReplyRounds = field(default_factory=ReplyRounds)
    source: str | None = None  # the trace file it was read from (a replay)
    config: GenerationConfig | None = None
    trace_path: str | None = None  # its trace file, once written (a finished reply never changes)
    sizes: ModelSizes | None = None  # the target's and the drafter's sizes (ĉ, bytes read)

    def __post_init__(self) -> None:
        self.drafter = self.drafter or self.settings.drafter
        self.renderer.key = self.number

    @property
    def label(self) -> str:
        """What made it: ``#3 · sibling-int4 · γ adaptive ≤ 12 · T 0 (greedy) · top-p 1``."""
        drafter = self.drafter + (f" ({self.fallback})" if self.fallback else "")
        label = f"#{self.number} · {drafter} · {self.settings.gamma_label(self.drafter)} · {self.settings.sampling_label()}"
        return label + (f" · replayed from {self.source}" if self.source else "")

    def add(self, item: Event | Any) -> tuple[str, str] | None:
        """Fold in one item of the stream; return a toast ``(level, text)`` for the user, or None."""
        self.events.append(item)
        if isinstance(item, TokenEvent):
            self.metrics.update(item)
            self.renderer.add_token(item)
            self.rounds.add(item)
        elif isinstance(item, RoundEvent):
            self.metrics.update(item)
            self.renderer.add_round(item)
            self.rounds.add(item)
        elif isinstance(item, DoneEvent):
            self.metrics.update(item)
            self.renderer.finish(item)
            self.rounds.add(item)
            self.phase = Phase.STOPPED if item.stop_reason is StopReason.CANCELLED else Phase.DONE
        else:  # a Notice or a DrafterFailedEvent: shown in the bubble and as a toast
            text = str(getattr(item, "text", item))
            self.renderer.add_notice(text)
            if isinstance(item, DrafterFailedEvent):
                self.fallback = f"failed in round {item.round_index}, then target only"
                return "warning", text
            if getattr(item, "fallback_drafter", None):
                self.drafter, self.fallback = "none", f"{item.fallback_drafter} could not be loaded"
            return ("warning" if getattr(item, "warning", False) else "info"), text
        return None

    def fail(self, message: str) -> None:
        self.renderer.set_error(message)
        self.phase = Phase.FAILED

    @property
    def running(self) -> bool:
        return self.phase in (Phase.WAITING, Phase.RUNNING)

    def html(self, *, show_rejected: bool = False) -> str:
        """The reply's chat bubble: label, colored tokens and notices, and its own summary
        (with ``show_rejected``, the drafts its rounds threw away, struck through)."""
        if self.phase is Phase.WAITING:
            body = status_html("waiting for the models to finish loading…")
        else:
            body = self.renderer.html(show_rejected=show_rejected)
        return reply_html(self.label, body, self.metrics, running=self.running)

    def ledger(self) -> Ledger:
        """What this reply's decoding spent and saved (:func:`specchat.analysis.ledger.count_ledger`)."""
        done = self.metrics.done
        return count_ledger(self.metrics.rounds, sizes=self.sizes, alpha=self.metrics.acceptance_rate,
                            prefill_ms=None if done is None else done.prefill_ms,
                            num_prefilled=None if done is None else done.num_prefilled,
                            num_prompt_tokens=None if done is None else done.num_prompt_tokens)

    def ledger_html(self) -> str:
        return ledger_html(self.ledger(), self.metrics, title=f"Reply #{self.number} · {self.label.split(' · ', 1)[1]}",
                           drafter=self.drafter, running=self.running)

    def trace_lines(self, target: str) -> list[dict]:
        """The reply's trace file, as records (:func:`specchat.analysis.trace.trace_records`).

        Raises:
            ValueError: the reply has no finished, traced rounds.
        """
        from specchat.analysis.trace import trace_records

        done = self.rounds.done
        if done is None or not self.rounds.traced:
            raise ValueError(f"reply #{self.number} has no trace to save (it has not finished, or was not traced)")
        config = self.config or self.settings.config()
        extra = {} if self.sizes is None else {"model_sizes": self.sizes.to_json()}
        return list(trace_records(self.events, target=target, drafter=self.drafter, config=config,
                                  prompt_ids=done.prompt_ids, message=self.message, **extra))

    def row(self) -> dict[str, Any]:
        """One row of the conversation table."""
        m = self.metrics
        return {
            "reply": self.number,
            "drafter": self.drafter + (" *" if self.fallback else ""),
            "gamma": self.settings.gamma_label(self.drafter).removeprefix("γ ").strip(),
            "sampling": self.settings.sampling_label(),
            "tokens": m.num_committed,
            "alpha": m.acceptance_rate,
            "tokens_per_round": m.mean_tokens_per_round,
            "speedup": m.measured_speedup,
            "speedup_predicted": m.predicted_speedup,
            "state": self.phase.value,
        }


@dataclass
class Exchange:
    """One user message and what came of it: a reply, or a note (not sent)."""

    message: str
    reply: Reply | None = None
    note: str | None = None


@dataclass
class View:
    """What to change on the page; None leaves a part as it is.

    Attributes:
        chat: the Chatbot's messages (``[{"role", "content"}]``, content is HTML).
        stats: the stats line (HTML) of the latest reply.
        table: the conversation table (HTML).
        figures: the four chart figures.
        textbox: text to put back in the message box (a message that was not sent).
        toasts: ``(level, text)`` pairs to show, level "info" or "warning".
        inspector / timeline / race: the token inspector, the round timeline and the race (HTML).
        trace_file: a path, the selected reply's trace file (for the download button).
        ledger / worth: the focused reply's ledger (HTML) and the α-against-c figure.
    """

    chat: list[dict] | None = None
    stats: str | None = None
    table: str | None = None
    figures: tuple | None = None
    textbox: str | None = None
    toasts: tuple[tuple[str, str], ...] = ()
    inspector: str | None = None
    timeline: str | None = None
    race: str | None = None
    trace_file: str | None = None  # the selected reply's trace file, for the download button
    ledger: str | None = None  # the focused reply's ledger (HTML)
    worth: Any = None  # the α-against-c figure of the conversation's drafters


class _Run:
    """The running reply's cancel event, and whether its updates are still wanted."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.discard = False  # set by Clear: the chat was emptied, send no more updates


StreamFn = Callable[..., Iterator[Any]]


class ChatSession:
    """The conversation of one browser session and everything done to it.

    Args:
        service: anything with the ChatService interface (``stream_chat``, ``loading``,
            ``startup_error``); shared by all sessions, which it serialises.
        stream: how a reply is streamed; defaults to ``service.stream_chat`` (the app passes
            its ZeroGPU wrapper on Spaces).
        text_interval_s / plot_interval_s: how often a streaming reply refreshes the text and
            the figures (seconds); the last update is always complete.
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
        plot_interval_s: float = PLOT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.service = service
        self._stream = stream or (lambda history, message, drafter, config, cancel: service.stream_chat(
            history, message, drafter=drafter, config=config, cancel=cancel))
        self.text_interval_s = text_interval_s
        self.plot_interval_s = plot_interval_s
        self.clock = clock
        self.history: list[dict[str, str]] = []  # plain-text turns: what the model sees
        self.exchanges: list[Exchange] = []  # what the chat shows
        self.chart_scope = CHART_SCOPES[0]
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._queued = 0  # messages sent, not started yet
        self._cancel_queued = 0  # of those, how many Stop cancelled
        self._discard_queued = 0  # of those, how many Clear discarded
        self._reply_count = 0
        self.show_rejected = False
        self.selected: tuple[int, int | None] | None = None  # (reply number, token index) in the inspector
        self.selected_round: int | None = None
        self.race_lanes: tuple[RaceLane, RaceLane] | None = None
        self.race_greedy = True
        self._trace_dir: str | None = None
        self._race_stop = threading.Event()  # Stop during a race's replay

    # -- what the page shows ----------------------------------------------------------------
    @property
    def replies(self) -> list[Reply]:
        return [e.reply for e in self.exchanges if e.reply is not None]

    @property
    def latest(self) -> Reply | None:
        replies = self.replies
        return replies[-1] if replies else None

    def chat(self) -> list[dict]:
        """The Chatbot's messages, rendered from the exchanges."""
        out: list[dict] = []
        for e in self.exchanges:
            out.append({"role": "user", "content": render_user(e.message) + (exchange_note_html(e.note) if e.note else "")})
            if e.reply is not None:
                out.append({"role": "assistant", "content": e.reply.html(show_rejected=self.show_rejected)})
        return out

    def stats(self) -> str:
        reply = self.latest
        if reply is None:
            return stats_html(None)
        return stats_html(reply.metrics, label=reply.label, running=reply.running)

    def table(self) -> str:
        return table_html([r.row() for r in self.replies])

    def figures(self) -> tuple:
        """The four figures of the chosen scope: the latest reply, or the whole conversation."""
        if self.chart_scope == CHART_SCOPES[1]:
            return charts.conversation_figures([(r.number, r.drafter, r.metrics) for r in self.replies])
        reply = self.latest
        return charts.all_figures(reply.metrics if reply is not None else SpeculationMetrics())

    def view(self, *, figures: bool = True) -> View:
        """Everything, as it is now."""
        ledger, worth = self.analysis() if figures else (None, None)
        return View(chat=self.chat(), stats=self.stats(), table=self.table(),
                    figures=self.figures() if figures else None, inspector=self.inspector(),
                    timeline=self.timeline(), trace_file=self.trace_file(), ledger=ledger, worth=worth)

    def analysis(self) -> tuple[str, Any]:
        """The focused reply's ledger (HTML) and the α-against-c figure of every drafter used in
        the conversation (the focused reply's drawn larger)."""
        reply = self._focus()
        if reply is None:
            ledger = ('<div class="spec-ledger spec-muted">Send a message: the ledger shows what its decoding '
                      "spent (drafter passes, arithmetic) and saved (target passes, weight reads).</div>")
        else:
            if reply.sizes is None and reply.source is None:
                reply.sizes = self._model_sizes(reply.drafter)
            try:
                ledger = reply.ledger_html()
            except (ValueError, ArithmeticError) as exc:  # a trace file's numbers out of range
                ledger = (f'<div class="spec-ledger spec-muted">Reply #{reply.number}: no ledger, its recorded '
                          f"numbers are out of range ({html.escape(str(exc))}).</div>")
        points = drafter_points((r.drafter, r.metrics) for r in self.replies)
        return ledger, charts.worth_figure(points, None if reply is None else reply.drafter)

    def _model_sizes(self, drafter: str) -> ModelSizes | None:
        sizes = getattr(self.service, "model_sizes", None)
        try:
            return sizes(drafter) if callable(sizes) else None
        except Exception:  # sizes are an extra: never let them break a reply
            return None

    # -- inside the rounds: inspector, timeline, rejected drafts, trace files --------------------
    def reply(self, number: int) -> Reply | None:
        return next((r for r in self.replies if r.number == number), None)

    def _focus(self) -> Reply | None:
        """The reply the inspector and the timeline show: the selected one, else the latest."""
        if self.selected is not None:
            reply = self.reply(self.selected[0])
            if reply is not None:
                return reply
        return self.latest

    def inspector(self) -> str:
        reply = self._focus()
        if reply is None or self.selected is None or self.selected[0] != reply.number:
            return inspector_html(0, ReplyRounds(), None)
        return inspector_html(reply.number, reply.rounds, self.selected[1], temperature=reply.settings.temperature)

    def timeline(self) -> str:
        reply = self._focus()
        if reply is None:
            return timeline_html(0, ReplyRounds())
        selected = self.selected_round if self.selected is not None and self.selected[0] == reply.number else None
        return timeline_html(reply.number, reply.rounds, selected_round=selected)

    def select(self, ref: str) -> View:
        """A click on the page: ``"R:I"`` (token I of reply R) or ``"round:R:K"`` (round K of
        reply R, shown from its first token). Unknown references leave the inspector empty.

        Raises:
            ValueError: a reference that is not of either form.
        """
        parts = (ref or "").strip().split(":")
        try:
            if len(parts) == 3 and parts[0] == "round":
                number, k = int(parts[1]), int(parts[2])
                reply = self.reply(number)
                index = None if reply is None else reply.rounds.first_token.get(k)
                self.selected, self.selected_round = (number, index), k
            elif len(parts) == 2:
                number, index = int(parts[0]), int(parts[1])
                reply = self.reply(number)
                tok = reply.rounds.tokens[index] if reply is not None and 0 <= index < len(reply.rounds.tokens) else None
                self.selected = (number, index)
                self.selected_round = None if tok is None else tok.round_index
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"not a token or round reference: {ref!r}") from None
        ledger, worth = self.analysis()
        return View(inspector=self.inspector(), timeline=self.timeline(), trace_file=self.trace_file(),
                    ledger=ledger, worth=worth)

    def set_show_rejected(self, show: bool) -> View:
        """Show (or hide) the drafts each round threw away, inline in the replies."""
        self.show_rejected = bool(show)
        return View(chat=self.chat())

    def trace_file(self) -> str | None:
        """Write the focused reply's trace file (JSON lines) and return its path; None when there
        is nothing to save yet."""
        from specchat.analysis.trace import write_trace

        reply = self._focus()
        if reply is None or reply.running or not reply.rounds.traced or reply.rounds.done is None:
            return None
        if reply.trace_path is None:  # written once: every click and redraw asks for it
            if self._trace_dir is None:
                self._trace_dir = tempfile.mkdtemp(prefix="specchat-traces-")
            path = Path(self._trace_dir) / f"specchat-trace-reply{reply.number}.jsonl"
            target = getattr(self.service, "target_name", "target")
            reply.trace_path = str(write_trace(path, reply.trace_lines(target)))
        return reply.trace_path

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
        self.exchanges.append(Exchange(message, reply))
        self.selected, self.selected_round = (number, 0 if reply.rounds.tokens else None), 0
        return self.view()

    def set_chart_scope(self, scope: str) -> View:
        """Show the charts of the latest reply or of the whole conversation.

        Raises:
            ValueError: an unknown scope.
        """
        if scope not in CHART_SCOPES:
            raise ValueError(f"charts: {scope!r} is not one of {', '.join(CHART_SCOPES)}")
        self.chart_scope = scope
        return View(figures=self.figures())

    @property
    def busy(self) -> bool:
        """True while a reply streams or a message waits."""
        return self._run is not None or self._queued > 0

    # -- sending, Stop, Clear -----------------------------------------------------------------
    def note_sent(self, message: str | None = None) -> bool:
        """A message was sent (the box emptied); True when it waits behind a reply that streams
        or another message that waits. A blank ``message`` is not counted (``respond`` refuses it
        at once, without waiting); None counts as a message."""
        with self._lock:
            busy = self._run is not None or self._queued > 0
            if message is None or not _blank(message):
                self._queued += 1
        return busy

    def stop(self) -> str | None:
        """Stop: the streaming reply ends after its current round and keeps what it wrote;
        messages waiting behind it are cancelled with it (each is shown, marked "not sent").
        Returns what to tell the user when messages were cancelled, else None."""
        self._race_stop.set()
        with self._lock:
            if self._run is not None:
                self._run.cancel.set()
            cancelled = self._queued - self._cancel_queued - self._discard_queued
            self._cancel_queued += cancelled
        if cancelled <= 0:
            return None
        what = "your queued message was" if cancelled == 1 else f"your {cancelled} queued messages were"
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
            self._discard_queued, self._cancel_queued = self._queued, 0
            self.history, self.exchanges = [], []
            self._reply_count = 0  # the new conversation's replies are #1, #2, …
            self.selected = self.selected_round = None
        return self.view()

    def close(self) -> None:
        """The tab closed: stop the work and let go of the conversation."""
        with self._lock:
            if self._run is not None:
                self._run.discard = True
                self._run.cancel.set()
            self.history, self.exchanges = [], []
            self._reply_count = 0

    # -- the race ------------------------------------------------------------------------------
    def race_message(self, typed: str | None) -> str | None:
        """What to race: the text in the message box, else the last message sent."""
        if typed and not _blank(typed):
            return typed
        return self.exchanges[-1].message if self.exchanges else None

    def run_race(self, message: str | None, settings: ReplySettings) -> Iterator[View]:
        """Run ``message`` (a fresh single-turn chat) with the target only, then with
        ``settings.drafter``, back to back with the same settings and seed, each traced; the
        page shows only a short status meanwhile (drawing would slow the runs it times). Stop
        ends it. :meth:`replay_race` then plays them back at their measured speeds.

        Raises:
            ValueError: an out-of-range setting.
        """
        self.race_lanes = None
        if not hasattr(self.service, "stream_chat") or getattr(self.service, "banner", None):
            yield View(race=status_html("The race needs a model: start the app without --trace."))
            return
        if message is None or _blank(message):
            yield View(race=status_html("Type a message (or send one) to race on."),
                       toasts=(("warning", "Type a message (or send one) to race on."),))
            return
        if drafter_kinds.DRAFTER_KINDS.get(settings.drafter) is not None and drafter_kinds.get(settings.drafter).source == "none":
            yield View(race=status_html("Pick a drafter to race against the target alone."),
                       toasts=(("warning", "Pick a drafter to race against the target alone."),))
            return
        base_settings = dataclasses.replace(settings, drafter="none")
        config = settings.config()  # ValueError before anything runs
        run = _Run()
        with self._lock:
            busy = self._run is not None
            if not busy:
                self._run = run
        if busy:
            yield View(race=status_html("A reply is streaming: race when it has finished."),
                       toasts=(("warning", "A reply is streaming: race when it has finished."),))
            return
        self._race_stop.clear()
        self.race_lanes, self.race_greedy = None, config.greedy
        lanes = (RaceLane("target only"), RaceLane(settings.drafter))
        try:
            for lane, lane_settings in zip(lanes, (base_settings, settings)):
                lane_config = dataclasses.replace(config, measure_speedup=False)  # the race itself is the measurement
                forget = getattr(self.service, "forget_prefix", None)
                if callable(forget):  # both lanes prefill the whole prompt: the second must not reuse the first's cache
                    forget()
                last = self.clock()
                yield View(race=race_html(*lanes, 0.0, status=f"running {lane.name}…"))
                for item in self._stream([], message, lane_settings.drafter, lane_config, run.cancel):
                    if isinstance(item, (TokenEvent, RoundEvent, DoneEvent)):
                        lane.add(item)
                    else:
                        lane.name = lane.name if not getattr(item, "fallback_drafter", None) else "none (drafter failed)"
                    now = self.clock()
                    if isinstance(item, RoundEvent) and now - last >= 1.0:
                        last = now
                        yield View(race=race_html(*lanes, 0.0, status=f"running {lane.name}: {len(lane.tokens)} tokens…"))
                if run.cancel.is_set():
                    yield View(race=race_html(*lanes, None, status="race stopped"))
                    return
            self.race_lanes = lanes
            yield View(race=race_html(*lanes, 0.0, status="both runs done: replaying them at their measured speeds…"))
        except Exception as exc:  # a failing model: say so
            yield View(race=race_html(*lanes, None, status=f"the race failed: {exc}"),
                       toasts=(("warning", f"The race failed: {exc}"),))
        finally:
            with self._lock:
                if self._run is run:
                    self._run = None

    def replay_race(self, frame_s: float = 0.1) -> Iterator[View]:
        """Play the last race back: both lanes side by side at their measured speeds (real
        time), then their final times and, at temperature 0, whether the texts are identical."""
        lanes = self.race_lanes
        if lanes is None:
            return
        total = max(lane.total_ms for lane in lanes)
        start = self.clock()
        while True:
            t_ms = (self.clock() - start) * 1000
            if t_ms >= total or self.race_lanes is not lanes or self._race_stop.is_set():
                break
            yield View(race=race_html(*lanes, t_ms, status="replaying at the measured speeds"))
            time.sleep(frame_s)
        verdict = race_verdict(*lanes, greedy=self.race_greedy)
        yield View(race=race_html(*lanes, None, status="same prompt, same settings and seed, run back to back",
                                  verdict=verdict))

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
        if _blank(message):  # not counted by note_sent: refused at once, nothing waits
            yield View(textbox=message or None, toasts=(("warning", "Type a message first."),))
            return
        run = _Run()
        with self._lock:
            self._queued = max(self._queued - 1, 0)
            if self._discard_queued > 0:
                self._discard_queued -= 1
                skipped = "discard"
            elif self._cancel_queued > 0:
                self._cancel_queued -= 1
                skipped = "cancel"
            else:
                skipped = None
                self._run = run
        if skipped == "discard":
            yield View(chat=self.chat())
            return
        if skipped == "cancel":
            self.exchanges.append(Exchange(message, note="not sent: Stop cancelled it while it waited"))
            yield View(chat=self.chat())
            return
        try:
            yield from self._respond(message, settings, run)
        finally:
            run.cancel.set()  # also on GeneratorExit (tab closed): the engine stops between rounds
            with self._lock:
                if self._run is run:
                    self._run = None

    def _respond(self, message: str, settings: ReplySettings, run: _Run) -> Iterator[View]:
        config = settings.config()  # ValueError for an out-of-range setting, before any change
        self._reply_count += 1
        reply = Reply(self._reply_count, message, settings, config=config)
        if self.selected is not None and self.selected[0] != reply.number:
            self.selected = self.selected_round = None  # the views follow the new reply
        exchange = Exchange(message, reply)
        history = list(self.history)
        self.exchanges.append(exchange)

        if getattr(self.service, "loading", False):  # still loading in the background: wait, visibly
            reply.phase = Phase.WAITING
            yield View(chat=self.chat(), stats=self.stats())
            while getattr(self.service, "loading", False) and not run.cancel.is_set():
                time.sleep(0.5)
                yield View()
            error = getattr(self.service, "startup_error", None)
            if error is not None or run.cancel.is_set():
                self.exchanges.remove(exchange)
                self._reply_count -= 1
                if run.discard:
                    yield View(chat=self.chat())
                    return
                toasts = (("warning", f"The models could not be loaded: {error}"),) if error else ()
                yield View(chat=self.chat(), textbox=message, toasts=toasts)  # the message goes back
                return
        reply.phase = Phase.RUNNING
        yield View(chat=self.chat(), stats=self.stats(), table=self.table())

        stream = None
        last_text = last_plot = self.clock()
        try:
            stream = self._stream(history, message, settings.drafter, config, run.cancel)
            for item in stream:
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
                drawable = isinstance(item, RoundEvent) and not item.timing_next
                if toast is None and (not drawable or now - last_text < self.text_interval_s):
                    continue
                figures = timeline = ledger = worth = None
                if now - last_plot >= self.plot_interval_s:
                    figures, timeline, last_plot = self.figures(), self.timeline(), now
                    ledger, worth = self.analysis()
                last_text = now
                yield View(chat=self.chat(), stats=self.stats(), figures=figures, timeline=timeline,
                           ledger=ledger, worth=worth, toasts=(toast,) if toast else ())
        except Exception as exc:  # SpecchatError, ValueError, a failing model: show it, keep the text
            reply.fail(str(exc) or type(exc).__name__)
            yield View(chat=self.chat(), stats=self.stats(), table=self.table(), figures=self.figures(),
                       textbox=message, toasts=(("warning", f"Generation failed: {exc}"),))
            return
        finally:
            if hasattr(stream, "close"):
                stream.close()
            if reply.running:  # closed mid-stream (a closed tab): what it wrote is kept
                reply.phase = Phase.STOPPED
            if reply.phase is not Phase.FAILED and not run.discard:
                self.history = history + [
                    {"role": "user", "content": message},
                    {"role": "assistant", "content": reply.renderer.text},
                ]
        if run.discard:  # Clear: end on the empty chat (Gradio re-sends a stream's last update)
            yield self.view()
            return
        yield self.view()  # the final update is always complete


def _blank(message: str | None) -> bool:
    """Empty, whitespace or only invisible characters (:func:`specchat.runtimes.chat.is_blank`)."""
    from specchat.runtimes.chat import is_blank  # here: `app.py --help` must not import transformers

    return is_blank(message or "")


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
    "ChatSession",
    "Exchange",
    "Phase",
    "Reply",
    "ReplySettings",
    "SessionStore",
    "View",
]
