"""Token events → HTML for the chat, the legend and the stats line. No gradio import.

Every piece of model or user text goes through :func:`escape_text` (``html.escape`` plus
character references for newlines and tabs) before it reaches the page: the Chatbot's
sanitizer keeps ``style=`` attributes (even ``position:fixed``), so escaping is the only safe
way to show model output. The chat is rendered with ``render_markdown=False`` and
``white-space: pre-wrap`` (see :data:`CSS`), so the text shows exactly as the model wrote it:
fences, indentation, tabs, ``*``, ``#`` and ``_`` stay literal.

Colors are defined once here (:data:`KIND_COLORS`) and reused by :mod:`specchat.charts`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from specchat.events import DoneEvent, StopReason, TokenEvent, TokenKind
from specchat.metrics import SpeculationMetrics

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
    "target": ("target only", "round drafted nothing"),
}
# Series that are not token kinds: measured numbers, predictions, the target-only baseline.
MEASURED_COLOR = "#343a40"
PREDICTED_COLOR = "#1098ad"
BASELINE_COLOR = "#868e96"


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
    """CSS kind of a token: its TokenKind value, or "target" for a round that drafted nothing."""
    return "target" if event.num_drafted == 0 else event.kind.value


def token_title(event: TokenEvent) -> str:
    """Hover text: kind, target probability p and draft probability q (plain text)."""
    kind = token_class(event)
    parts = [f"{kind} · p={event.target_prob:.2f}"]
    if event.draft_prob is not None:
        parts.append(f"q={event.draft_prob:.2f}")
    if event.kind is TokenKind.RESAMPLED and event.rejected_target_prob is not None:
        rejected = f"rejected draft: p={event.rejected_target_prob:.2f}"
        if event.rejected_draft_prob is not None:
            rejected += f" q={event.rejected_draft_prob:.2f}"
        parts.append(f"({rejected})")
    return " ".join(parts)


def token_span(event: TokenEvent) -> str:
    """One committed token as ``<span class="tok tok-KIND" title="…">escaped text</span>``.

    Returns "" for a token that adds no text (mid-character pieces, special tokens).
    Newlines stay in the text (as ``&#10;``, see :func:`escape_text`); the reply container
    shows them with ``white-space: pre-wrap``.
    """
    if not event.text:
        return ""
    return (
        f'<span class="tok tok-{token_class(event)}" title="{html.escape(token_title(event))}">'
        f"{escape_text(event.text)}</span>"
    )


def render_user(text: str) -> str:
    """A user message, escaped and shown verbatim."""
    return f'<div class="spec-text">{escape_text(text)}</div>'


@dataclass
class ReplyRenderer:
    """Accumulates one streamed reply: token spans for the chat and the plain text for history.

    ``text`` is what the model wrote (what goes into the plain-text history); ``html()`` is the
    chat bubble: notices, the colored tokens, and a status line when stopped or failed.
    """

    spans: list[str] = field(default_factory=list)
    text: str = ""
    notices: list[str] = field(default_factory=list)
    status: str | None = None  # "stopped", "error: …", or a stop reason worth showing
    status_is_error: bool = False

    def add_token(self, event: TokenEvent) -> None:
        span = token_span(event)
        if span:
            self.spans.append(span)
            self.text += event.text

    def add_notice(self, text: str) -> None:
        self.notices.append(text)

    def finish(self, done: DoneEvent) -> None:
        """Record why generation ended (only unusual endings are shown); show final_text."""
        if done.final_text:
            self.spans.append(f'<span class="tok tok-target">{escape_text(done.final_text)}</span>')
            self.text += done.final_text
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

    def html(self) -> str:
        out = [f'<div class="spec-notice">{escape_text(n)}</div>' for n in self.notices]
        body = "".join(self.spans) if self.spans else ""
        if body or not self.status:
            out.append(f'<div class="spec-text spec-reply">{body or "…"}</div>')
        if self.status:
            cls = "spec-error" if self.status_is_error else "spec-status"
            out.append(f'<div class="{cls}">{escape_text(self.status)}</div>')
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
        '<span class="spec-legend-hint">hover a token for p (target) and q (drafter)</span></div>'
    )


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def stats_html(
    metrics: SpeculationMetrics | None,
    *,
    baseline_tokens_per_s: float | None = None,
    running: bool = False,
) -> str:
    """The one-line stats: α, tokens/s, baseline, measured speedup, predicted S(γ), tokens/round, c."""
    if metrics is None or not metrics.num_tokens:
        base = _fmt(baseline_tokens_per_s, ".1f", " tok/s")
        msg = "generating…" if running else "no generation yet"
        return (
            f'<div class="spec-stats"><span class="stat stat-muted">{msg}</span>'
            f'<span class="stat"><b>baseline</b> {base}</span></div>'
        )
    gamma = metrics.mean_num_speculative_tokens
    s_label = f"S({max(1, round(gamma))})" if gamma is not None else "S(γ)"
    items = [
        ("α", _fmt(metrics.acceptance_rate, ".2f"), "accepted drafts / judged drafts (the accepted ones plus the first rejection of each round)"),
        ("speed", _fmt(metrics.tokens_per_s, ".1f", " tok/s"), "committed tokens per second of decoding"),
        ("baseline", _fmt(metrics.baseline_tokens_per_s, ".1f", " tok/s"), "target-only decoding, measured at start"),
        ("speedup", _fmt(metrics.measured_speedup, ".2f", "×"), "measured: speed / baseline"),
        (f"predicted {s_label}", _fmt(metrics.predicted_speedup, ".2f", "×"), "(1−α^(γ+1)) / ((1−α)(γc+1))"),
        ("tokens/round", _fmt(metrics.mean_tokens_per_round, ".2f"), "E[N] = (1−α^(γ+1)) / (1−α)"),
        ("c", _fmt(metrics.cost_ratio, ".3f"), "drafter step time / target step time"),
    ]
    chips = "".join(
        f'<span class="stat" title="{html.escape(tip)}"><b>{html.escape(k)}</b> {html.escape(v)}</span>'
        for k, v, tip in items
    )
    counts = metrics.kind_counts
    target_only = sum(1 for r in metrics.rounds if r.num_drafted == 0)
    tail = (
        f'<span class="stat stat-muted">{metrics.num_tokens} tokens in {metrics.num_rounds} rounds: '
        f'<span class="c-accepted">{counts["accepted"]} accepted</span>, '
        f'<span class="c-resampled">{counts["resampled"]} resampled</span>, '
        f'<span class="c-bonus">{counts["bonus"] - target_only} bonus</span>'
        + (f', <span class="c-target">{target_only} target only</span>' if target_only else "")
        + ("" if not running else " …")
        + "</span>"
    )
    return f'<div class="spec-stats">{chips}{tail}</div>'


def _css() -> str:
    rules = []
    for kind, color in KIND_COLORS.items():
        tint = KIND_TINTS[kind]
        if kind == "target":
            rules.append(f".tok-target {{ background: {tint}; }}")
        else:
            rules.append(
                # underline in the solid color; a hairline at the right edge separates tokens
                f".tok-{kind} {{ background: {tint}; "
                f"box-shadow: inset 0 -2px 0 {color}, inset -1px 0 0 rgba(255, 255, 255, 0.75); }}"
            )
        rules.append(f".c-{kind} {{ color: {color}; font-weight: 600; }}")
    return "\n".join(rules)


CSS = (
    """
.spec-text { white-space: pre-wrap; overflow-wrap: anywhere; tab-size: 4;
  font-family: var(--font-mono); font-size: 0.86rem; line-height: 1.55; }
.tok { border-radius: 2px; }
.spec-legend .tok { padding: 0 4px; font-family: var(--font-mono); font-size: 0.8rem; }
.tok-target { outline: 1px dashed rgba(134, 142, 150, 0.7); outline-offset: -1px; }
.spec-reply .tok-target { outline: none; }
.spec-notice { font-style: italic; opacity: 0.75; font-size: 0.85rem; margin-bottom: 4px; }
.spec-loading { border: 1px solid #d0d7de; border-radius: 8px; padding: 8px 12px; margin: 4px 0; }
.spec-loading-bar { height: 8px; background: #eaeef2; border-radius: 4px; margin: 6px 0 4px; overflow: hidden; }
.spec-loading-bar > div { height: 100%; background: #2f9e44; transition: width 0.4s; }
.spec-loading-detail { font-size: 0.8rem; opacity: 0.75; font-family: ui-monospace, monospace; }
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
.spec-subtitle { opacity: 0.8; margin-top: -6px; }
.spec-plot .modebar-container { display: none !important; }
"""
    + _css()
)
"""CSS for the app; pass it to ``launch(css=...)`` (Gradio 6)."""
