"""The race, as HTML: the target alone against the drafter, replayed at their measured speeds. No gradio.

Two :class:`RaceLane` s record the tokens of the two runs and when each appeared;
:func:`race_html` shows what each had written at a moment of the replay, and
:func:`race_verdict` the speed ratio and, at temperature 0, whether the texts are the same.
The runs themselves are :class:`specchat.ui.session.race.SessionRace`'s.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from specchat.core.events import DoneEvent, RoundEvent, TokenEvent
from specchat.ui.html.render import escape_text
from specchat.ui.html.rounds import ReplyRounds


@dataclass
class RaceLane:
    """One side of a race: a generation's tokens with the time each appeared (ms from the
    message: prefill, then the end of its round)."""

    name: str
    tokens: list[TokenEvent] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)
    rounds: ReplyRounds = field(default_factory=ReplyRounds)
    done: DoneEvent | None = None
    _pending: list[TokenEvent] = field(default_factory=list)

    def add(self, e: Any) -> None:
        self.rounds.add(e)
        if isinstance(e, TokenEvent):
            self._pending.append(e)
        elif isinstance(e, RoundEvent):  # a round's tokens appear when it ends
            self.tokens.extend(self._pending)
            self.times_ms.extend([e.elapsed_ms] * len(self._pending))  # the prefill is added at the end
            self._pending = []
        elif isinstance(e, DoneEvent):
            self.done = e
            self.times_ms = [t + e.prefill_ms for t in self.times_ms]

    @property
    def total_ms(self) -> float:
        return 0.0 if self.done is None else self.done.prefill_ms + self.done.decode_ms

    def text_until(self, t_ms: float) -> tuple[str, int]:
        n = sum(1 for t in self.times_ms if t <= t_ms)
        return "".join(
            f'<span class="tok tok-{e.kind.value}">{escape_text(e.text)}</span>'
            for e in self.tokens[:n] if e.text
        ), n


def race_verdict(base: RaceLane, spec: RaceLane, *, greedy: bool) -> str:
    """What the race shows: the speed ratio, and at temperature 0 whether the texts are the
    same (else the first difference and the target's top-two logit gap there)."""
    if base.done is None or spec.done is None:
        return ""
    ratio = base.total_ms / spec.total_ms if spec.total_ms > 0 else float("nan")
    parts = [f"<b>{spec.name}</b> finished in {spec.total_ms / 1000:.1f} s, <b>{base.name}</b> in "
             f"{base.total_ms / 1000:.1f} s: <b>{ratio:.2f}×</b> "
             + ("faster" if ratio >= 1 else "(slower: this drafter does not pay on this machine and prompt)")]
    a, b = list(base.done.token_ids), list(spec.done.token_ids)
    if not greedy:
        parts.append("At temperature &gt; 0 the two replies are different samples of the same distribution: "
                     "speculation changes which random draws are used, never the distribution.")
    elif a == b:
        parts.append(f"Identical text, token for token ({len(a)} tokens): at temperature 0 speculation never "
                     "changes the answer.")
    else:
        i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        if i == min(len(a), len(b)):
            parts.append(f"The same text up to token {i}, where one of the runs stopped (a stop or the token budget).")
        else:
            gap = _logit_gap(base, i)
            if gap is None:
                gap_text = ""
            elif gap < 1e-3:
                gap_text = (" There the target's two most likely tokens were tied (logit gap below 0.001, e.g. equal "
                            "bf16 logits): which one is the argmax then depends on floating-point rounding, which "
                            "differs between a one-token step and a multi-token verify pass.")
            else:
                gap_text = (f" There the target's two most likely tokens were {gap:.3f} apart in logits: a near-tie "
                            "that the different batch shapes of the two runs can flip (floating-point rounding).")
            parts.append(f"The texts differ from token {i + 1} on.{gap_text} Speculation is exact in exact "
                         "arithmetic; the audit (<code>python -m specchat audit</code>) tests it statistically.")
    return "<br>".join(parts)


def _logit_gap(lane: RaceLane, i: int) -> float | None:
    """ln(p1/p2) of the target's raw top two at the reply's i-th token, from the trace."""
    if i >= len(lane.rounds.tokens):
        return None
    tok = lane.rounds.tokens[i]
    rnd = lane.rounds.rounds.get(tok.round_index)
    if rnd is None or rnd.trace is None or tok.position >= len(rnd.trace.positions):
        return None
    top = rnd.trace.positions[tok.position].target_top_raw
    if len(top) < 2 or top[1][1] <= 0:
        return None
    return math.log(top[0][1] / top[1][1])


def race_html(base: RaceLane, spec: RaceLane, t_ms: float | None, *, status: str = "", verdict: str = "") -> str:
    """The two lanes side by side, each showing what it had written ``t_ms`` after the message
    (None: everything), with a clock and the final times."""
    lanes = []
    for lane in (base, spec):
        shown_t = lane.total_ms if t_ms is None else t_ms
        text, n = lane.text_until(shown_t)
        finished = lane.done is not None and (t_ms is None or t_ms >= lane.total_ms)
        clock = (f"done in {lane.total_ms / 1000:.1f} s · {len(lane.tokens)} tokens" if finished
                 else f"{min(shown_t, lane.total_ms) / 1000:.1f} s · {n} tokens")
        lanes.append(
            f'<div class="spec-lane"><div class="spec-lane-head"><b>{html.escape(lane.name)}</b> '
            f'<span class="spec-muted">{clock}</span></div><div class="spec-text spec-lane-text">{text}</div></div>'
        )
    status_div = f'<div class="spec-muted">{status}</div>' if status else ""
    verdict_div = f'<div class="spec-race-verdict">{verdict}</div>' if verdict else ""
    return f'<div class="spec-race">{status_div}<div class="spec-lanes">{"".join(lanes)}</div>{verdict_div}</div>'
