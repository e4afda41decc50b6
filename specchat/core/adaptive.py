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

All estimates are exponentially weighted (recent rounds count more), so the choice follows a
prompt whose predictability changes. A controller lives for one drafter and may be carried
across generations. It only chooses how many tokens to draft; which tokens are committed is
decided by verification alone, so the output distribution is unchanged (lossless for any γ).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.core.costs import SLOPE_PRIOR, CostEstimator  # noqa: F401 (SLOPE_PRIOR: re-exported)
from specchat.core.events import RoundEvent

# Prior for a fresh controller: β = PRIOR_ACCEPTANCE with weight PRIOR_WEIGHT pseudo-rounds.
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 2.0
# Per-round decay of all running sums: a round 20 rounds ago weighs 0.9^20 ≈ 0.12.
DECAY = 0.9


@dataclass
class AdaptiveGamma:
    """Choose γ per round from running estimates of per-position acceptance and costs.

    Args:
        max_num_speculative_tokens: γ_max, the largest γ ever chosen (>= 1).
        initial_num_speculative_tokens: γ used until a round has been timed (clipped to γ_max).

    Feed each :class:`RoundEvent` to :meth:`update`; :meth:`choose` returns the next γ.

    Raises:
        ValueError: γ_max < 1.
    """

    max_num_speculative_tokens: int
    initial_num_speculative_tokens: int = 4
    # exponentially weighted sums: per position i, [accepted, reached]
    _accepted: list[float] = field(default_factory=list)
    _reached: list[float] = field(default_factory=list)
    costs: CostEstimator = field(default_factory=lambda: CostEstimator(decay=DECAY))

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

    def expected_tokens_per_round(self, num_speculative_tokens: int) -> float:
        """E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i, with the current β estimates."""
        beta = self.acceptance_by_position()
        total, reach = 1.0, 1.0
        for i in range(num_speculative_tokens):
            reach *= beta[i]
            total += reach
        return total

    def predicted_speedup(self, num_speculative_tokens: int) -> float | None:
        """E[N](γ) · t₁ / (γ·d + v(γ + 1)): the speedup over target-only decoding.

        t₁ is the timed target-only step when one was measured, else v(1). None until one
        drafting round has been timed.
        """
        round_ms = self.costs.round_ms(num_speculative_tokens)
        t1 = self.costs.target_step_ms or self.costs.verify_ms(1)
        if round_ms is None or t1 is None or round_ms <= 0:
            return None
        return self.expected_tokens_per_round(num_speculative_tokens) * t1 / round_ms

    # -- the policy -------------------------------------------------------------------------
    def choose(self) -> int:
        """γ for the next round: argmax of :meth:`predicted_speedup` over 1…γ_max (ties: smaller)."""
        if self.predicted_speedup(1) is None:
            return max(1, min(self.initial_num_speculative_tokens, self.max_num_speculative_tokens))
        best, best_s = 1, float("-inf")
        for gamma in range(1, self.max_num_speculative_tokens + 1):
            s = self.predicted_speedup(gamma)
            if s > best_s + 1e-12:
                best, best_s = gamma, s
        return best

    def update(self, event: RoundEvent) -> None:
        """Fold one round in: its judged positions and its timings.

        A round that drafted nothing (a timing round, an n-gram lookup that found nothing)
        carries no news about acceptance; it only times t₁. Timings that are not finite and
        non-negative are ignored.
        """
        self.costs.update(event)
        if not event.num_drafted:
            return
        for values in (self._accepted, self._reached):
            for i in range(len(values)):
                values[i] *= DECAY
        # judged positions: the accepted drafts and the first rejected one (accepted_mask)
        for i, accepted in enumerate(event.accepted_mask[: self.max_num_speculative_tokens]):
            self._reached[i] += 1.0
            self._accepted[i] += 1.0 if accepted else 0.0
