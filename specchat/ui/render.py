"""Token events → HTML for the chat, the legend and the stats line. No gradio import.

Nothing a model or a user wrote reaches the page unescaped: user messages go through
:func:`escape_text` and are shown verbatim (``white-space: pre-wrap``); a reply is rendered as
Markdown with raw HTML off and each text run escaped again when its token's span is woven in
(:mod:`specchat.ui.markdown`). The page's transcript is a ``gr.HTML``, which Gradio does not
sanitise at all, so this escaping is the only guard.

Colors are defined once here (:data:`KIND_COLORS`) and reused by :mod:`specchat.ui.charts`.
"""

from __future__ import annotations

import html
from array import array
from dataclasses import dataclass, field

from specchat.core import evidence
from specchat.core.events import DoneEvent, StopReason, TokenEvent, TokenKind
from specchat.core.metrics import SpeculationMetrics
from specchat.ui.markdown import Piece, block_html, code_css, render_blocks
from specchat.ui.transcript import CSS as TRANSCRIPT_CSS

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
KIND_LABELS: dict[str, tuple[str, str]] = {  # kind: (chip text, explanation)
    "accepted": ("accepted", "draft token the target kept"),
    "resampled": ("resampled", "drawn from the residual after a rejection"),
    "bonus": ("bonus", "extra target token after all drafts were accepted"),
    "target": ("target only", "plain text: a round that drafted nothing (the target alone)"),
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


def render_user(text: str) -> str:
    """A user message, escaped and shown verbatim."""
    return f'<div class="spec-text">{escape_text(text)}</div>'


@dataclass
class ReplyRenderer:
    """Accumulates one streamed reply: its text (what goes into the plain-text history) and each
    token's place in it, rendered as Markdown with the tokens woven in (:mod:`specchat.ui.markdown`).

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
    _resampled_piece: int | None = None
    _cache: dict = field(default_factory=dict)

    def _add_piece(self, text: str, kind: str, ref_class: str, title: str) -> None:
        start = len(self.text)
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

    def set_error(self, message: str) -> None:
        self.status = f"error: {message}"
        self.status_is_error = True

    def blocks(self) -> list[str | dict]:
        """The text as HTML, one item per top-level Markdown block (a string, or a code block's
        lines: :func:`specchat.ui.markdown.code_lines`), tokens and rejected drafts woven in; a
        block that has not changed since the last call is the same object."""
        return render_blocks(self.text, self.tok_at, self.pieces, self.rejected, self._cache)

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
    parts = [f"{metrics.num_committed} tokens"]
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
    head = ("#", "drafter", "γ", "sampling", "tokens", "α", "tokens/round", "speedup", "predicted", "state")
    cells = []
    for r in rows:
        values = (
            str(r["reply"]), r["drafter"], r["gamma"], r["sampling"], str(r["tokens"]),
            _fmt(r["alpha"], ".2f"), _fmt(r["tokens_per_round"], ".2f"),
            _fmt(r["speedup"], ".2f", "×"), _fmt(r["speedup_predicted"], ".2f", "×"),
            r["state"],
        )
        cells.append("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in values) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    # the footnote for "*" only when a row carries one
    star = " * the drafter asked for could not be used." if any(r["drafter"].endswith(" *") for r in rows) else ""
    return (
        f'<table class="spec-table"><thead><tr>{header}</tr></thead><tbody>{"".join(cells)}</tbody></table>'
        f'<div class="spec-table-note">speedup: measured {SPEEDUP_BASIS}; predicted: from the '
        f"reply's measured α and costs.{star}</div>"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def stats_html(metrics: SpeculationMetrics | None, *, label: str | None = None, running: bool = False) -> str:
    """The stats line of one reply: its label, α, tokens/round, speed, the measured speedup
    (against target-only steps timed during the reply) next to the predicted one, c."""
    if metrics is None or not metrics.rounds:
        msg = "generating…" if running else ("no tokens: the reply ended before its first round" if label
                                              else "no reply yet: send a message")
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
        ("c", _fmt(metrics.cost_ratio, ".3f"), "one drafted token's time / one target-only step, both timed in this reply"),
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
    between tokens; tokens of the target alone stay plain text; blank tokens are tinted only when
    resampled or bonus (the rare kinds: there a blank matters, elsewhere it would tint indentation)."""
    rules = []
    for kind, color in KIND_COLORS.items():
        tint = KIND_TINTS[kind]
        if kind == "target":
            rules.append(".tok-target { background: none; }")
            rules.append(f".spec-legend .tok-target {{ box-shadow: inset 0 0 0 1px {color}; }}")
        else:
            rules.append(f".tok-{kind} {{ background: {tint}; box-shadow: inset -1px 0 0 rgba(255, 255, 255, 0.7); }}")
        rules.append(f".c-{kind} {{ color: {color}; font-weight: 600; }}")
    # blank tokens (spaces, indentation) are tinted only for the rare kinds, where it matters
    rules.append(".tok-ws.tok-accepted, .tok-ws.tok-target { background: none; box-shadow: none; }")
    return "\n".join(rules)


INSPECTOR_CSS = f"""
.spec-inspector, .spec-timeline, .spec-race {{ font-size: 0.84rem; }}
.spec-muted {{ opacity: 0.7; font-size: 0.8rem; }}
.spec-sub {{ font-size: 0.78rem; opacity: 0.8; margin: 6px 0 2px; }}
.spec-insp-head {{ font-weight: 600; margin-bottom: 6px; }}
.spec-insp-head .tok, .spec-round-draft .tok {{ font-family: var(--font-mono); padding: 0 3px; }}
[class*="tref-"], [class*="rref-"] {{ cursor: pointer; }}
.tok-rejected {{ text-decoration: line-through; color: {KIND_COLORS["resampled"]}; opacity: 0.8; }}
.tok-unjudged {{ color: #adb5bd; text-decoration: line-through dotted; }}
.spec-rejected-run {{ font-size: 0.92em; }}
.spec-sel {{ outline: 2px solid #1c7ed6; outline-offset: 1px; }}
.spec-arrow {{ opacity: 0.6; margin: 0 4px; }}
.spec-round-draft {{ margin-bottom: 6px; }}
.spec-pq {{ display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }}
.spec-bars {{ border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; border: none !important; }}
.spec-bars td {{ padding: 1px 4px; border: none !important; background: transparent; }}
.spec-bars tr {{ border: none !important; background: transparent !important; }}
.spec-residual .spec-bars {{ max-width: 60%; }}
.spec-proof {{ margin-top: 8px; padding-top: 6px; border-top: 1px dashed #ced4da; }}
.spec-formula {{ font-family: var(--font-mono); font-size: 0.8rem; margin: 4px 0; }}
.spec-proof-bars th {{ font-size: 0.72rem; font-weight: 600; text-align: left; padding: 1px 4px;
  border: none !important; background: transparent !important; }}
.spec-proof-bars th span {{ font-weight: 400; opacity: 0.75; }}
.spec-proof-bars .spec-bar-cell {{ width: 28%; }}
.spec-stack {{ display: flex; height: 12px; }}
.spec-stack div {{ height: 12px; }}
.spec-sumwrap {{ position: relative; }}
.spec-pline {{ position: absolute; left: 0; top: 0; height: 12px; box-sizing: border-box;
  border: 1.5px solid #212529; border-radius: 2px; pointer-events: none; }}
.spec-bar-label {{ font-family: var(--font-mono); font-size: 0.78rem; white-space: pre; max-width: 8em; overflow: hidden; }}
.spec-bar-cell {{ position: relative; width: 40%; }}
.spec-bar {{ height: 12px; border-radius: 2px; min-width: 1px; }}
.spec-bar-val {{ position: absolute; right: 4px; top: 0; font-size: 0.7rem; opacity: 0.9;
  text-shadow: 0 0 3px var(--background-fill-primary, #fff), 0 0 3px var(--background-fill-primary, #fff); }}
.spec-bar-mark td {{ background: rgba(28, 126, 214, 0.12); font-weight: 600; }}
.spec-key {{ display: inline-block; width: 10px; height: 10px; border-radius: 2px; vertical-align: middle; }}
.spec-legend-small {{ font-size: 0.75rem; opacity: 0.85; margin: 2px 0; }}
.spec-decision {{ margin: 6px 0; }}
.spec-uline {{ position: relative; height: 14px; background: rgba(232, 89, 12, 0.35); border-radius: 3px; margin: 18px 0 2px; }}
.spec-ukeep {{ height: 100%; background: rgba(47, 158, 68, 0.6); border-radius: 3px 0 0 3px; }}
.spec-umark {{ position: absolute; top: -5px; width: 2px; height: 24px; background: #212529; }}
.spec-umark span {{ position: absolute; top: -14px; left: -3px; font-size: 0.7rem; font-weight: 700; }}
.spec-uaxis {{ display: flex; justify-content: space-between; font-size: 0.7rem; opacity: 0.7; }}
.spec-source-text {{ font-size: 0.78rem; }}
mark.spec-match {{ background: rgba(250, 176, 5, 0.55); }}
mark.spec-copy {{ background: rgba(21, 170, 191, 0.45); }}
.spec-tl-summary {{ font-weight: 600; margin-bottom: 2px; }}
.spec-tl-rows {{ max-height: 340px; overflow-y: auto; }}
.spec-tl-row {{ display: grid; grid-template-columns: 2.5em minmax(120px, 1fr) 4em 9em minmax(80px, 1.2fr); gap: 6px;
  align-items: center; padding: 1px 0; border-bottom: 1px solid rgba(134, 142, 150, 0.15); }}
.spec-tl-row:hover {{ background: rgba(28, 126, 214, 0.06); }}
.spec-tl-sel {{ background: rgba(28, 126, 214, 0.14) !important; }}
.spec-tl-k, .spec-tl-ms {{ font-variant-numeric: tabular-nums; opacity: 0.75; font-size: 0.75rem; text-align: right; }}
.spec-tl-bar {{ display: flex; height: 12px; gap: 1px; }}
.spec-seg {{ height: 100%; border-radius: 1px; }}
.spec-tl-end {{ font-size: 0.72rem; opacity: 0.8; white-space: nowrap; }}
.spec-tl-toks {{ font-family: var(--font-mono); font-size: 0.72rem; white-space: pre; overflow: hidden; text-overflow: ellipsis; }}
.spec-lanes {{ display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }}
.spec-lane {{ border: 1px solid rgba(134, 142, 150, 0.35); border-radius: 6px; padding: 6px 8px; min-height: 120px; }}
.spec-lane-head {{ margin-bottom: 4px; }}
.spec-lane-text {{ max-height: 300px; overflow-y: auto; }}
.spec-race-verdict {{ margin-top: 6px; }}
"""
"""CSS of the inside-the-rounds views (:mod:`specchat.ui.inspector`); part of :data:`CSS`."""


LEDGER_CSS = """
.spec-ledger { font-size: 0.85rem; font-variant-numeric: tabular-nums; }
.spec-ledger-title { font-weight: 600; margin-bottom: 2px; }
.spec-ledger-headline { font-size: 0.95rem; margin: 2px 0 6px; }
.spec-ledger-table { border-collapse: collapse; width: 100%; margin-bottom: 4px; border: none !important; }
.spec-ledger-table th, .spec-ledger-table td { padding: 2px 6px; border: none !important;
  border-bottom: 1px solid rgba(134, 142, 150, 0.25) !important; text-align: right; background: transparent !important; }
.spec-ledger-table th { font-weight: 600; vertical-align: bottom; }
.spec-ledger-table th:first-child, .spec-ledger-table td:first-child { text-align: left; }
.spec-ledger-table td:last-child, .spec-ledger-table th:last-child { text-align: left; }
.spec-tag { font-size: 0.66rem; border-radius: 3px; padding: 0 3px; margin-left: 2px; vertical-align: 1px;
  text-transform: uppercase; letter-spacing: 0.02em; }
.spec-tag-counted { background: #e7f5ff; color: #1864ab; }
.spec-tag-measured { background: #f1f3f5; color: #343a40; }
.spec-tag-predicted { background: #e6fcf5; color: #087f5b; }
.spec-ledger-limits, .spec-ledger-worth { margin-top: 4px; }
.spec-warn { color: #c92a2a; font-weight: 600; }
"""
"""CSS of the ledger (:mod:`specchat.ui.ledger_view`); part of :data:`CSS`."""


CSS = (
    """
.spec-text { white-space: pre-wrap; overflow-wrap: anywhere; tab-size: 4;
  font-family: var(--font-mono); font-size: 0.86rem; line-height: 1.55; }
.tok { border-radius: 2px; }
.spec-legend .tok { padding: 0 4px; font-family: var(--font-mono); font-size: 0.8rem; }
.spec-label { font-size: 0.75rem; opacity: 0.7; margin-bottom: 4px; font-variant-numeric: tabular-nums; }
.spec-summary { font-size: 0.75rem; opacity: 0.75; margin-top: 6px; border-top: 1px solid rgba(134, 142, 150, 0.3);
  padding-top: 3px; font-variant-numeric: tabular-nums; }
.spec-note { font-size: 0.78rem; font-style: italic; opacity: 0.75; margin-top: 4px; }
.spec-table { border-collapse: collapse; font-size: 0.8rem; font-variant-numeric: tabular-nums; width: 100%; }
.spec-table th, .spec-table td { padding: 2px 6px; border-bottom: 1px solid rgba(134, 142, 150, 0.25); text-align: right;
  white-space: nowrap; }
.spec-table th:nth-child(2), .spec-table td:nth-child(2), .spec-table th:nth-child(4), .spec-table td:nth-child(4) { text-align: left; }
#spec-explain strong { font-weight: 600; }  /* 700 has no local Source Sans face: a larger fallback font drew it */
#spec-explain th, #spec-explain td:first-child { white-space: nowrap; }
.spec-table-note, .spec-table-empty { font-size: 0.75rem; opacity: 0.7; margin-top: 4px; }
.spec-notice { font-style: italic; opacity: 0.75; font-size: 0.85rem; margin-bottom: 4px; }
.spec-loading { border: 1px solid #d0d7de; border-radius: 8px; padding: 8px 12px; margin: 4px 0; }
.spec-loading-bar { height: 8px; background: #eaeef2; border-radius: 4px; margin: 6px 0 4px; overflow: hidden; }
.spec-loading-bar > div { height: 100%; background: #2f9e44; transition: width 0.4s; }
.spec-loading-detail { font-size: 0.8rem; opacity: 0.75; font-family: ui-monospace, monospace; }
.spec-unqueue { font-size: 0.75rem; padding: 0 8px; margin-left: 6px; border-radius: 4px; cursor: pointer;
  border: 1px solid var(--border-color-primary, #d0d7de); background: transparent; font-style: normal; }
.spec-prefill progress { width: 100%; height: 8px; }
.spec-status { font-style: italic; opacity: 0.75; font-size: 0.85rem; margin-top: 4px; overflow-wrap: anywhere; }
.spec-error { color: #c92a2a; font-weight: 600; font-size: 0.9rem; margin-top: 4px; overflow-wrap: anywhere; }
.spec-legend { display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: center;
  font-size: 0.82rem; padding: 2px 2px 6px; }
.spec-legend-item { display: inline-flex; gap: 6px; align-items: center; }
.spec-legend-text, .spec-legend-hint { opacity: 0.75; }
.spec-legend-hint { margin-left: auto; font-style: italic; }
.spec-stats { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 0.86rem;
  font-variant-numeric: tabular-nums; padding: 4px 2px; }
.spec-stats .stat b { font-weight: 600; opacity: 0.7; margin-right: 3px; }
.spec-stats .stat-muted { opacity: 0.8; }
.spec-stats .stat-label { font-weight: 600; flex-basis: 100%; }
.spec-stats .stat-basis { opacity: 0.7; font-style: italic; }
.spec-subtitle { opacity: 0.8; margin-top: -6px; }
.spec-plot .modebar-container { display: none !important; }
/* toasts at the bottom right: at the top they covered the drafter menu */
.toast-wrap { top: auto !important; bottom: var(--size-4, 16px) !important; }
"""
    + _css()
    + INSPECTOR_CSS
    + LEDGER_CSS
    + TRANSCRIPT_CSS
    + code_css()
)
"""CSS for the app; pass it to ``launch(css=...)`` (Gradio 6)."""
