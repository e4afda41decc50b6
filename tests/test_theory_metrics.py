"""ALGORITHM.md's worked example and hand-built rounds folded by the metrics."""

import pytest

from specchat.core import theory
from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.core.metrics import SpeculationMetrics


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


def _round(i, drafted, accepted, committed=None, draft_ms=10.0, steps=None, verify_ms=100.0, round_ms=None,
           elapsed=0.0, timing=False):
    return RoundEvent(
        round_index=i,
        num_speculative_tokens=4 if drafted or not timing else 0,
        num_drafted=drafted,
        num_accepted=accepted,
        num_committed=accepted + 1 if committed is None else committed,
        accepted_mask=tuple([True] * accepted + ([False] if accepted < drafted else [])),
        draft_ms=draft_ms,
        draft_steps=drafted if steps is None else steps,
        verify_ms=verify_ms,
        elapsed_ms=elapsed,
        round_ms=draft_ms + verify_ms if round_ms is None else round_ms,
        timing=timing,
    )


def _tok(kind):
    return TokenEvent(1, kind, "x", 0.5, None, None, None, None, 0, 0, 4)


# (drafted, accepted, draft_ms, round_ms, timing): a timing round, three drafting rounds, an
# n-gram-style miss. 10 tokens in 660 ms of decoding.
HAND_ROUNDS = [(0, 0, 0.0, 100.0, True), (4, 4, 40.0, 160.0, False), (4, 1, 40.0, 160.0, False),
               (2, 0, 20.0, 130.0, False), (0, 0, 0.0, 110.0, False)]


def _fold(rounds) -> SpeculationMetrics:
    m = SpeculationMetrics()
    for i, (d, a, draft_ms, round_ms, timing) in enumerate(rounds):
        for _ in range(a):
            m.update(_tok(TokenKind.ACCEPTED))
        m.update(_tok(TokenKind.BONUS if a == d else TokenKind.RESAMPLED))
        m.update(_round(i, d, a, draft_ms=draft_ms, round_ms=round_ms, timing=timing))
    return m


def test_metrics_fold_hand_built_rounds():
    m = _fold(HAND_ROUNDS)
    m.update(DoneEvent(StopReason.EOS, (), (), "", 5.0, 660.0, 3))
    assert m.num_tokens == 10 and m.num_committed == 10 and m.decode_ms == 660.0
    # judged positions: 4 (all accepted), 2 (1 accepted + the rejection), 1 (the rejection)
    assert m.acceptance_rate == pytest.approx(5 / 7)
    assert m.accepted_per_drafted == pytest.approx(5 / 10)
    assert m.cumulative_acceptance_rate() == pytest.approx([None, 1.0, 5 / 6, 5 / 7, 5 / 7])
    assert m.acceptance_rate_per_round() == pytest.approx([None, 1.0, 0.5, 0.0, None])
    # position 0 reached 3x, accepted 2x; position 1 reached 2x, accepted 1x; 2 and 3 once, once
    assert m.acceptance_by_position() == [(2, 3), (1, 2), (1, 1), (1, 1)]
    assert m.mean_tokens_per_round == pytest.approx(10 / 5)
    assert m.tokens_per_s == pytest.approx(10 / 0.66)
    # t₁: the two rounds that drafted nothing took 100 and 110 ms
    assert m.target_step_ms == pytest.approx(105.0)
    assert m.num_target_only_rounds == 2 and m.num_timing_rounds == 1
    assert m.target_only_tokens_per_s == pytest.approx(1000 / 105)
    # measured: 10 tokens would take 10 × 105 ms target-only; they took 660 ms
    assert m.measured_speedup == pytest.approx(1050 / 660)
    # d = 100 ms over 10 drafted tokens; c = d / t₁
    assert m.draft_step_ms == pytest.approx(10.0)
    assert m.cost_ratio == pytest.approx(10.0 / 105.0)
    # v(n): rounds apart from drafting: 120 ms at n = 5 (twice), 110 ms at n = 3: the line
    # 95 + 5n; its slope is shrunk by S_nn/(S_nn + 20), S_nn = 2(2/3)² + (4/3)² = 24/9
    slope = 5.0 * (24 / 9) / (24 / 9 + 20)
    v0, v1 = m.costs.verify_fit()
    assert v1 == pytest.approx(slope) and v0 == pytest.approx(350 / 3 - slope * 13 / 3)
    # predicted for the rounds as run: two target-only rounds (1 token, t₁ each), two rounds
    # of γ = 4 (E[N](α, 4) tokens, 4d + v(5) each) and one of γ = 2
    e4, e2 = theory.expected_tokens_per_round(5 / 7, 4), theory.expected_tokens_per_round(5 / 7, 2)
    tokens = 2 + 2 * e4 + e2
    time_ms = 2 * 105 + 2 * (40 + v0 + 5 * v1) + (20 + v0 + 3 * v1)
    assert m.predicted_speedup == pytest.approx(tokens * 105 / time_ms)
    curve = m.predicted_speedup_curve(3)
    assert curve == pytest.approx([theory.expected_tokens_per_round(5 / 7, g) * 105 / (10 * g + v0 + v1 * (g + 1))
                                   for g in (1, 2, 3)])
    summary = m.summary()
    assert summary["num_resampled"] == 2 and summary["num_bonus"] == 3
    assert summary["speedup"] == pytest.approx(1050 / 660) and summary["speedup_predicted"] == m.predicted_speedup


def test_target_only_stream_measures_exactly_one():
    """Every round drafted nothing: t₁ is their mean time, so the speedup is 1 exactly, and the
    prediction too; with no draft there is no α and no c."""
    m = _fold([(0, 0, 0.0, ms, False) for ms in (90.0, 130.0, 110.0)])
    assert m.measured_speedup == pytest.approx(1.0) and m.predicted_speedup is None
    assert m.acceptance_rate is None and m.cost_ratio is None
    assert m.tokens_per_s == pytest.approx(3 / 0.33)


def test_no_speedup_without_a_target_only_round():
    """Every round drafted: t₁ was not timed in this stream, so no speedup is claimed."""
    m = _fold(HAND_ROUNDS[1:4])
    assert m.acceptance_rate == pytest.approx(5 / 7)
    assert m.measured_speedup is None and m.predicted_speedup is None and m.cost_ratio is None


def test_mean_gamma_ignores_rounds_that_drafted_nothing():
    m = SpeculationMetrics()
    m.update(_round(0, 4, 2))
    m.update(_round(1, 0, 0))
    assert m.mean_num_speculative_tokens == 4


def test_decode_time_adds_up_over_two_streams():
    m = SpeculationMetrics()
    for i, (elapsed, ms) in enumerate(((100.0, 100.0), (200.0, 100.0))):
        m.update(_round(i, 4, 2, elapsed=elapsed, round_ms=ms))
    for i, (elapsed, ms) in enumerate(((50.0, 50.0), (80.0, 30.0))):  # a second stream restarts its clock
        m.update(_round(i, 4, 2, elapsed=elapsed, round_ms=ms))
    assert m.decode_ms == 280.0


def test_a_paused_reply_says_why_in_its_summary_with_hand_computed_costs():
    """Rounds: one target-only step of 10 ms (t₁), three γ = 1 rounds drafting 5 ms and verifying
    16 ms (v(2), rejected), two paused target-only steps of 10 ms. The verify pass over 2 tokens
    costs 16/10 = 1.60 target steps; γ = 1 breaks even at α* = (5 + 16)/10 − 1 = 1.1: no α pays
    (and the reply measured 6·10/93 = 0.65×, which does not say otherwise)."""
    from specchat.core.events import RoundEvent
    from specchat.core.metrics import SpeculationMetrics
    from specchat.ui.html.render import reply_summary

    def event(i, drafted, draft_ms, verify_ms, paused=False):
        return RoundEvent(round_index=i, num_speculative_tokens=drafted, num_drafted=drafted, num_accepted=0,
                          num_committed=1, accepted_mask=(False,) * drafted, draft_ms=draft_ms, draft_steps=drafted,
                          verify_ms=verify_ms, elapsed_ms=0.0, round_ms=draft_ms + verify_ms, drafting_paused=paused)

    metrics = SpeculationMetrics()
    for e in (event(0, 0, 0.0, 10.0), event(1, 1, 5.0, 16.0), event(2, 1, 5.0, 16.0), event(3, 1, 5.0, 16.0),
              event(4, 0, 0.0, 10.0, True), event(5, 0, 0.0, 10.0, True)):
        metrics.update(e)
    assert metrics.num_paused_rounds == 2 and metrics.summary()["num_paused_rounds"] == 2
    even = metrics.break_even()
    assert even.draft_cost == pytest.approx(0.5) and even.verify_cost == pytest.approx(1.6)
    assert even.round_cost == pytest.approx(2.1) and even.never_pays and even.acceptance is None
    one = SpeculationMetrics()
    one.update(event(0, 0, 0.0, 10.0))
    assert reply_summary(one).startswith("1 token · ") and reply_summary(metrics).startswith("6 tokens · ")
    assert reply_summary(metrics).endswith(
        "drafting paused in 2 of 6 rounds: here drafting one token costs c = 0.50 target steps and the verify pass "
        "over 2 positions 1.60: a round of γ = 1 costs 2.10 target steps and commits at most 2 tokens, so no "
        "acceptance rate can pay")
