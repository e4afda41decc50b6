"""One reply of the chat: the settings it was made with, its events, statistics and renderings.

A reply is data before it is HTML: :class:`Reply` keeps every event of its stream (live, or
read back from a trace file) and renders each view from them: its chat bubble, its row of the
conversation table, its ledger, its trace file. An :class:`Exchange` is one user message and
what came of it; a :class:`Run` is the cancel switch of whatever streams (a reply or a race).
No gradio import.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any

from specchat.analysis.ledger import Ledger, ModelSizes, count_ledger
from specchat.conversation import ReplySettings, generation_config
from specchat.core import evidence
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, DrafterFailedEvent, Event, PrefillEvent, RoundEvent, StopReason, TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.ui.html.ledger import ledger_html
from specchat.ui.html.markdown import LEAD, render_blocks
from specchat.ui.html.render import (
    ReplyRenderer,
    exchange_note_html,
    render_user,
    reply_summary,
    status_html,
)
from specchat.ui.html.rounds import ReplyRounds
from specchat.ui.html.waits import human_duration, prefill_html, queued_note_html

SHOWN_PREFILL_MS = 1000.0  # a prefill is shown (a progress bar) once it has taken, or is estimated to take, this long
WARNED_PREFILL_MS = 30_000.0  # a prefill estimated to take longer is announced (a toast), once


def long_prefill(event: PrefillEvent, limit_ms: float = SHOWN_PREFILL_MS) -> bool:
    """Whether a prefill has taken ``limit_ms`` already, or is estimated to take that long in all."""
    return event.elapsed_ms >= limit_ms or event.elapsed_ms + (event.remaining_ms or 0.0) >= limit_ms


class Phase(str, enum.Enum):
    """Where a reply is."""

    WAITING = "waiting"  # the models are still loading
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"  # Stop (or a closed tab) ended it; the partial reply is kept
    FAILED = "failed"  # an error ended it; the exchange is shown but not kept in the history


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
    prefill: PrefillEvent | None = None  # the prefill's latest progress, once it is long enough to show
    prefill_warned: bool = False  # the long prefill was announced
    target: str | None = None  # the target model that wrote it (the page can switch models mid-chat)

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
        if isinstance(item, PrefillEvent):  # progress only: not part of the reply's record (its trace)
            return self._add_prefill(item)
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
            if self.phase is Phase.STOPPED and not item.token_ids and self.prefill is not None:
                p = self.prefill
                read = f"{p.num_done:,} of {p.num_total:,} tokens" + (" (the drafter's part)" if p.model == "drafter" else "")
                self.renderer.status = f"stopped while reading your message ({read} read): nothing was generated"
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

    def _add_prefill(self, event: PrefillEvent) -> tuple[str, str] | None:
        """Keep a long prefill's progress (:func:`long_prefill`); announce one estimated to take
        more than :data:`WARNED_PREFILL_MS`, once, with the message's length and the estimate."""
        if self.prefill is None and not long_prefill(event):
            return None
        self.prefill = event
        if self.prefill_warned or event.remaining_ms is None or not long_prefill(event, WARNED_PREFILL_MS):
            return None
        self.prefill_warned = True
        wait = human_duration((event.elapsed_ms + event.remaining_ms) / 1000)
        kept = event.num_prompt_tokens - 1 - event.num_total  # already in the conversation's kept cache
        size = (f"{event.num_prompt_tokens:,} tokens" if kept <= 0 else
                f"{event.num_prompt_tokens:,} tokens, {event.num_total:,} of them new ({kept:,} kept from the conversation)")
        return "info", (f"The prompt (your message with the conversation and the system prompt) is {size}: reading "
                        f"{'it' if kept <= 0 else 'the new ones'} takes about {wait} on this machine before the "
                        f"reply starts (measured here). Stop cancels it.")

    def fail(self, message: str) -> None:
        self.renderer.set_error(message)
        self.phase = Phase.FAILED

    @property
    def running(self) -> bool:
        return self.phase in (Phase.WAITING, Phase.RUNNING)

    def parts(self) -> dict[str, Any]:
        """The bubble in parts, for the page's transcript (:mod:`specchat.ui.html.transcript`): the
        label and summary (text), the notices and status (HTML), the body as one item per
        Markdown block (a streaming update changes the last block, or a code block's last lines,
        only), and once the reply has ended its plain text."""
        r = self.renderer
        if self.phase is Phase.WAITING:
            blocks: list[Any] = [status_html("waiting for the models to finish loading…")]
        elif self.running and not r.text and self.prefill is not None:
            blocks = [prefill_html(self.prefill)]
        else:
            blocks = r.blocks() if r.text else ([] if r.status else ['<p class="spec-dots">…</p>'])
        return {"label": self.label, "notices": r.notices_html(), "blocks": blocks, "status": r.status_html(),
                "summary": "generating…" if self.running else reply_summary(self.metrics), "running": self.running,
                # the text as the model wrote it, once the reply has ended (its copy button)
                "text": None if self.running else r.text}

    def ledger(self) -> Ledger:
        """What this reply's decoding spent and saved (:func:`specchat.analysis.ledger.count_ledger`)."""
        done = self.metrics.done
        return count_ledger(self.metrics.rounds, sizes=self.sizes, alpha=self.metrics.acceptance_rate,
                            prefill_ms=None if done is None else done.prefill_ms,
                            num_prefilled=None if done is None else done.num_prefilled,
                            num_prompt_tokens=None if done is None else done.num_prompt_tokens,
                            drafter_prefill_ms=None if done is None else done.drafter_prefill_ms)

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
        config = self.config or generation_config(self.settings, 0, trace=True)  # a replay records no seed
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
            "tokens_per_s": m.tokens_per_s,  # as the stats line's speed: committed tokens / decode seconds
            "speedup": m.measured_speedup if evidence.measured_speedup(m).shown else None,
            "speedup_predicted": evidence.predicted_speedup(m),
            "state": self.phase.value,
        }


CONTINUES_HTML = '<div class="spec-continues">↪ Continue: the reply above, written on from where it stopped</div>'


@dataclass
class Exchange:
    """One user message and what came of it: a reply, or a note (not sent). ``id`` is its
    place in the page's transcript (given by the session, unique in it)."""

    message: str
    reply: Reply | None = None
    note: str | None = None
    id: int = 0
    queued: bool = False  # sent, waiting for the reply before it (shown with a cancel button)
    restored: Restored | None = None  # a reply of this conversation before the page was reloaded (text only)
    kept: bool = False  # its turn is in what the model sees (Conversation.finish kept it)
    continues: bool = False  # its reply continues the reply before it (Continue); the message is that reply's
    prefix: str | None = None  # for a Continue: the reply's text it writes on from (what the model sees before it)

    def item(self) -> dict[str, Any]:
        """The exchange as an item of the page's transcript: its id, the user's message (HTML,
        with the note, or while it waits "queued" and its cancel button), and the reply's
        :meth:`Reply.parts` (None: no reply)."""
        user = CONTINUES_HTML if self.continues else render_user(self.message)
        user += exchange_note_html(self.note) if self.note else ""
        if self.queued:
            user += queued_note_html(self.id)
        reply = self.reply.parts() if self.reply is not None else None
        if reply is None and self.restored is not None:
            reply = self.restored.parts()
        # "message": the text as typed (↑ in an empty box puts it back); none for a Continue
        return {"id": self.id, "user": user, "message": None if self.continues else self.message, "reply": reply}


@dataclass(frozen=True)
class Restored:
    """A reply kept by the browser across a reload (:meth:`ChatSession.saved`): what it said and
    how it was labelled, no events (its colours, charts and inspector are not kept)."""

    label: str
    text: str
    summary: str
    status: str = ""
    lead: str = ""  # a Continue's: the end of the reply it writes on (ReplyRenderer.continue_inside); not saved

    def saved(self) -> dict[str, str]:
        """The fields the browser keeps (:func:`~specchat.ui.session.saved.saved_state`)."""
        return {"label": self.label, "text": self.text, "summary": self.summary, "status": self.status}

    def parts(self) -> dict[str, Any]:
        """The bubble, as :meth:`Reply.parts` gives it: the text as Markdown (after ``lead``), and
        a note saying it was restored."""
        source = self.lead + self.text
        blocks = render_blocks(source, [LEAD] * len(self.lead) + [-1] * len(self.text), [], {}, {}) if self.text else []
        note = ('<div class="spec-notice">restored (after a reload, or from another chat of the list): the text only; '
                'its token colours, charts and inspector are not kept (new replies have them)</div>')
        return {"label": self.label, "notices": note, "blocks": blocks,
                "status": status_html(self.status) if self.status else "", "summary": self.summary,
                "running": False, "text": self.text}


class Run:
    """The running reply's (or race's) cancel event, and whether its updates are still wanted."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.discard = False  # set by Clear: the chat was emptied, send no more updates


def is_blank_message(message: str | None) -> bool:
    """Empty, whitespace or only invisible characters (:func:`specchat.runtimes.chat.is_blank`)."""
    from specchat.runtimes.chat import is_blank  # here: `app.py --help` must not import transformers

    return is_blank(message or "")
