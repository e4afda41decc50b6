"""The formulas of speculative decoding that the app shows next to its measurements.

Source: Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023 (arXiv:2211.17192), Section 3; restated in ALGORITHM.md.

Symbols: α is the acceptance rate (expected per-position acceptance probability β),
γ (``num_speculative_tokens``) the number of draft tokens per round, c the cost of one
drafter step divided by the cost of one target step (wall time), ĉ the same ratio in FLOPs.
All functions take plain floats and ints and return floats.
"""

from __future__ import annotations

import math

__all__ = [
    "expected_tokens_per_round",
    "predicted_speedup",
    "flop_multiplier",
    "optimal_num_speculative_tokens",
]


def _check(alpha: float, num_speculative_tokens: int) -> None:
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"acceptance rate α must be in [0, 1], got {alpha}")
    if num_speculative_tokens < 0:
        raise ValueError(f"num_speculative_tokens γ must be >= 0, got {num_speculative_tokens}")


def expected_tokens_per_round(alpha: float, num_speculative_tokens: int) -> float:
    """E[N] = (1 − α^(γ+1)) / (1 − α): expected tokens committed per round.

    Leviathan et al. 2023, Equation 1. At α = 1 the limit γ + 1 is returned.

    Raises:
        ValueError: α outside [0, 1] or γ < 0.
    """
    _check(alpha, num_speculative_tokens)
    if alpha >= 1.0:
        return float(num_speculative_tokens + 1)
    return (1.0 - alpha ** (num_speculative_tokens + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, num_speculative_tokens: int, cost_ratio: float) -> float:
    """S(γ) = (1 − α^(γ+1)) / ((1 − α)(γc + 1)): expected wall-time speedup over target-only.

    Leviathan et al. 2023, Theorem 3.8. Assumes one verification pass costs one target step.

    Args:
        alpha: acceptance rate α in [0, 1].
        num_speculative_tokens: γ >= 0 (γ = 0 gives exactly 1.0).
        cost_ratio: c >= 0, drafter step time / target step time.

    Raises:
        ValueError: on out-of-range arguments.
    """
    if cost_ratio < 0 or math.isnan(cost_ratio):
        raise ValueError(f"cost ratio c must be >= 0, got {cost_ratio}")
    return expected_tokens_per_round(alpha, num_speculative_tokens) / (
        num_speculative_tokens * cost_ratio + 1.0
    )


def flop_multiplier(alpha: float, num_speculative_tokens: int, flop_ratio: float) -> float:
    """(1 − α)(γĉ + γ + 1) / (1 − α^(γ+1)): arithmetic operations relative to target-only.

    Leviathan et al. 2023, Theorem 3.11. Always >= 1 for γ >= 1.

    Raises:
        ValueError: on out-of-range arguments.
    """
    if flop_ratio < 0:
        raise ValueError(f"FLOP ratio ĉ must be >= 0, got {flop_ratio}")
    g = num_speculative_tokens
    return (g * flop_ratio + g + 1.0) / expected_tokens_per_round(alpha, g)


def optimal_num_speculative_tokens(
    alpha: float, cost_ratio: float, max_num_speculative_tokens: int = 16
) -> int:
    """The integer γ in 1…max that maximises S(γ); ties go to the smaller γ.

    No derivative needed: S(γ) is evaluated for each integer (ALGORITHM.md). Returns 1 when no
    γ gives a speedup (then α <= c and speculation cannot pay).

    Raises:
        ValueError: on out-of-range arguments or max < 1.
    """
    if max_num_speculative_tokens < 1:
        raise ValueError("max_num_speculative_tokens must be >= 1")
    best_gamma, best = 1, -1.0
    for gamma in range(1, max_num_speculative_tokens + 1):
        s = predicted_speedup(alpha, gamma, cost_ratio)
        if s > best + 1e-12:
            best_gamma, best = gamma, s
    return best_gamma
