"""Token events → HTML for the chat, the legend and the stats line. No gradio import.

Nothing a model or a user wrote reaches the page unescaped: a user message and a reply are both
rendered as Markdown with raw HTML off (:mod:`specchat.ui.html.markdown`: HTML in them stays text),
and each text run of a reply is escaped again when its token's span is woven in. The page's
transcript is a ``gr.HTML``, which Gradio does not sanitise at all, so this escaping is the only
guard.

Colors are defined once here (:data:`KIND_COLORS`) and reused by :mod:`specchat.ui.charts.figures`.
"""

from __future__ import annotations

import html
from array import array
from dataclasses import dataclass, field
from functools import lru_cache

from specchat.core import evidence
from specchat.core.events import DoneEvent, StopReason, TokenEvent, TokenKind
from specchat.core.metrics import SpeculationMetrics
from specchat.ui.html.markdown import LEAD, USER_MD, Piece, block_html, code_css, kept_indents, render_blocks
from specchat.ui.html.static_files import static_text
from specchat.ui.html.transcript import CSS as TRANSCRIPT_CSS

# Solid colors per token kind (legend chips, chart series) and the tints used as token
# backgrounds. "target" marks tokens of rounds that drafted nothing (target-only decoding).
KIND_COLORS: dict[str, str] = {
    "accepted": "#2f9e44",
    "resampled": "#e8590c",
    "bonus": "#7048e8",
    "target": "#868e96",
}
KIND_TINTS: dict[str, str] = {
    "accepted": "rgba(47, 158, 68, 0.22)",
    "resampled": "rgba(232, 89, 12, 0.24)",
    "bonus": "rgba(112, 72, 232, 0.22)",
    "target": "transparent",
}
TARGET_ONLY_LOOK = "plain text, no tint"
"""How a token of a round that drafted nothing (kind ``target``) is shown, in the words the page's
header, its "How to read this page" and the legend all use: the transcript draws it with no
background, outline or colour of its own (:func:`_css`), the terminal with no style
(``specchat.commands.common.TOKEN_STYLES``); only the charts and the stats line's count use grey."""
KIND_LABELS: dict[str, tuple[str, str]] = {  # kind: (chip text, explanation)
    "accepted": ("accepted", "draft token the target kept"),
    "resampled": ("resampled", "drawn from the residual after a rejection"),
    "bonus": ("bonus", "extra target token after all drafts were accepted"),
    "target": ("target only", f"{TARGET_ONLY_LOOK}: a round that drafted nothing (the target alone)"),
}
# Series that are not token kinds: measured numbers, predictions, target-only decoding.
MEASURED_COLOR = "#343a40"
PREDICTED_COLOR = "#1098ad"
BASELINE_COLOR = "#868e96"

SPEEDUP_BASIS = "vs target-only steps timed during this reply"
"""What every speedup on the page is measured against, in words."""


def escape_text(text: str) -> str:
    """Escape text for the chat HTML, keeping every character as written.

    Besides ``&<>``, newlines, carriage returns and tabs become character references
    (``&#10;`` ``&#13;`` ``&#9;``): Gradio's Chatbot runs ``inspect.cleandoc`` on string
    content, which would expand tabs and strip the common indentation of lines 2…n (a
    reply whose only newline is followed by spaces lost its indentation). With no raw
    newline left in the HTML, cleandoc has nothing to strip; the browser still decodes the
    references into real characters, shown by ``white-space: pre-wrap``.
    """
    return (
        html.escape(text, quote=False)
        .replace("\r", "&#13;")
        .replace("\n", "&#10;")
        .replace("\t", "&#9;")
    )


def token_class(event: TokenEvent) -> str:
    """CSS kind of a token: its TokenKind value ("target" for a round that drafted nothing)."""
    return event.kind.value


def token_title(event: TokenEvent) -> str:
    """Hover text: kind, target probability p and draft probability q (plain text)."""
    kind = token_class(event)
    if kind == "target":
        kind = "target only (no draft this round)"
    parts = [f"{kind} · p={event.target_prob:.2f}"]
    if event.draft_prob is not None:
        parts.append(f"q={event.draft_prob:.2f}")
    if event.kind is TokenKind.RESAMPLED and event.rejected_target_prob is not None:
        rejected = f"rejected draft: p={event.rejected_target_prob:.2f}"
        if event.rejected_draft_prob is not None:
            rejected += f" q={event.rejected_draft_prob:.2f}"
        parts.append(f"({rejected})")
    return " ".join(parts)


def token_span(event: TokenEvent, ref: str | None = None) -> str:
    """One committed token as ``<span class="tok tok-KIND" title="…">escaped text</span>``;
    with ``ref`` ("R:I": reply R, its I-th token) also the class ``tref-R-I``, which the page's
    click hook sends to the token inspector (a class, because the Chatbot's sanitizer drops
    ``data-`` attributes).

    Returns "" for a token that adds no text (mid-character pieces, special tokens).
    Newlines stay in the text (as ``&#10;``, see :func:`escape_text`); the reply container
    shows them with ``white-space: pre-wrap``.
    """
    if not event.text:
        return ""
    ref_class = f" {ref_class_of(ref)}" if ref else ""
    return (
        f'<span class="tok tok-{token_class(event)}{ref_class}" title="{html.escape(token_title(event))}">'
        f"{escape_text(event.text)}</span>"
    )


def ref_class_of(ref: str) -> str:
    """``"R:I"`` → ``"tref-R-I"``: the class that makes a token clickable (see ``app.py``)."""
    return "tref-" + ref.replace(":", "-")


def rejected_run_html(trace, position: int) -> str:
    """The drafts a round threw away, shown inline before the token that replaced them: the
    rejected one struck through, the unjudged ones after it dotted. ``trace`` is the round's
    :class:`~specchat.analysis.trace.RoundTrace`; ``position`` the rejected draft's index."""
    parts = []
    for i, d in enumerate(trace.drafted[position:], position):
        cls = "tok-rejected" if i == position else "tok-unjudged"
        title = "rejected draft" if i == position else "draft never judged (after the rejection)"
        text = trace.token_texts.get(d.token_id, "").replace("\r", "").replace("\n", "↵")  # never breaks a line
        parts.append(f'<span class="{cls}" title="{title}">{escape_text(text)}</span>')
    return f'<span class="spec-rejected-run">{"".join(parts)}</span>' if parts else ""


@lru_cache(maxsize=256)
def render_user(text: str) -> str:
    """A user message as Markdown, by the replies' renderer (:func:`render_blocks` with no tokens)
    without emphasis (:data:`~specchat.ui.html.markdown.USER_MD`: ``__repr__`` shows as typed):
    raw HTML off, so HTML in the message stays text; fenced code highlighted, with its copy button;
    outside fences each line keeps its indentation (code pasted without fences reads as typed).
    Cached: the exchange in progress is sent again with every streamed update."""
    body = "".join(block_html(b) for b in render_blocks(kept_indents(text), [-1] * len(text), [], {}, {}, USER_MD))
    return f'<div class="spec-md spec-user-md">{body}</div>'


NOTHING_WRITTEN = "nothing written: the model ended its turn at once"  # a reply's status (LastReply reads it)


@dataclass
class ReplyRenderer:
    """Accumulates one streamed reply: its text (what goes into the plain-text history) and each
    token's place in it, rendered as Markdown with the tokens woven in (:mod:`specchat.ui.html.markdown`).

    ``blocks()`` is the reply's body as one HTML string per top-level block (the page updates only
    the blocks that changed); ``html()`` is the whole bubble body: notices, the text, and a status
    line when stopped or failed. Each round's rejected drafts are kept with the token that
    replaced them and rendered before it (the page shows them with "show rejected drafts").
    """

    text: str = ""
    pieces: list[Piece] = field(default_factory=list)
    tok_at: array = field(default_factory=lambda: array("i"))  # character → index in pieces (−1: none)
    notices: list[str] = field(default_factory=list)
    status: str | None = None  # "stopped", "error: …", or a stop reason worth showing
    status_is_error: bool = False
    key: int | None = None  # the reply's number: spans get the class tref-key-index
    num_tokens: int = 0
    rejected: dict[int, str] = field(default_factory=dict)  # piece index → the drafts thrown away before it
    lead: str = ""  # a Continue's: Markdown read before the text, not part of it (:meth:`continue_inside`)
    _resampled_piece: int | None = None
    _cache: dict = field(default_factory=dict)

    def continue_inside(self, lead: str) -> None:
        """Render the text as if ``lead`` came before it: a Continue passes the end of the reply it
        writes on (:func:`specchat.ui.html.markdown.continuation_lead`: an open code block's fence
        line, the line cut mid-way), so its code goes on as code and a list item keeps its number.
        The lead's characters show muted (:data:`~specchat.ui.html.markdown.LEAD`). Before the
        first token; ``text`` stays the reply's own.

        Raises:
            ValueError: tokens were added already.
        """
        if self.pieces or self.text:
            raise ValueError("continue_inside comes before the reply's first token")
        self.lead = lead
        self.tok_at = array("i", [LEAD] * len(lead))

    def _add_piece(self, text: str, kind: str, ref_class: str, title: str) -> None:
        start = len(self.lead) + len(self.text)  # pieces and tok_at count the lead's characters too
        self.tok_at.extend([len(self.pieces)] * len(text))
        self.pieces.append(Piece(start, start + len(text), kind, ref_class, title))
        self.text += text

    def add_token(self, event: TokenEvent) -> None:
        ref = None if self.key is None else f"{self.key}:{self.num_tokens}"
        self.num_tokens += 1
        if event.kind is TokenKind.RESAMPLED:
            self._resampled_piece = len(self.pieces) if event.text else None
        if event.text:  # mid-character pieces and special tokens add no text
            self._add_piece(event.text, token_class(event), ref_class_of(ref) if ref else "", token_title(event))

    def add_round(self, event) -> None:
        """A round ended: with a trace, keep its rejected drafts for the token that replaced them."""
        trace = getattr(event, "trace", None)
        rejected_at = trace.rejected_index if trace is not None else None
        if rejected_at is not None and self._resampled_piece is not None:
            self.rejected[self._resampled_piece] = rejected_run_html(trace, rejected_at)
        self._resampled_piece = None

    def add_notice(self, text: str) -> None:
        self.notices.append(text)

    def finish(self, done: DoneEvent) -> None:
        """Record why generation ended (only unusual endings are shown); show final_text."""
        if done.final_text:
            self._add_piece(done.final_text, "target", "", "text held back until the reply ended")
        if done.error:
            self.set_error(done.error)
        elif done.stop_reason is StopReason.CANCELLED:
            self.status = "stopped"
        elif done.stop_reason is StopReason.CONTEXT_FULL:
            self.status = "stopped: the model's context window is full"
        elif done.stop_reason is StopReason.MAX_NEW_TOKENS:
            self.status = "stopped: max new tokens reached"
        elif done.stop_reason is StopReason.EOS and not self.text.strip():
            # (a Continue of a reply that had ended by itself, mostly: the bubble said only "…"; its
            # one token, when there is one, is the end of turn's or white space)
            self.status = NOTHING_WRITTEN

    def set_error(self, message: str) -> None:
        self.status = f"error: {message}"
        self.status_is_error = True

    def blocks(self) -> list[str | dict]:
        """The text as HTML, one item per top-level Markdown block (a string, or a code block's
        lines: :func:`specchat.ui.html.markdown.code_lines`), tokens and rejected drafts woven in; a
        block that has not changed since the last call is the same object."""
        return render_blocks(self.lead + self.text, self.tok_at, self.pieces, self.rejected, self._cache)

    @property
    def shows_text(self) -> bool:
        """Whether the bubble shows any of the text yet: a paragraph, or a code block with a line
        (a code block opened by its fence alone, or whitespace, shows none)."""
        return any(isinstance(b, str) or (isinstance(b, dict) and b.get("lines")) for b in self.blocks())

    def notices_html(self) -> str:
        return "".join(f'<div class="spec-notice">{escape_text(n)}</div>' for n in self.notices)

    def status_html(self) -> str:
        if not self.status:
            return ""
        return f'<div class="{"spec-error" if self.status_is_error else "spec-status"}">{escape_text(self.status)}</div>'

    def html(self, *, show_rejected: bool = False) -> str:
        """The bubble's body; with ``show_rejected`` the drafts each round threw away appear inline
        (struck through) where they were proposed (the class ``spec-show-rejected`` shows them)."""
        out = [self.notices_html()]
        if self.text or not self.status:
            cls = "spec-md spec-show-rejected" if show_rejected else "spec-md"
            out.append(f'<div class="{cls}">{"".join(map(block_html, self.blocks())) or "…"}</div>')
        out.append(self.status_html())
        return "".join(out)


def legend_html() -> str:
    """The color legend shown next to the chat."""
    chips = "".join(
        f'<span class="spec-legend-item"><span class="tok tok-{kind}">{html.escape(chip)}</span>'
        f'<span class="spec-legend-text">{html.escape(text)}</span></span>'
        for kind, (chip, text) in KIND_LABELS.items()
    )
    return (
        f'<div class="spec-legend">{chips}'
        '<span class="spec-legend-hint">click a token to look inside its round</span></div>'
    )


def status_html(text: str, *, error: bool = False) -> str:
    """A one-line status (italic) or error (red), escaped."""
    cls = "spec-error" if error else "spec-status"
    return f'<div class="{cls}">{html.escape(text)}</div>'


def exchange_note_html(note: str) -> str:
    """A note under a user message that was not answered (e.g. cancelled while it waited)."""
    return f'<div class="spec-note">{escape_text(note)}</div>'


def reply_summary(metrics: SpeculationMetrics) -> str:
    """A reply's own short summary: ``142 tokens · α 0.81 · 3.20 tokens/round · 1.92× vs
    target-only steps timed during this reply`` (parts not measured say so)."""
    if not metrics.rounds:
        return "no tokens"
    parts = [f"{metrics.num_committed} token{'' if metrics.num_committed == 1 else 's'}"]
    if metrics.acceptance_rate is not None:
        parts.append(f"α {metrics.acceptance_rate:.2f}")
    parts.append(f"{metrics.mean_tokens_per_round:.2f} tokens/round")
    parts.append(evidence.speedup_phrase(metrics))
    note = metrics.pause_note()
    if note:
        parts.append(note)
    return " · ".join(parts)


def table_html(rows: list[dict]) -> str:
    """The conversation table: one row per reply (see ``session.Reply.row``)."""
    if not rows:
        return '<div class="spec-table-empty">The table fills in as you chat: one row per reply.</div>'
    head = ("#", "drafter", "γ", "sampling", "tokens", "α", "tokens/round", "tok/s", "speedup", "predicted", "state")
    cells = []
    for r in rows:
        values = (
            str(r["reply"]), r["drafter"], r["gamma"], r["sampling"], str(r["tokens"]),
            _fmt(r["alpha"], ".2f"), _fmt(r["tokens_per_round"], ".2f"), _fmt(r["tokens_per_s"], ".1f"),
            _fmt(r["speedup"], ".2f", "×"), _fmt(r["speedup_predicted"], ".2f", "×"),
            r["state"],
        )
        cells.append("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in values) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    # the footnote for "*" only when a row carries one
    star = " * the drafter asked for could not be used." if any(r["drafter"].endswith(" *") for r in rows) else ""
    return (
        f'<table class="spec-table"><thead><tr>{header}</tr></thead><tbody>{"".join(cells)}</tbody></table>'
        f'<div class="spec-table-note">tok/s: committed tokens per second of decoding (prefill excluded); '
        f"speedup: measured {SPEEDUP_BASIS}; predicted: from the reply's measured α and costs.{star}</div>"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _cost_tip(drafted_per_round: float | None) -> str:
    """The c chip's tooltip: c depends on how many tokens a round drafts (the drafter menu's figure
    is at the calibration's)."""
    tip = "one drafted token's time / one target-only step, both timed in this reply"
    if drafted_per_round is None:
        return tip
    return (f"{tip}, at its {drafted_per_round:.1f} drafted a round: each round's first drafter pass also reads "
            "the tokens the last round committed, so a round that drafts few pays more a token (the drafter "
            "menu's figure is at the calibration's own γ)")


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def stats_html(metrics: SpeculationMetrics | None, *, label: str | None = None, running: bool = False,
               restored: bool = False) -> str:
    """The stats line of one reply: its label, α, tokens/round, speed, the measured speedup
    (against target-only steps timed during the reply) next to the predicted one, c. With no reply
    made here, ``restored`` says the chat's replies were restored as text (their figures are not kept)."""
    if metrics is None or not metrics.rounds:
        nothing = ("the replies above were restored as text: their figures are not kept; a new reply has its own"
                   if restored else "no reply yet: send a message")
        msg = "generating…" if running else ("no tokens: the reply ended before its first round" if label else nothing)
        head = f'<span class="stat stat-label">{html.escape(label)}</span>' if label else ""
        return f'<div class="spec-stats">{head}<span class="stat stat-muted">{msg}</span></div>'
    t1 = metrics.target_step_ms
    measured = evidence.measured_speedup(metrics)
    basis = measured.basis() + (f", target only {1000 / t1:.1f} tok/s" if t1 and measured.shown else "")
    basis += " yet" if running and measured.value is None else ""
    items = [
        ("α", _fmt(metrics.acceptance_rate, ".2f"),
         "accepted drafts / judged drafts (the accepted ones plus the first rejection of each round)"),
        ("tokens/round", _fmt(metrics.mean_tokens_per_round, ".2f"), "committed tokens per round; theory: E[N] = (1−α^(γ+1)) / (1−α)"),
        ("speed", _fmt(metrics.tokens_per_s, ".1f", " tok/s"), "committed tokens per second of decoding (prefill excluded)"),
        ("speedup", measured.short(), f"measured {basis}"),
        ("predicted", _fmt(evidence.predicted_speedup(metrics), ".2f", "×"),
         "from this reply's α and costs: Σ E[N](α, γ) · t₁ / Σ (γ·d + v(γ+1)) over its rounds"),
        ("c", _fmt(metrics.cost_ratio, ".3f"), _cost_tip(metrics.mean_num_speculative_tokens)),
    ]
    chips = "".join(
        f'<span class="stat" title="{html.escape(tip)}"><b>{html.escape(k)}</b> {html.escape(v)}</span>'
        for k, v, tip in items
    )
    head = f'<span class="stat stat-label">{html.escape(label)}</span>' if label else ""
    counts = metrics.kind_counts
    target_only = counts["target"]
    tail = (
        f'<span class="stat stat-muted">{_count(metrics.num_committed, "token")} in {_count(metrics.num_rounds, "round")}: '
        f'<span class="c-accepted">{counts["accepted"]} accepted</span>, '
        f'<span class="c-resampled">{counts["resampled"]} resampled</span>, '
        f'<span class="c-bonus">{counts["bonus"]} bonus</span>'
        + (f', <span class="c-target">{target_only} target only</span>' if target_only else "")
        + ("" if not running else " …")
        + "</span>"
    )
    note = f'<span class="stat stat-basis">speedup {html.escape(basis)}</span>'
    return f'<div class="spec-stats">{head}{chips}{note}{tail}</div>'


def _css() -> str:
    """Token kinds as a light layer over the text: a background tint (no underline), a hairline
    between tokens; tokens of the target alone stay plain text (:data:`TARGET_ONLY_LOOK`, in the
    legend too); blank tokens are tinted only when resampled or bonus (the rare kinds: there a blank
    matters, elsewhere it would tint indentation). No kind sets a text colour: code keeps Pygments'."""
    rules = []
    for kind, color in KIND_COLORS.items():
        tint = KIND_TINTS[kind]
        if kind == "target":
            rules.append(".tok-target { background: none; }")
        else:
            # the hairline is the reply's own background (light or dark theme): a gap, never a bar
            rules.append(f".tok-{kind} {{ background: {tint}; "
                         "box-shadow: inset -1px 0 0 var(--background-fill-primary, rgba(255, 255, 255, 0.7)); }")
        rules.append(f".c-{kind} {{ color: {color}; font-weight: 600; }}")
    # blank tokens (spaces, indentation) are tinted only for the rare kinds, where it matters
    rules.append(".tok-ws.tok-accepted, .tok-ws.tok-target { background: none; box-shadow: none; }")
    return "\n".join(rules)


# static/inspector.css: its struck-through rejected drafts are KIND_COLORS["resampled"] (#e8590c;
# tests/test_wiring.py checks the two agree)
INSPECTOR_CSS = "\n" + static_text("inspector.css")
"""CSS of the inside-the-rounds views (:mod:`specchat.ui.html.inspector`); part of :data:`CSS`."""


LEDGER_CSS = "\n" + static_text("ledger.css")
"""CSS of the ledger (:mod:`specchat.ui.html.ledger`); part of :data:`CSS`."""


CSS = (
    "\n" + static_text("page.css")  # the page's own rules; then the token kinds' colours
    + _css()
    + INSPECTOR_CSS
    + LEDGER_CSS
    + TRANSCRIPT_CSS
    + code_css()
)
"""CSS for the app; pass it to ``launch(css=...)`` (Gradio 6)."""
