"""What a round costs in target steps, each drafting round against the target-only steps timed
next to it: the adaptive controller's cost model (:mod:`specchat.core.adaptive`).

A laptop's load changes all day (a browser, an editor, a build), and a slower moment slows every
pass alike. Milliseconds timed at different moments do not compare (a probe timed during a busy
second against a target step timed in a quiet one once read "predicted at best 0.31×" at α 1.00),
but their ratios do. So:

* each drafting round's time apart from drafting, ``rest = round_ms − draft_ms`` (the verify pass
  over n = γ + 1 positions and the bookkeeping), is divided by t₁ *near it*: the median of the
  :data:`NEAR_STEPS` target-only steps closest to it in round order (before or after, so a round
  timed before any target step is normalised once one arrives): ρ = v(n)/t₁;
* each drafting round's drafter time per drafted token is divided the same way: c = d/t₁, kept per
  drafting source (the hybrid's lookup costs nothing, its model does);
* every estimate is a **median** of the latest :data:`COST_WINDOW` ratios: one round slowed by a
  busy moment, or the first pass of a new batch shape, moves nothing;
* at a reply's start only the latest :data:`HISTORY_SAMPLES` ratios of earlier replies stay, per n
  and per source: a prior, used until the reply has :data:`OWN_SAMPLES` drafting rounds of its own
  (for c: of that source), which then replace all of it (the reply's own rounds are the truth, one
  round alone is not; keeping earlier replies' samples of an n the reply has not drafted would let
  a busy moment's steep cost of a long draft keep the controller from ever trying it again).

v(n)/t₁ (:meth:`RelativeCosts.verify_cost`) is a straight line through the medians of the n
measured (weighted least squares, slope >= 0), joined to (1, 1) below them (a target step is a
pass over one position), and explored above them one n at a time: the next n up is priced as
nearly flat, the ones beyond it by the measured slope. Measured on this project's 2-core CPU on
llama.cpp, the curve is far from a line through (1, 1): about 2.1 target steps at 2 positions,
2.05 at 3 and 4 at 13 (batched kernels start at 2); with transformers on a CPU a pass over 9
positions can cost 9 steps. Each is found by measuring, not assumed.

Pure Python: no tensors. Units: target steps (ratios), milliseconds where named ``_ms``.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from specchat.core.events import RoundEvent

COST_WINDOW = 16
NEAR_STEPS = 3
HISTORY_SAMPLES = 2
OWN_SAMPLES = 2
REPLY_GAP = 1 << 20  # replies apart in round order: the seconds (or hours) between them are not timed
# The first rounds ever timed are left out: the first forward passes of a process, or of a new
# batch shape, are slower (the engine's timing-round schedule skips them for the same reason).
WARMUP_ROUNDS = 2
# One n past the largest measured, a pass is priced at most this many target steps per position
# more (the textbook's flat verify cost, give or take): the next γ up is tried once, then measured.
EXPLORE_SLOPE = 0.1


@dataclass
class RelativeCosts:
    """Running estimates of t₁ (ms), c = d/t₁ and ρ(n) = v(n)/t₁, robust to load and outliers.

    Feed every round once with :meth:`add` (a round that drafted nothing is a target step); call
    :meth:`new_reply` when a reply starts. Shared by the controllers of one drafter's sources.
    """

    _seq: int = 0  # rounds added so far (the order that "near" refers to)
    _reply: int = 0  # new_reply() calls
    _skip: int = WARMUP_ROUNDS
    _steps: deque = field(default_factory=lambda: deque(maxlen=2 * COST_WINDOW))  # (seq, ms)
    _verify: dict[int, deque] = field(default_factory=dict)  # n -> (seq, rest ms, reply)
    _draft: dict[str, deque] = field(default_factory=dict)  # source -> (seq, ms per drafted token, reply)
    _memo: dict = field(default_factory=dict)

    # -- input -----------------------------------------------------------------------------
    def add(self, event: RoundEvent, *, source: str = "", draft: bool = True) -> None:
        """One round: no drafts → a t₁ sample; else a v(num_drafted + 1) sample and, unless
        ``draft`` is False (a probe whose drafting includes catching up), a d sample of
        ``source``. Timings that are not finite, or a round with no time apart from drafting,
        are ignored."""
        self._seq += 1
        rest = event.round_ms - event.draft_ms
        if not (_ok(event.round_ms) and _ok(event.draft_ms) and rest > 0):
            return
        if self._skip > 0:
            self._skip -= 1
            return
        self._memo.clear()
        if event.num_drafted == 0:
            self._steps.append((self._seq, rest))
            return
        self._verify.setdefault(event.num_drafted + 1, deque(maxlen=COST_WINDOW)).append((self._seq, rest, self._reply))
        if draft:
            per_token = event.draft_ms / event.num_drafted
            self._draft.setdefault(source, deque(maxlen=COST_WINDOW)).append((self._seq, per_token, self._reply))

    def new_reply(self) -> None:
        """A reply starts: earlier replies keep their latest :data:`HISTORY_SAMPLES` ratios per n
        and per source (t₁ samples stay: they normalise the rounds next to them)."""
        for samples in (*self._verify.values(), *self._draft.values()):
            while len(samples) > HISTORY_SAMPLES:
                samples.popleft()
        self._reply += 1
        self._seq += REPLY_GAP  # a reply's rounds are nearer to each other than to the last reply's
        self._memo.clear()

    # -- estimates -------------------------------------------------------------------------
    @property
    def target_step_ms(self) -> float | None:
        """t₁ now: the median of the latest :data:`NEAR_STEPS` target-only steps, ms; None before one."""
        latest = [ms for _, ms in list(self._steps)[-NEAR_STEPS:]]
        return statistics.median(latest) if latest else None

    @property
    def num_target_steps(self) -> int:
        return len(self._steps)

    def step_near(self, seq: int) -> float | None:
        """t₁ at round ``seq``: the median of the :data:`NEAR_STEPS` target steps nearest to it (ties:
        the earlier), ms; None before any."""
        steps = self._steps  # in round order
        if not steps:
            return None
        hi = bisect.bisect_left([s for s, _ in steps], seq)  # steps[:hi] come before round seq
        lo = hi - 1
        nearest: list[float] = []
        while len(nearest) < NEAR_STEPS and (lo >= 0 or hi < len(steps)):
            if hi >= len(steps) or (lo >= 0 and seq - steps[lo][0] <= steps[hi][0] - seq):
                nearest.append(steps[lo][1])
                lo -= 1
            else:
                nearest.append(steps[hi][1])
                hi += 1
        return statistics.median(nearest)

    def _ratios(self, samples, own_only: bool) -> list[float]:
        """The samples' ratios to t₁ near each (only the reply's own with ``own_only``)."""
        out = []
        for seq, ms, reply in samples:
            t1 = self.step_near(seq)
            if t1 and (reply == self._reply or not own_only):
                out.append(ms / t1)
        return out

    def _own_only(self, groups) -> bool:
        """Whether the reply has :data:`OWN_SAMPLES` rounds of its own in ``groups``, normalisable."""
        own = sum(1 for samples in groups for seq, _, reply in samples if reply == self._reply)
        return own >= OWN_SAMPLES and bool(self._steps)

    def verify_points(self) -> list[tuple[int, float, int]]:
        """``(n, median v(n)/t₁, samples)`` for each n seen, ascending."""
        if "points" not in self._memo:
            points, own_only = [], self._own_only(self._verify.values())
            for n in sorted(self._verify):
                ratios = self._ratios(self._verify[n], own_only)
                if ratios:
                    points.append((n, statistics.median(ratios), len(ratios)))
            self._memo["points"] = points
        return self._memo["points"]

    def verify_cost(self, num_positions: int) -> float | None:
        """ρ(n): a pass over n positions (and the round's bookkeeping) in target steps, 1 at n = 1;
        None until a drafting round and a target step were timed.

        Between the n measured (n >= 2) it is the weighted least-squares line through their medians
        (slope clipped at 0); below the smallest, the line from (1, 1) to it; one n past the largest
        it grows by at most :data:`EXPLORE_SLOPE` (the next γ up is worth one try: on llama.cpp's CPU
        kernels a pass over 2 positions costs about as much as one over 3, so the line through (1, 1)
        and n = 2 alone would price 13 positions at 14 steps where they cost 4), and beyond that by
        the measured slope (the line through (1, 1) when one n is known). Never below 1."""
        if num_positions <= 1:
            return 1.0 if self.verify_points() else None
        curve = self.verify_curve(num_positions)
        return None if curve is None else curve[num_positions - 2]

    def verify_curve(self, max_positions: int) -> list[float] | None:
        """[ρ(2), …, ρ(max_positions)] (:meth:`verify_cost`), read once; None before any point."""
        key = ("curve", max_positions)
        if key not in self._memo:
            self._memo[key] = self._curve(max_positions)
        return self._memo[key]

    def _curve(self, max_positions: int) -> list[float] | None:
        points = self.verify_points()
        if not points:
            return None
        lo, hi = points[0][0], points[-1][0]
        if len(points) == 1:
            value, slope = points[0][1], max(points[0][1] - 1.0, 0.0) / (hi - 1)

            def fit(n: int) -> float:
                return value
        else:
            w = sum(k for _, _, k in points)
            mx = sum(k * n for n, _, k in points) / w
            my = sum(k * m for _, m, k in points) / w
            sxx = sum(k * (n - mx) ** 2 for n, _, k in points)
            slope = max(sum(k * (n - mx) * (m - my) for n, m, k in points) / sxx, 0.0)

            def fit(n: int) -> float:
                return my + slope * (n - mx)
        top, bottom = fit(hi), fit(lo)
        out = []
        for n in range(2, max_positions + 1):
            if n < lo:
                value_n = 1.0 + (bottom - 1.0) * (n - 1) / (lo - 1)
            elif n <= hi:
                value_n = fit(n)
            else:
                value_n = top + min(slope, EXPLORE_SLOPE) + slope * (n - hi - 1)
            out.append(max(value_n, 1.0))
        return out

    def draft_cost(self, source: str = "") -> float | None:
        """c of ``source``: the median drafter time per drafted token in target steps; None before
        its first drafting round next to a target step."""
        key = ("draft", source)
        if key not in self._memo:
            samples = self._draft.get(source, ())
            ratios = self._ratios(samples, self._own_only([samples]))
            self._memo[key] = statistics.median(ratios) if ratios else None
        return self._memo[key]

    def num_samples(self, source: str = "") -> tuple[int, int, int]:
        """(t₁ samples, v samples over every n, d samples of ``source``) behind the estimates."""
        return (len(self._steps), sum(len(s) for s in self._verify.values()), len(self._draft.get(source, ())))

    def round_cost(self, num_speculative_tokens: int, source: str = "") -> float | None:
        """T(γ)/t₁ = γ·c + ρ(γ + 1) for γ >= 1, 1 for γ = 0; None while c or ρ is unknown."""
        if num_speculative_tokens == 0:
            return 1.0
        c, rho = self.draft_cost(source), self.verify_cost(num_speculative_tokens + 1)
        return None if c is None or rho is None else num_speculative_tokens * c + rho


def _ok(x: float) -> bool:
    return math.isfinite(x) and x >= 0
