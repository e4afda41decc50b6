"""What the page shows of a chat session, rendered from its conversation. No gradio import.

:class:`SessionViews` is the part of :class:`specchat.ui.session.chat.ChatSession` that draws: the
chat's messages, the stats line, the conversation table, the four charts of the chosen scope,
the ledger and the α-against-c figure, the token inspector and the round timeline of the
selected (else the latest) reply, and its trace file for the download button; and the clicks
that change what is drawn (a token or round selected, rejected drafts shown, the charts'
scope). Every handler returns a :class:`View`: what to change on the page, ``None`` = leave it.
"""

from __future__ import annotations

import html
import itertools
import secrets
import tempfile
from pathlib import Path
from typing import Any

from specchat.analysis.ledger import ModelSizes
from specchat.core.metrics import SpeculationMetrics
from specchat.service_api import ChatServiceProtocol
from specchat.ui.charts import figures as charts
from specchat.ui.html.inspector import inspector_html
from specchat.ui.html.ledger import drafter_points
from specchat.ui.html.render import stats_html, table_html
from specchat.ui.html.rounds import ReplyRounds
from specchat.ui.html.timeline import timeline_html
from specchat.ui.html.transcript import feed_messages
from specchat.ui.session.reply import Exchange, Reply
from specchat.ui.session.view import LIVE_PANELS, View

CHART_SCOPES = ("this reply", "whole conversation")
# the charts' hint when the chat holds only replies restored as text (after a reload, another chat shown)
RESTORED_FIGURES = "The replies above were restored as text: their figures are not kept. The next reply draws here"
LIVE_TIMELINE_ROUNDS = 24  # rows of the timeline sent while a reply streams (all of them at its end)


class SessionViews:
    """What a :class:`~specchat.ui.session.chat.ChatSession` shows (its exchanges, numbered replies,
    the selection, the charts' scope, the live panels on screen), and the clicks that change it.

    Args:
        service: the loaded service (the models' sizes for the ledger, the target's name in a
            trace file).
    """

    def __init__(self, service: ChatServiceProtocol):
        self.service = service
        self.exchanges: list[Exchange] = []  # what the chat shows
        self.reply_count = 0  # replies numbered so far (#1, #2, …)
        self.chart_scope = CHART_SCOPES[0]
        self.selected: tuple[int, int | None] | None = None  # (reply number, token index) in the inspector
        self.selected_round: int | None = None
        self.pinned = False  # the clicked reply keeps the focus while new replies stream
        self.panels_visible: set[str] = set()  # the live panels on screen (LIVE_PANELS), as the page last said
        self._stale: set[str] = set()  # live panels whose data changed while they were off screen
        self._trace_dir: str | None = None
        self._feed_seq = itertools.count(1)  # every feed value gets the next
        self._epoch = secrets.token_hex(4)  # whose seq it is: a value of another epoch is never stale
        self._exchange_ids = itertools.count(1)  # each exchange's id in the transcript

    def reset(self) -> None:
        """An empty chat (Clear, a closed tab): the next reply is #1 again."""
        self.exchanges = []
        self.reply_count = 0
        self.selected = self.selected_round = None

    def follow(self, number: int) -> None:
        """Reply ``number`` starts: the views follow it unless a reply was clicked and pinned."""
        if self.selected is not None and self.selected[0] != number and not self.pinned:
            self.selected = self.selected_round = None

    # -- what the page shows ----------------------------------------------------------------
    @property
    def replies(self) -> list[Reply]:
        return [e.reply for e in self.exchanges if e.reply is not None]

    @property
    def latest(self) -> Reply | None:
        replies = self.replies
        return replies[-1] if replies else None

    def add_exchange(self, exchange: Exchange) -> Exchange:
        """Append ``exchange`` to the conversation with a new transcript id."""
        exchange.id = next(self._exchange_ids)
        self.exchanges.append(exchange)
        return exchange

    def move_to_end(self, exchange: Exchange) -> int:
        """Show ``exchange`` last, with a new transcript id (the page orders exchanges by id);
        returns its old id, for the page to remove."""
        old = exchange.id
        self.exchanges.remove(exchange)
        self.add_exchange(exchange)
        return old

    def feed(self, *exchanges: Exchange, reset: bool = False, removed: tuple[int, ...] = ()) -> dict:
        """A value for the page's transcript: these exchanges as they are now, the ids ``removed``
        taken out, and with ``reset`` everything else dropped first (see :mod:`specchat.ui.html.transcript`)."""
        items = [e.item() for e in exchanges] + [{"id": i, "removed": True} for i in removed]
        return {"seq": next(self._feed_seq), "epoch": self._epoch, "reset": reset, "items": items}

    def chat(self) -> list[dict]:
        """The whole conversation as messages (``[{"role", "content"}]``, content is HTML): what
        the transcript shows, in one piece (for a reader of the session, not for streaming)."""
        return feed_messages({"items": [e.item() for e in self.exchanges]})

    @property
    def has_restored(self) -> bool:
        """Whether the chat shows replies restored as text (their figures were not kept)."""
        return any(e.restored is not None for e in self.exchanges)

    def stats(self) -> str:
        reply = self.latest
        if reply is None:
            return stats_html(None, restored=self.has_restored)
        return stats_html(reply.metrics, label=reply.label, running=reply.running)

    def table(self) -> str:
        return table_html([r.row() for r in self.replies])

    def figures(self) -> tuple:
        """The four figures of the chosen scope: the focused reply (the one clicked, else the
        latest: the same reply as the inspector, the timeline, the ledger and the trace download),
        named in each title, or the whole conversation."""
        if self.chart_scope == CHART_SCOPES[1]:
            return charts.conversation_figures([(r.number, r.drafter, r.metrics) for r in self.replies])
        reply = self.focus()
        if reply is None:
            return charts.all_figures(SpeculationMetrics(), hint=RESTORED_FIGURES if self.has_restored else None)
        return charts.all_figures(reply.metrics, reply=f"reply #{reply.number}")

    def view(self, *, figures: bool = True, transcript: dict | None = None, panels: set[str] | None = None) -> View:
        """Everything, as it is now; the transcript whole (after a reset) unless ``transcript``
        gives the feed to send instead (a reply's last update sends its own exchange only).
        ``panels``: draw only these of the live panels ("charts", "timeline", "ledger"; None: all)
        and mark the others stale, to be drawn when they come on screen (:meth:`show_panels`)."""
        drawn = set(LIVE_PANELS) if panels is None else set(panels) & set(LIVE_PANELS)
        if not figures:
            drawn.discard("charts")
            drawn.discard("ledger")
        self._stale = (self._stale | set(LIVE_PANELS)) - drawn
        if transcript is None:
            transcript = self.feed(*self.exchanges, reset=True)
        return View(transcript=transcript, stats=self.stats(), table=self.table(), inspector=self.inspector(),
                    trace_file=self.trace_file(), **self.panel_views(drawn))

    def show_panels(self, seen: set[str]) -> View:
        """The page says which live panels are on screen now: draw those that changed since they
        were last drawn (they were off screen then)."""
        self.panels_visible = set(seen) & set(LIVE_PANELS)
        due = self._stale & self.panels_visible
        self._stale -= due
        return View(**self.panel_views(due))

    def panel_views(self, panels: set[str], *, live: bool = False) -> dict[str, Any]:
        """The View fields of these live panels, drawn now (``live``: a reply streaming, the
        timeline its last rounds only)."""
        out: dict[str, Any] = {}
        if "charts" in panels:
            out["figures"] = self.figures()
        if "timeline" in panels:
            out["timeline"] = self.timeline(live=live)
        if "ledger" in panels:
            out["ledger"], out["worth"] = self.analysis()
        return out

    def analysis(self) -> tuple[str, Any]:
        """The focused reply's ledger (HTML) and the α-against-c figure of every drafter used in
        the conversation (the focused reply's drawn larger)."""
        reply = self.focus()
        if reply is None:
            ledger = ('<div class="spec-ledger spec-muted">Send a message: the ledger shows what its decoding '
                      "spent (drafter passes, arithmetic) and saved (target passes, weight reads).</div>")
        else:
            if reply.sizes is None and reply.source is None:
                reply.sizes = self.model_sizes(reply.drafter)
            try:
                ledger = reply.ledger_html()
            except (ValueError, ArithmeticError) as exc:  # a trace file's numbers out of range
                ledger = (f'<div class="spec-ledger spec-muted">Reply #{reply.number}: no ledger, its recorded '
                          f"numbers are out of range ({html.escape(str(exc))}).</div>")
        points = drafter_points((r.drafter, r.metrics) for r in self.replies)
        own = drafter_points([(reply.drafter, reply.metrics)]) if reply is not None else []
        return ledger, charts.worth_figure(points, None if reply is None else reply.drafter, own[0] if own else None)

    def model_sizes(self, drafter: str) -> ModelSizes | None:
        try:
            return self.service.model_sizes(drafter)
        except Exception:  # sizes are an extra: never let them break a reply
            return None

    # -- inside the rounds: inspector, timeline, rejected drafts, trace files --------------------
    def reply(self, number: int) -> Reply | None:
        return next((r for r in self.replies if r.number == number), None)

    def focus(self) -> Reply | None:
        """The reply the inspector and the timeline show: the selected one, else the latest."""
        if self.selected is not None:
            reply = self.reply(self.selected[0])
            if reply is not None:
                return reply
        return self.latest

    def inspector(self) -> str:
        reply = self.focus()
        if reply is None or self.selected is None or self.selected[0] != reply.number:
            return inspector_html(0, ReplyRounds(), None)
        return inspector_html(reply.number, reply.rounds, self.selected[1], temperature=reply.settings.temperature)

    def timeline(self, *, live: bool = False) -> str:
        """The focused reply's round timeline; ``live`` (a reply streaming): its last rounds only."""
        reply = self.focus()
        if reply is None:
            return timeline_html(0, ReplyRounds())
        selected = self.selected_round if self.selected is not None and self.selected[0] == reply.number else None
        return timeline_html(reply.number, reply.rounds, selected_round=selected,
                             last=LIVE_TIMELINE_ROUNDS if live and reply.running else None)

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
        figures = None  # the charts follow the focus too (those of the whole conversation do not change)
        if self.chart_scope == CHART_SCOPES[0]:
            if "charts" in self.panels_visible:
                figures = self.figures()
            else:
                self._stale.add("charts")
        return View(inspector=self.inspector(), timeline=self.timeline(), trace_file=self.trace_file(),
                    ledger=ledger, worth=worth, figures=figures)

    def trace_file(self) -> str | None:
        """Write the focused reply's trace file (JSON lines) and return its path; None when there
        is nothing to save yet."""
        from specchat.analysis.trace import write_trace

        reply = self.focus()
        if reply is None or reply.running or not reply.rounds.traced or reply.rounds.done is None:
            return None
        if reply.trace_path is None:  # written once: every click and redraw asks for it
            if self._trace_dir is None:
                self._trace_dir = tempfile.mkdtemp(prefix="specchat-traces-")
            path = Path(self._trace_dir) / f"specchat-trace-reply{reply.number}.jsonl"
            target = self.service.target_name
            reply.trace_path = str(write_trace(path, reply.trace_lines(target)))
        return reply.trace_path
    def set_chart_scope(self, scope: str) -> View:
        """Show the charts of the latest reply or of the whole conversation.

        Raises:
            ValueError: an unknown scope.
        """
        if scope not in CHART_SCOPES:
            raise ValueError(f"charts: {scope!r} is not one of {', '.join(CHART_SCOPES)}")
        self.chart_scope = scope
        return View(figures=self.figures())
