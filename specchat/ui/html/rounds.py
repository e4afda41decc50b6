"""A reply's rounds, indexed for the round views, and the small HTML pieces they share. No gradio.

:class:`ReplyRounds` indexes a reply's events (live, or read back from a trace file) for the
token inspector (:mod:`specchat.ui.html.inspector`), the proof view (:mod:`specchat.ui.html.proof`), the
round timeline (:mod:`specchat.ui.html.timeline`) and the race (:mod:`specchat.ui.html.race`); the
helpers below draw what they have in common: a token's label, a probability, a token chip and
the colours of p and q.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from specchat.analysis.trace import RoundTrace
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent
from specchat.ui.html.render import KIND_COLORS, ref_class_of

TARGET_COLOR = "#1c7ed6"  # p bars
DRAFT_COLOR = "#f08c00"  # q bars
RESIDUAL_COLOR = KIND_COLORS["resampled"]
MAX_BAR_ROWS = 10


@dataclass
class ReplyRounds:
    """A reply's tokens and rounds, indexed for the views.

    Attributes:
        tokens: the reply's TokenEvents, in order (index I of the class ``tref-R-I``).
        rounds: the RoundEvents by round index.
        first_token: round index → index in ``tokens`` of its first committed token.
        done: the DoneEvent, once there is one.
    """

    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: dict[int, RoundEvent] = field(default_factory=dict)
    first_token: dict[int, int] = field(default_factory=dict)
    done: DoneEvent | None = None

    @classmethod
    def of(cls, events: list[Any]) -> ReplyRounds:
        out = cls()
        for e in events:
            out.add(e)
        return out

    def add(self, e: Any) -> None:
        if isinstance(e, TokenEvent):
            self.first_token.setdefault(e.round_index, len(self.tokens))
            self.tokens.append(e)
        elif isinstance(e, RoundEvent):
            self.rounds[e.round_index] = e
        elif isinstance(e, DoneEvent):
            self.done = e

    @property
    def traced(self) -> bool:
        return any(r.trace is not None for r in self.rounds.values())


# ---- small pieces ----------------------------------------------------------------------------------
def token_label(s: str) -> str:
    """A token's text for a label: escaped, with whitespace made visible."""
    shown = s.replace("\n", "↵").replace("\t", "⇥")
    if shown.strip() == "":
        shown = shown.replace(" ", "␣") or "∅"
    return html.escape(shown)


def prob_label(x: float | None) -> str:
    """A probability for a label: two decimals, in scientific notation below 0.01, "–" when unknown."""
    if x is None:
        return "–"
    if x == 0:
        return "0"
    if x >= 0.01:
        return f"{x:.2f}"
    return f"{x:.1e}"


def token_chip(trace: RoundTrace, token_id: int, cls: str, *, ref: str | None = None, title: str = "") -> str:
    """A token of the round as a chip of class ``cls``; ``ref`` (``"R:I"``) makes a click select it."""
    ref_class = f" {ref_class_of(ref)}" if ref else ""
    tip = f' title="{html.escape(title)}"' if title else ""
    return f'<span class="tok {cls}{ref_class}"{tip}>{token_label(trace.token_texts.get(token_id, ""))}</span>'
