"""Adaptive γ: pick ``num_speculative_tokens`` each round to maximise the predicted speedup.

ALGORITHM.md: the best γ is the integer that maximises S(γ); no derivative is needed, so we
evaluate every γ in 1…γ_max. Leviathan et al. 2023 (Section 3) assume one acceptance rate α
for every draft position and a verification pass that costs one target step whatever γ is.
Both assumptions are measured here instead of assumed:

- the per-position acceptance β_i = P(draft i accepted | drafts 1…i−1 accepted), so
  E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i (with one β for every position this is Leviathan's
  Equation 1, (1 − α^(γ+1)) / (1 − α));
- the round time T(γ) = γ·t_draft + v0 + v1·γ: t_draft is the drafter's time per draft token
  and v0 + v1·n the verification time with n drafts, fitted by least squares.

γ* = argmax_γ E[N](γ) / T(γ). In units of one target step (t_target ≈ v0) this is
S(γ) = E[N](γ) / (γc + 1 + γ·v1/v0), Theorem 3.8 with the measured verification slope.

All estimates are exponentially weighted (recent rounds count more), so the choice follows a
prompt whose predictability changes. A controller lives for one drafter and may be carried
across generations. It only chooses how many tokens to draft; which tokens are committed is
decided by verification alone, so the output distribution is unchanged (lossless for any γ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specchat.events import RoundEvent

# Prior for a fresh controller: β = PRIOR_ACCEPTANCE with weight PRIOR_WEIGHT pseudo-rounds.
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 2.0
# Per-round decay of all running sums: a round 20 rounds ago weighs 0.9^20 ≈ 0.12.
DECAY = 0.9
# The fitted verification slope is shrunk toward 0 (Leviathan's flat verification cost) by
# S_nn / (S_nn + SLOPE_PRIOR), S_nn = Σw(n − mean n)²: fitted on a narrow spread of n, timing
# noise of a few percent would otherwise read as a steep cost per draft token.
SLOPE_PRIOR = 20.0


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
    # draft time per drafted token (ms): weighted sum of ms and of tokens
    _draft_ms: float = 0.0
    _draft_tokens: float = 0.0
    # least squares of verify_ms on n drafted: weighted sums of 1, n, n², y, n·y
    _w: list[float] = field(default_factory=lambda: [0.0] * 5)

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
        """t_draft: milliseconds of drafting per drafted token; None before any draft."""
        return self._draft_ms / self._draft_tokens if self._draft_tokens > 0 else None

    def verify_ms_fit(self) -> tuple[float, float] | None:
        """(v0, v1): verification ms ≈ v0 + v1 · n_drafted, fitted on rounds that drafted;
        None before any such round.

        The least-squares slope is shrunk toward 0 by S_nn / (S_nn + SLOPE_PRIOR), so it is 0
        until two different n have been seen; it is never negative.
        """
        s0, s1, s2, sy, sny = self._w
        if s0 <= 0:
            return None
        mean_n, mean_y = s1 / s0, sy / s0
        s_nn = s2 - s0 * mean_n**2
        slope = (sny - s0 * mean_n * mean_y) / s_nn if s_nn > 1e-9 else 0.0
        slope = max(slope, 0.0) * max(s_nn, 0.0) / (max(s_nn, 0.0) + SLOPE_PRIOR)
        if mean_y - slope * mean_n <= 0:  # a convex cost curve: keep the mean, drop the slope
            return mean_y, 0.0
        return mean_y - slope * mean_n, slope

    def expected_tokens_per_round(self, num_speculative_tokens: int) -> float:
        """E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i, with the current β estimates."""
        beta = self.acceptance_by_position()
        total, reach = 1.0, 1.0
        for i in range(num_speculative_tokens):
            reach *= beta[i]
            total += reach
        return total

    def predicted_speedup(self, num_speculative_tokens: int) -> float | None:
        """E[N](γ) · v0 / (γ·t_draft + v0 + v1·γ): speedup over one target step per token.

        None until one drafting round has been timed.
        """
        fit, t_draft = self.verify_ms_fit(), self.draft_ms_per_token
        if fit is None or t_draft is None or fit[0] <= 0:
            return None
        v0, v1 = fit
        gamma = num_speculative_tokens
        return self.expected_tokens_per_round(gamma) * v0 / (gamma * t_draft + v0 + v1 * gamma)

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
        """Fold one round in: its judged positions, its draft time and its verify time.

        A round that drafted nothing (an n-gram lookup that found nothing) carries no news about
        acceptance or costs of drafting and changes nothing; timings that are not finite and
        non-negative are ignored.
        """
        if not event.num_drafted:
            return
        for values in (self._accepted, self._reached):
            for i in range(len(values)):
                values[i] *= DECAY
        # judged positions: the accepted drafts and the first rejected one (accepted_mask)
        for i, accepted in enumerate(event.accepted_mask[: self.max_num_speculative_tokens]):
            self._reached[i] += 1.0
            self._accepted[i] += 1.0 if accepted else 0.0
        if math.isfinite(event.draft_ms) and event.draft_ms >= 0:
            self._draft_ms = self._draft_ms * DECAY + event.draft_ms
            self._draft_tokens = self._draft_tokens * DECAY + event.num_drafted
        # rounds without drafts are left out of the fit (above): a 1-token forward pass can take
        # another kernel path (on this project's CPU a bf16 1-token pass was slower than a
        # 2-token one), and a fit through it would extrapolate that jump to every γ
        if math.isfinite(event.verify_ms) and event.verify_ms > 0:
            n, y = float(event.num_drafted), event.verify_ms
            for i, value in enumerate((1.0, n, n * n, y, n * y)):
                self._w[i] = self._w[i] * DECAY + value
