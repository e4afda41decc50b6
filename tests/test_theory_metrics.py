"""ALGORITHM.md's worked example and hand-built rounds folded by the metrics."""

import pytest

from specchat import theory
from specchat.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.metrics import SpeculationMetrics


def test_worked_example_from_algorithm_md():
    # α = 0.8, c = ĉ = 0.1, γ = 4 → E[N] ≈ 3.36, speedup ≈ 2.40×, FLOP multiplier ≈ 1.61×
    assert theory.expected_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert theory.expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616)
    assert theory.predicted_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    assert round(theory.predicted_speedup(0.8, 4, 0.1), 2) == 2.40
    assert round(theory.flop_multiplier(0.8, 4, 0.1), 2) == 1.61


def test_gamma_one_and_limits():
    assert theory.predicted_speedup(0.6, 1, 0.2) == pytest.approx(1.6 / 1.2)
    assert theory.expected_tokens_per_round(1.0, 3) == 4.0
    assert theory.expected_tokens_per_round(0.0, 5) == 1.0
    assert theory.predicted_speedup(0.5, 0, 0.3) == 1.0
    with pytest.raises(ValueError):
        theory.predicted_speedup(1.2, 2, 0.1)
    with pytest.raises(ValueError):
        theory.predicted_speedup(0.5, 2, -0.1)


def test_optimal_gamma_by_enumeration():
    # α=0.8, c=0.1: S(γ) = (1-0.8^(γ+1)) / (0.2 (0.1γ+1)); by hand S(3)=2.269, S(4)=2.401,
    # S(5)=2.462, S(6)=2.477, S(7)=2.459 → 6
    assert theory.optimal_num_speculative_tokens(0.8, 0.1) == 6
    # no speedup possible when α <= c: γ=1 is returned
    assert theory.optimal_num_speculative_tokens(0.3, 0.5) == 1


def _round(i, drafted, accepted, committed=None, draft_ms=10.0, steps=None, verify_ms=100.0, elapsed=None):
    return RoundEvent(
        round_index=i,
        num_speculative_tokens=4,
        num_drafted=drafted,
        num_accepted=accepted,
        num_committed=accepted + 1 if committed is None else committed,
        accepted_mask=tuple([True] * accepted + ([False] if accepted < drafted else [])),
        draft_ms=draft_ms,
        draft_steps=drafted if steps is None else steps,
        verify_ms=verify_ms,
        elapsed_ms=elapsed if elapsed is not None else 0.0,
    )


def _tok(kind):
    return TokenEvent(1, kind, "x", 0.5, None, None, None, None, 0, 0, 4)


def test_metrics_fold_hand_built_rounds():
    m = SpeculationMetrics(baseline_tokens_per_s=10.0)
    # round 0: 4 drafted, 4 accepted (+bonus) = 5 tokens; round 1: 4 drafted, 1 accepted = 2;
    # round 2: 4 drafted, 0 accepted = 1. Total 8 tokens in 400 ms → 20 tokens/s.
    for i, (d, a, el) in enumerate([(4, 4, 150.0), (4, 1, 280.0), (4, 0, 400.0)]):
        for _ in range(a):
            m.update(_tok(TokenKind.ACCEPTED))
        m.update(_tok(TokenKind.BONUS if a == d else TokenKind.RESAMPLED))
        m.update(_round(i, d, a, draft_ms=40.0, elapsed=el))
    m.update(DoneEvent(StopReason.EOS, (), (), "", 5.0, 400.0, 3))
    assert m.num_tokens == 8
    # judged positions: 4 (all accepted), 2 (1 accepted + the rejection), 1 (the rejection)
    assert m.acceptance_rate == pytest.approx(5 / 7)
    assert m.accepted_per_drafted == pytest.approx(5 / 12)
    assert m.cumulative_acceptance_rate() == pytest.approx([1.0, 5 / 6, 5 / 7])
    assert m.acceptance_rate_per_round() == pytest.approx([1.0, 0.5, 0.0])
    # position 0 reached 3x, accepted 2x; position 1 reached 2x (rounds 0, 1), accepted 1x;
    # positions 2 and 3 reached once (round 0), accepted once
    assert m.acceptance_by_position() == [(2, 3), (1, 2), (1, 1), (1, 1)]
    assert m.mean_tokens_per_round == pytest.approx(8 / 3)
    assert m.tokens_per_s == pytest.approx(20.0)
    assert m.measured_speedup == pytest.approx(2.0)
    assert m.draft_step_ms == pytest.approx(10.0)  # 120 ms over 12 steps
    assert m.cost_ratio == pytest.approx(10.0 / 100.0)  # baseline step = 100 ms
    assert m.predicted_speedup == pytest.approx(theory.predicted_speedup(5 / 7, 4, 0.1))
    assert m.summary()["num_resampled"] == 2 and m.summary()["num_bonus"] == 1


def test_metrics_without_drafts():
    m = SpeculationMetrics()
    m.update(_tok(TokenKind.BONUS))
    m.update(_round(0, 0, 0, elapsed=50.0))
    assert m.acceptance_rate is None and m.predicted_speedup is None and m.measured_speedup is None
    assert m.tokens_per_s == pytest.approx(20.0)


def test_mean_gamma_ignores_rounds_that_drafted_nothing():
    m = SpeculationMetrics()
    m.update(_round(0, 4, 2))
    m.update(_round(1, 0, 0))
    assert m.mean_num_speculative_tokens == 4


def test_decode_time_adds_up_over_two_streams():
    m = SpeculationMetrics()
    for i, elapsed in enumerate((100.0, 200.0)):
        m.update(_round(i, 4, 2, elapsed=elapsed))
    for i, elapsed in enumerate((50.0, 80.0)):  # a second stream restarts its clock at 0
        m.update(_round(i, 4, 2, elapsed=elapsed))
    assert m.decode_ms == 280.0
