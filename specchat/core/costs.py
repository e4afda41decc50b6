"""What a round costs, measured in the same run, and the speedup those costs predict.

ALGORITHM.md, "Measured and predicted speedup, like for like". Every speed figure specchat
shows is built from timings taken during the very reply it describes, under the same load:

* ``t₁`` (:attr:`CostEstimator.target_step_ms`): one target-only decode step. It is the time
  of a round that drafted nothing (``round_ms − draft_ms``), which *is* a plain decode step:
  every round of the drafter ``none``, an n-gram lookup that found nothing, or a **timing
  round** that the engine inserts now and then (:func:`timing_round_due`: on a schedule, and
  more often on a busy machine while t₁ is imprecise and the extra rounds cost little) when
  ``GenerationConfig.measure_speedup`` is on.
* ``d`` (:attr:`CostEstimator.draft_ms_per_token`): drafter time per drafted token (0 for a
  lookup that costs nothing measurable).
* ``v(n)`` (:meth:`CostEstimator.verify_ms`): the rest of a drafting round (the target's verify
  pass over ``n = γ + 1`` positions, verification and bookkeeping), fitted as ``v0 + v1·n`` by
  least squares on the rounds that drafted. It grows with n, on a CPU noticeably.

Predicted speedup of γ: ``E[N](γ) · t₁ / (γ·d + v(γ + 1))``. The adaptive controller
(:mod:`specchat.core.adaptive`) maximises the same expression with exponentially weighted estimates
(``decay < 1``); the reply's statistics (:mod:`specchat.core.metrics`) use plain averages over the
reply (``decay = 1``). c, the cost ratio of Leviathan et al. 2023, is ``d / t₁``.

Pure Python: no tensors, no UI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specchat.core.events import RoundEvent

# The verify-cost slope is shrunk toward 0 (Leviathan's flat verification cost) by
# S_nn / (S_nn + SLOPE_PRIOR), S_nn = Σw(n − mean n)²: fitted on a narrow spread of n, timing
# noise of a few percent would otherwise read as a steep cost per checked position.
SLOPE_PRIOR = 20.0

# Timing rounds (target-only rounds inserted to measure t₁ in the same run): the first at round
# 2 (rounds 0 and 1 carry warm-up effects), the second at round 6, then one every 16 rounds.
# A timing round commits one token at the price of one target step instead of E[N] tokens at
# the price of a round: with a fraction f of the rounds, the throughput changes by about
# −f·(S − 1)/E[N] at a speedup S (over a long reply f = 1/16: −2 to −3 % at S = 2-3 with
# E[N] ≈ 3-5; a gain when S < 1). `python -m specchat bench --timing-cost` measures it.
# Rounds that drafted nothing anyway (n-gram misses) count as timing rounds, so a drafter that
# often finds nothing needs none.
TIMING_ROUND_FIRST = 2
TIMING_ROUND_SECOND = 6
TIMING_ROUND_INTERVAL = 16


# More timing rounds when t₁'s samples scatter (a busy machine): until its relative standard error
# is at most TIMING_PRECISION, while their share of the rounds stays under what costs at most
# TIMING_BUDGET of the throughput (−share·(S − 1)/E[N], see above) and under TIMING_MAX_SHARE.
# When speculation loses (S <= 1) a timing round costs nothing, so only the cap applies.
TIMING_PRECISION = 0.04
TIMING_BUDGET = 0.03
TIMING_MAX_SHARE = 0.25


def timing_round_due(
    round_index: int,
    num_target_only: int,
    *,
    t1_rel_se: float | None = None,
    speedup: float | None = None,
    tokens_per_round: float | None = None,
) -> bool:
    """Whether round ``round_index`` (0-based) should be a timing round, given that
    ``num_target_only`` rounds so far drafted nothing.

    Always when the schedule asks for one (:func:`timing_rounds_due`). Beyond it, when t₁ is
    not yet known to ``TIMING_PRECISION`` (its relative standard error ``t1_rel_se``) and the
    target-only rounds' share stays within ``min(TIMING_MAX_SHARE, TIMING_BUDGET·E[N]/(S − 1))``,
    with ``speedup`` S and ``tokens_per_round`` E[N] as measured so far (no budget limit when
    S <= 1).
    """
    if num_target_only < timing_rounds_due(round_index):
        return True
    if t1_rel_se is None or t1_rel_se <= TIMING_PRECISION or round_index < TIMING_ROUND_SECOND:
        return False
    share = TIMING_MAX_SHARE
    if speedup is not None and speedup > 1 and tokens_per_round:
        share = min(share, TIMING_BUDGET * tokens_per_round / (speedup - 1))
    return num_target_only + 1 <= share * (round_index + 1)


def timing_rounds_due(round_index: int) -> int:
    """How many target-only rounds a run should have had by the end of round ``round_index``
    (0-based) to measure t₁: 0 before round 2, 1 from round 2, 2 from round 6, then one more
    every :data:`TIMING_ROUND_INTERVAL` rounds (rounds 22, 38, 54, …)."""
    if round_index < TIMING_ROUND_FIRST:
        return 0
    if round_index < TIMING_ROUND_SECOND:
        return 1
    return 2 + (round_index - TIMING_ROUND_SECOND) // TIMING_ROUND_INTERVAL


@dataclass
class CostEstimator:
    """Running estimates of t₁, d and v(n) from :class:`~specchat.core.events.RoundEvent` timings.

    Args:
        decay: weight kept by the earlier rounds at each update that changes an estimate, in
            (0, 1]. 1 gives plain averages over everything seen (a reply's statistics); below 1
            recent rounds count more (the adaptive controller follows changing load).

        anchor_target_step: fit v(n)'s slope with t₁ as one more point at n = 1 (a target-only
            step is a verify pass over one position), weighted like all drafting rounds
            together; the line still passes through the drafting rounds' mean. Rounds that all
            draft one γ then still tell how v grows with n: on a CPU a pass over 9 positions
            can cost 9 target steps, which a flat fit would miss (the adaptive controller).

    Rounds whose timings are not finite and non-negative are ignored. Units: milliseconds.

    Raises:
        ValueError: decay outside (0, 1].
    """

    decay: float = 1.0
    anchor_target_step: bool = False
    _t1: list[float] = field(default_factory=lambda: [0.0] * 4)  # weighted Σ ms, Σ w, Σ ms², Σ w²
    _draft: list[float] = field(default_factory=lambda: [0.0, 0.0])  # weighted Σ ms, Σ drafted tokens
    _fit: list[float] = field(default_factory=lambda: [0.0] * 5)  # weighted Σ 1, n, n², y, n·y

    def __post_init__(self) -> None:
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")

    # -- input -----------------------------------------------------------------------------
    def update(self, event: RoundEvent, *, draft: bool = True) -> None:
        """Fold in one round: a round that drafted nothing is a t₁ sample; a drafting round
        adds to d (unless ``draft`` is False: a probe after paused rounds, whose drafting time
        includes the drafter catching up on the tokens committed while it was paused) and to
        the fit of v(n) at n = num_drafted + 1 checked positions."""
        rest_ms = event.round_ms - event.draft_ms
        if not (_ok(event.round_ms) and _ok(event.draft_ms) and rest_ms > 0):
            return
        if event.num_drafted == 0:
            _add(self._t1, (rest_ms, 1.0, rest_ms * rest_ms), self.decay)
            self._t1[3] = self._t1[3] * self.decay**2 + 1.0
            return
        if draft:
            _add(self._draft, (event.draft_ms, float(event.num_drafted)), self.decay)
        n = float(event.num_drafted + 1)
        _add(self._fit, (1.0, n, n * n, rest_ms, n * rest_ms), self.decay)

    # -- estimates -------------------------------------------------------------------------
    @property
    def target_step_ms(self) -> float | None:
        """t₁: mean time of a round that drafted nothing (one target-only decode step), ms;
        None before any such round."""
        total, count = self._t1[:2]
        return total / count if count > 0 else None

    @property
    def num_target_steps(self) -> float:
        """Weight of the t₁ samples (with decay 1: the number of rounds that drafted nothing)."""
        return self._t1[1]

    @property
    def target_step_rel_se(self) -> float | None:
        """The relative standard error of t₁ (standard error of the mean / the mean), from the
        spread of its samples; None before two samples. A quiet machine gives a few percent
        with two samples; a busy one needs many more."""
        total, weight, squares, weight_sq = self._t1
        n_eff = weight * weight / weight_sq if weight_sq > 0 else 0.0
        if n_eff < 1.5 or total <= 0:
            return None
        mean = total / weight
        variance = max(squares / weight - mean * mean, 0.0) * n_eff / (n_eff - 1)
        return math.sqrt(variance / n_eff) / mean

    @property
    def draft_ms_per_token(self) -> float | None:
        """d: drafter milliseconds per drafted token; None before any draft."""
        total, tokens = self._draft
        return total / tokens if tokens > 0 else None

    def verify_fit(self) -> tuple[float, float] | None:
        """(v0, v1): a drafting round's time apart from drafting ≈ v0 + v1·n over n checked
        positions (γ + 1), ms; None before any drafting round.

        The least-squares slope is shrunk toward 0 by S_nn / (S_nn + SLOPE_PRIOR), so it is 0
        until two different n have been seen, and it is never negative. If the line would
        give a fixed cost v0 <= 0 (a convex cost curve), the slope is dropped (mean cost kept).
        """
        s0, s1, s2, sy, sny = self._fit
        if s0 <= 0:
            return None
        draft_n, draft_y = s1 / s0, sy / s0  # the drafting rounds' mean: the line goes through it
        t1 = self.target_step_ms if self.anchor_target_step else None
        if t1 is not None:  # one more point (1, t₁), weighted like all drafting rounds together
            s0, s1, s2, sy, sny = 2 * s0, s1 + s0, s2 + s0, sy + s0 * t1, sny + s0 * t1
        mean_n, mean_y = s1 / s0, sy / s0
        s_nn = max(s2 - s0 * mean_n**2, 0.0)
        slope = (sny - s0 * mean_n * mean_y) / s_nn if s_nn > 1e-9 else 0.0
        slope = max(slope, 0.0) * s_nn / (s_nn + SLOPE_PRIOR)
        mean_n, mean_y = draft_n, draft_y
        intercept = mean_y - slope * mean_n
        if intercept <= 0:  # a convex cost curve: keep the mean, drop the slope
            return mean_y, 0.0
        return intercept, slope

    def verify_ms(self, num_positions: int) -> float | None:
        """v(n): predicted time of a drafting round apart from drafting, checking n positions."""
        fit = self.verify_fit()
        return None if fit is None else fit[0] + fit[1] * num_positions

    def round_ms(self, num_speculative_tokens: int) -> float | None:
        """Predicted time of a round that drafts γ tokens: t₁ for γ = 0, else γ·d + v(γ + 1)."""
        if num_speculative_tokens == 0:
            return self.target_step_ms
        d, v = self.draft_ms_per_token, self.verify_ms(num_speculative_tokens + 1)
        return None if d is None or v is None else num_speculative_tokens * d + v

    @property
    def cost_ratio(self) -> float | None:
        """c = d / t₁ (Leviathan et al. 2023): drafter time per drafted token over one
        target-only step; None until both were measured."""
        d, t1 = self.draft_ms_per_token, self.target_step_ms
        return None if d is None or not t1 else d / t1

    def predicted_speedup(self, expected_tokens: float, num_speculative_tokens: int) -> float | None:
        """E[N](γ) · t₁ / (γ·d + v(γ + 1)): tokens per round over the round's time in target
        steps. None until t₁, d and v were measured."""
        t1, round_ms = self.target_step_ms, self.round_ms(num_speculative_tokens)
        if t1 is None or round_ms is None or round_ms <= 0:
            return None
        return expected_tokens * t1 / round_ms

    def break_even(self, num_speculative_tokens: int = 1) -> BreakEven | None:
        """γ's break-even acceptance rate at these costs (:class:`BreakEven`); None until t₁, d
        and v were measured."""
        t1, d, v = self.target_step_ms, self.draft_ms_per_token, self.verify_ms(num_speculative_tokens + 1)
        if not t1 or d is None or v is None:
            return None
        return BreakEven(num_speculative_tokens, d / t1, v / t1)


@dataclass(frozen=True)
class BreakEven:
    """When drafting γ tokens a round pays, at measured costs: the acceptance rate α* at which a
    round of γ commits, on average, as many tokens per target step as target-only decoding.

    A round of γ costs ``T(γ)/t₁ = γ·c + v(γ + 1)/t₁`` target steps and commits
    ``E[N](γ; α) = Σ_{k=0..γ} α^k`` tokens with one acceptance rate α at every position
    (Leviathan et al. 2023, Equation 1; the round's time measured, not assumed ``γc + 1``). It
    pays when ``E[N] > T(γ)/t₁``. Three cases, each said in words by :func:`specchat.core.evidence.break_even_sentence`:

    * ``T(γ)/t₁ <= 1``: the round costs no more than one target step; it pays at any α (α* = 0
      is not a threshold anyone can miss, so :attr:`acceptance` is None).
    * ``T(γ)/t₁ >= γ + 1``: not even α = 1 (every draft accepted, γ + 1 tokens) pays;
      :attr:`acceptance` is None.
    * else α* in (0, 1), the root of ``Σ α^k = T(γ)/t₁``; for γ = 1, α* = c + v(2)/t₁ − 1.

    Attributes:
        num_speculative_tokens: γ >= 1.
        draft_cost: c = d / t₁, drafting one token in target steps (>= 0).
        verify_cost: v(γ + 1) / t₁, the rest of the round (the verify pass over γ + 1
            positions and bookkeeping) in target steps (> 0).
    """

    num_speculative_tokens: int
    draft_cost: float
    verify_cost: float

    @property
    def round_cost(self) -> float:
        """T(γ)/t₁: a round of γ in target steps."""
        return self.num_speculative_tokens * self.draft_cost + self.verify_cost

    @property
    def pays_always(self) -> bool:
        return self.round_cost <= 1.0

    @property
    def never_pays(self) -> bool:
        return self.round_cost >= self.num_speculative_tokens + 1

    @property
    def acceptance(self) -> float | None:
        """α* in (0, 1), or None when the round pays at any α or at none (see the class)."""
        if self.pays_always or self.never_pays:
            return None
        need, gamma = self.round_cost, self.num_speculative_tokens
        if gamma == 1:
            return need - 1.0
        lo, hi = 0.0, 1.0
        for _ in range(60):  # Σ α^k grows with α: bisection
            mid = (lo + hi) / 2
            if sum(mid**k for k in range(gamma + 1)) < need:
                lo = mid
            else:
                hi = mid
        return hi

    def pays(self, alpha: float) -> bool:
        """Whether a round of γ at acceptance rate ``alpha`` commits more tokens per target step
        than target-only decoding."""
        return sum(alpha**k for k in range(self.num_speculative_tokens + 1)) > self.round_cost


def _ok(x: float) -> bool:
    return math.isfinite(x) and x >= 0


def _add(sums: list[float], values: tuple[float, ...], decay: float) -> None:
    for i, value in enumerate(values):
        sums[i] = sums[i] * decay + value
