"""Adaptive γ: pick ``num_speculative_tokens`` each round to maximise the predicted speedup.

ALGORITHM.md: the best γ is the integer that maximises S(γ); no derivative is needed, so we
evaluate every γ in 1…γ_max. Leviathan et al. 2023 (Section 3) assume one acceptance rate α
for every draft position and a verification pass that costs one target step whatever γ is.
Both assumptions are measured here instead of assumed:

- the per-position acceptance β_i = P(draft i accepted | drafts 1…i−1 accepted), so
  E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i (with one β for every position this is Leviathan's
  Equation 1, (1 − α^(γ+1)) / (1 − α));
- the round time T(γ) = γ·d + v(γ + 1): d is the drafter's time per drafted token and
  v(n) = v0 + v1·n the rest of a round that checks n = γ + 1 positions (the verify pass and its
  bookkeeping), fitted by least squares (:class:`specchat.core.costs.CostEstimator`).

γ* = argmax_γ E[N](γ) · t₁ / T(γ), with t₁ one target-only step: the expression the app's
theory chart draws (ALGORITHM.md, "Measured and predicted speedup, like for like"). With one
β for every position and v(n) = t₁ it is Leviathan's Theorem 3.8, E[N] / (γc + 1). t₁ only
scales the curve, so the choice does not need it; until a target-only round was timed, v(1)
stands in for it.

**Drafting pauses when it cannot pay** (γ = 0 with probes): once t₁ has been timed, if every γ in
1…γ_max is predicted to lose (max S(γ) < 1), the controller answers 0, a target-only step, and
drafts a *probe* only once every :meth:`AdaptiveGamma.probe_interval` rounds: the least P for
which one probe round in P costs at most :data:`PROBE_BUDGET` of target-only throughput. A probe
drafts the γ that loses least against target-only steps (:meth:`AdaptiveGamma.probe_gamma`;
usually 1: on a CPU a verify pass over more positions costs more target steps). Probes keep α
measured, so drafting resumes when the text turns predictable (a code block that repeats the
prompt).

All estimates are exponentially weighted (recent rounds count more), so the choice follows a
prompt whose predictability changes. A controller lives for one drafter and may be carried
across generations. It only chooses how many tokens to draft; which tokens are committed is
decided by verification alone, so the output distribution is unchanged (lossless for any γ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specchat.core.costs import SLOPE_PRIOR, CostEstimator  # noqa: F401 (SLOPE_PRIOR: re-exported)
from specchat.core.events import RoundEvent

# Prior for a fresh controller: β = PRIOR_ACCEPTANCE with weight PRIOR_WEIGHT pseudo-rounds.
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 2.0
# Per-round decay of all running sums: a round 20 rounds ago weighs 0.9^20 ≈ 0.12.
DECAY = 0.9
# While drafting is paused, the probes may cost at most this share of target-only throughput
# (2 %, so that with each reply's first probe, outside the schedule, a paused drafter stays
# within 3 % of target-only).
PROBE_BUDGET = 0.02
# A fresh controller leaves the round costs of its first reply's first rounds out of its fit: the
# first forward passes of a process, or of a new batch shape, are slower (costs.py's timing-round
# schedule skips them for the same reason), and while drafting is paused only probes could
# correct an inflated v(n).
WARMUP_ROUNDS = 2


@dataclass
class AdaptiveGamma:
    """Choose γ per round from running estimates of per-position acceptance and costs.

    Args:
        max_num_speculative_tokens: γ_max, the largest γ ever chosen (>= 1).
        initial_num_speculative_tokens: γ used until a round has been timed (clipped to γ_max).
            1 by default: the cheapest round that still measures α and the drafting costs, so a
            drafter that loses (on a CPU a verify pass over 5 positions can cost 4 target steps)
            costs little before the controller knows; where drafting pays, the fit moves to a
            larger γ from the second timed round on.

    Feed each :class:`RoundEvent` to :meth:`update`; :meth:`choose` returns the next γ, 0 while
    drafting is paused (:attr:`paused`) between probes.

    Raises:
        ValueError: γ_max < 1.
    """

    max_num_speculative_tokens: int
    initial_num_speculative_tokens: int = 1
    # exponentially weighted sums: per position i, [accepted, reached]
    _accepted: list[float] = field(default_factory=list)
    _reached: list[float] = field(default_factory=list)
    costs: CostEstimator = field(default_factory=lambda: CostEstimator(decay=DECAY, anchor_target_step=True))
    paused: bool = False  # the last choice found every γ >= 1 predicted to lose
    best_predicted_speedup: float | None = None  # the last choice's best prediction over γ = 1…γ_max
    _since_probe: int = 0  # paused rounds since the last probe
    _probing: bool = False  # the last choice was a probe
    probe_catch_up_ms: float = 0.0  # a probe's drafting time beyond γ·d (the drafter catching up), last probe
    _num_replies: int = 0  # new_reply() calls
    _reply_probe: bool = False  # the last choice was a reply's first probe (no catch-up owed)
    _asked_target_step: bool = False  # this reply already chose one target-only round to time t₁
    _skip: int = 0  # paused choices left that answer 0 without re-deciding (until the next probe is due)

    def __post_init__(self) -> None:
        if self.max_num_speculative_tokens < 1:
            raise ValueError(f"max_num_speculative_tokens must be >= 1, got {self.max_num_speculative_tokens}")
        self._accepted = [0.0] * self.max_num_speculative_tokens
        self._reached = [0.0] * self.max_num_speculative_tokens

    # -- estimates --------------------------------------------------------------------------
    @property
    def pooled_acceptance(self) -> float:
        """α over all positions, shrunk toward the prior (in (0, 1))."""
        return (sum(self._accepted) + PRIOR_ACCEPTANCE * PRIOR_WEIGHT) / (sum(self._reached) + PRIOR_WEIGHT)

    def acceptance_by_position(self) -> list[float]:
        """β_1…β_γmax: each position's weighted acceptance, shrunk toward the pooled α."""
        pooled = self.pooled_acceptance
        return [
            (a + pooled * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT) for a, n in zip(self._accepted, self._reached)
        ]

    @property
    def draft_ms_per_token(self) -> float | None:
        """d: milliseconds of drafting per drafted token; None before any draft."""
        return self.costs.draft_ms_per_token

    def verify_ms_fit(self) -> tuple[float, float] | None:
        """(v0, v1): a drafting round's time apart from drafting ≈ v0 + v1·n over the n = γ + 1
        positions it checks (:meth:`specchat.core.costs.CostEstimator.verify_fit`); None before any
        drafting round."""
        return self.costs.verify_fit()

    def _curves(self) -> tuple[list[float], list[float] | None, float | None]:
        """One read of the estimates for every γ = 1…γ_max: E[N](γ), the round time T(γ) =
        γ·d + v(γ + 1) (None before a drafting round was timed) and v(1), with the arithmetic of
        :meth:`expected_tokens_per_round` and ``CostEstimator.round_ms``. A choice reads them
        once, not once per γ (each γ used to re-fit v(n) and recompute every β)."""
        expected, total, reach = [], 1.0, 1.0
        for beta in self.acceptance_by_position():
            reach *= beta
            total += reach
            expected.append(total)
        d, fit = self.costs.draft_ms_per_token, self.costs.verify_fit()
        if d is None or fit is None:
            return expected, None, None if fit is None else fit[0] + fit[1] * 1
        v0, v1 = fit
        return expected, [g * d + (v0 + v1 * (g + 1)) for g in range(1, len(expected) + 1)], v0 + v1 * 1

    def expected_tokens_per_round(self, num_speculative_tokens: int) -> float:
        """E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i, with the current β estimates."""
        return 1.0 if num_speculative_tokens == 0 else self._curves()[0][num_speculative_tokens - 1]

    def predicted_speedup(self, num_speculative_tokens: int) -> float | None:
        """E[N](γ) · t₁ / (γ·d + v(γ + 1)): the speedup over target-only decoding.

        t₁ is the timed target-only step when one was measured, else v(1). None until one
        drafting round has been timed.
        """
        return self._speedup(num_speculative_tokens, self._curves())

    def _speedup(self, num_speculative_tokens: int, curves) -> float | None:
        expected, rounds, v_one = curves
        t1 = self.costs.target_step_ms or v_one
        if rounds is None or t1 is None or rounds[num_speculative_tokens - 1] <= 0:
            return None
        return expected[num_speculative_tokens - 1] * t1 / rounds[num_speculative_tokens - 1]

    def probe_interval(self, num_speculative_tokens: int, curves=None) -> int:
        """P: while paused, one probe round of γ every P rounds. A probe takes T(γ) =
        γ·d + v(γ + 1) and commits E[N](γ) tokens that target-only steps would commit in
        E[N](γ)·t₁, so over P rounds (P − 1 target-only steps and the probe) throughput drops by
        (T − E[N]·t₁) / ((P − 1 + E[N])·t₁); P is the least integer >= 2 that keeps this at most
        :data:`PROBE_BUDGET` (1 when a probe loses nothing). T includes what the last probe spent
        beyond γ·d (:attr:`probe_catch_up_ms`: a model drafter catching up on the tokens committed
        while it was paused). Needs t₁ and the round costs timed. ``curves``: :meth:`_curves`, when
        the caller has them."""
        curves = curves or self._curves()
        t1, round_ms = self.costs.target_step_ms, curves[1][num_speculative_tokens - 1]
        expected = curves[0][num_speculative_tokens - 1]
        loss = round_ms + self.probe_catch_up_ms - expected * t1
        if loss <= 0:
            return 1
        return max(2, math.ceil(loss / (PROBE_BUDGET * t1) + 1.0 - expected - 1e-9))

    def break_even_acceptance(self, num_speculative_tokens: int = 1) -> float | None:
        """The α (one acceptance rate at every position) at which γ breaks even at the measured
        costs: E[N](γ; α) · t₁ = T(γ), i.e. Σ_{k=0..γ} α^k = T(γ)/t₁ (Leviathan et al. 2023,
        Equation 1, against the measured round time; :class:`specchat.core.costs.BreakEven`);
        1.0 when no α < 1 pays, 0.0 when any α pays, None before t₁ and a drafting round are
        timed."""
        even = self.costs.break_even(num_speculative_tokens)
        if even is None:
            return None
        if even.never_pays:
            return 1.0
        return 0.0 if even.pays_always else even.acceptance

    # -- the policy -------------------------------------------------------------------------
    def new_reply(self) -> None:
        """A reply starts: its drafter has just read the prompt (no catch-up is owed), so while
        paused the first choice of the reply is a probe: a new prompt may be predictable."""
        self._since_probe, self._skip = 1 << 30, 0
        self._num_replies += 1
        self._asked_target_step = False

    def probe_gamma(self, curves=None) -> int:
        """The γ a probe drafts: the least loss T(γ) − E[N](γ)·t₁ against target-only steps
        over 1…γ_max (ties: the smaller γ). Needs t₁ and the round costs timed. ``curves``:
        :meth:`_curves`, when the caller has them."""
        t1, (expected, rounds, _) = self.costs.target_step_ms, curves or self._curves()
        losses = [rounds[g] - expected[g] * t1 for g in range(self.max_num_speculative_tokens)]
        return 1 + min(range(len(losses)), key=lambda i: round(losses[i], 9))  # min keeps the first of a tie

    def choose(self) -> int:
        """γ for the next round: argmax of :meth:`predicted_speedup` over 1…γ_max (ties:
        smaller); 0 (a target-only step) when t₁ is timed and even the best γ is predicted to
        lose, but for a probe of :meth:`probe_gamma` every :meth:`probe_interval` rounds. Once per
        reply, 0 also when a drafting round was timed but no target-only step was (no timing
        rounds): that step times t₁. While paused it re-decides only when the next probe is due
        (and at a reply's start): the rounds between answer 0 at once, so a drafter that cannot
        pay costs a target-only step almost nothing beyond its probes (a slowing target resumes
        drafting at the next probe, not sooner)."""
        self._probing = self._reply_probe = False
        if self.paused and self._skip > 0:  # paused, no probe due yet: decided when the pause began or last probe ran
            self._skip -= 1
            self._since_probe += 1
            return 0
        curves = self._curves()
        if self._speedup(1, curves) is None:
            return max(1, min(self.initial_num_speculative_tokens, self.max_num_speculative_tokens))
        if self.costs.target_step_ms is None and self._num_replies and not self._asked_target_step:
            # no target-only step timed (a run without timing rounds: measure_speedup off): one
            # target-only round times t₁, without which a losing drafter could never pause
            self._asked_target_step = True
            return 0
        best, best_s = 1, float("-inf")
        for gamma in range(1, self.max_num_speculative_tokens + 1):
            s = self._speedup(gamma, curves)
            if s > best_s + 1e-12:
                best, best_s = gamma, s
        self.best_predicted_speedup = best_s
        if best_s >= 1.0 or self.costs.target_step_ms is None:
            self.paused, self._since_probe = False, 0
            return best
        self.paused = True
        self._since_probe += 1
        probe = self.probe_gamma(curves)
        interval = self.probe_interval(probe, curves)
        if self._since_probe >= interval:
            self._reply_probe = self._since_probe >= 1 << 30
            self._since_probe, self._probing = 0, True
            return probe
        self._skip = interval - self._since_probe - 1
        return 0

    def update(self, event: RoundEvent) -> None:
        """Fold one round in: its judged positions and its timings.

        A round that drafted nothing (a timing round, an n-gram lookup that found nothing)
        carries no news about acceptance; it only times t₁. Timings that are not finite and
        non-negative are ignored.
        """
        catching_up = self._probing and not self._reply_probe
        if not (self._num_replies == 1 and event.round_index < WARMUP_ROUNDS):
            self.costs.update(event, draft=not catching_up)
        d = self.costs.draft_ms_per_token
        if catching_up and event.num_drafted and d is not None:
            self.probe_catch_up_ms = max(0.0, event.draft_ms - event.num_drafted * d)
        if not event.num_drafted:
            return
        for values in (self._accepted, self._reached):
            for i in range(len(values)):
                values[i] *= DECAY
        # judged positions: the accepted drafts and the first rejected one (accepted_mask)
        for i, accepted in enumerate(event.accepted_mask[: self.max_num_speculative_tokens]):
            self._reached[i] += 1.0
            self._accepted[i] += 1.0 if accepted else 0.0
