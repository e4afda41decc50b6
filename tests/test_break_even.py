"""Break-even acceptance at measured costs (specchat.core.costs.BreakEven), hand-computed.

A round of γ costs T(γ)/t₁ = γ·c + v(γ+1)/t₁ target steps and commits Σ_{k=0..γ} α^k tokens
(Leviathan et al. 2023, Equation 1, with the round's time measured): it pays above the α* that
makes the two equal. Every number below is worked out by hand in the test's docstring or comment.
"""

from __future__ import annotations

import math

import pytest

from specchat.core.costs import BreakEven, CostEstimator
from specchat.core.events import RoundEvent
from specchat.core.metrics import SpeculationMetrics


def test_gamma_1_breaks_even_at_c_plus_v2_minus_1():
    # t₁ = 10 ms, d = 1 ms, v(2) = 11.5 ms: c = 0.1, v(2)/t₁ = 1.15, a round 1.25 steps, α* = 0.25
    even = BreakEven(1, 0.1, 1.15)
    assert even.round_cost == pytest.approx(1.25)
    assert even.acceptance == pytest.approx(0.25)
    assert even.pays(0.3) and not even.pays(0.2)  # 1.3 > 1.25 > 1.2
    assert even.sentence() == ("drafting one token costs c = 0.10 target steps and the verify pass over 2 positions "
                               "1.15, so drafting γ = 1 pays from α ≥ 0.25")


def test_a_drafter_dearer_than_the_target_can_never_pay():
    # c = 27 / 10 = 2.7 and v(2)/t₁ = 0.98: a round of γ = 1 costs 3.68 steps for at most 2 tokens
    even = BreakEven(1, 2.7, 0.98)
    assert even.never_pays and not even.pays_always and even.acceptance is None
    assert not even.pays(1.0)
    assert even.sentence().endswith("a round of γ = 1 costs 3.68 target steps and commits at most 2 tokens, "
                                    "so no acceptance rate can pay")


def test_a_round_cheaper_than_a_target_step_pays_at_any_alpha():
    # v(2) < t₁ (9.3 ms against 10 ms) and d = 0.2 ms: a round of γ = 1 costs 0.95 steps and
    # commits at least 1 token: α* = −0.05 is no threshold, the sentence says so instead
    even = BreakEven(1, 0.02, 0.93)
    assert even.pays_always and even.acceptance is None
    assert even.pays(0.0)
    assert even.sentence().endswith("a round of γ = 1 costs 0.95 target steps, no more than one, so drafting pays "
                                    "at any acceptance rate")


def test_gamma_2_solves_the_quadratic():
    # c = 0.2, v(3)/t₁ = 1.3: T(2)/t₁ = 1.7 = 1 + α + α²  →  α* = (−1 + √(1 + 4·0.7)) / 2 = 0.4747
    even = BreakEven(2, 0.2, 1.3)
    assert even.acceptance == pytest.approx((-1 + math.sqrt(3.8)) / 2, abs=1e-12)
    assert even.sentence().endswith("so drafting γ = 2 pays from α ≥ 0.48")  # rounded up, still true


@pytest.mark.parametrize(("round_cost", "shown"), [(1.2501, "0.26"), (1.003, "0.01"), (1.25, "0.25"), (1.999, "1.00")])
def test_the_threshold_is_rounded_up_and_never_reads_0(round_cost, shown):
    assert BreakEven(1, 0.0, round_cost).sentence().endswith(f"pays from α ≥ {shown}")


def _round(i, drafted, accepted, draft_ms, verify_ms, paused=False, predicted=None):
    mask = (True,) * accepted + (False,) * min(drafted - accepted, 1)
    return RoundEvent(round_index=i, num_speculative_tokens=drafted, num_drafted=drafted, num_accepted=accepted,
                      num_committed=accepted + 1, accepted_mask=mask, draft_ms=draft_ms, draft_steps=drafted,
                      verify_ms=verify_ms, elapsed_ms=0.0, round_ms=draft_ms + verify_ms, drafting_paused=paused,
                      paused_speedup=predicted)


def test_the_cost_estimator_and_the_metrics_give_the_same_break_even():
    # t₁ = 10 ms (a target-only round); one γ = 1 round: d = 1 ms, v(2) = 11.5 ms  →  α* = 0.25
    costs, metrics = CostEstimator(), SpeculationMetrics()
    for e in (_round(0, 0, 0, 0.0, 10.0), _round(1, 1, 1, 1.0, 11.5)):
        costs.update(e)
        metrics.update(e)
    assert costs.break_even(1) == metrics.break_even() == BreakEven(1, pytest.approx(0.1), pytest.approx(1.15))


def test_a_pause_the_reply_s_own_costs_agree_with_names_its_alpha():
    # t₁ = 10, d = 1, v(2) = 11.5 → α* = 0.25; the reply's α: 0 accepted of 2 judged = 0.00 < 0.25
    metrics = SpeculationMetrics()
    for e in (_round(0, 0, 0, 0.0, 10.0), _round(1, 1, 0, 1.0, 11.5), _round(2, 1, 0, 1.0, 11.5),
              _round(3, 0, 0, 0.0, 10.0, paused=True, predicted=0.8)):
        metrics.update(e)
    assert metrics.pause_note() == ("drafting paused in 1 of 4 rounds: here drafting one token costs c = 0.10 target "
                                    "steps and the verify pass over 2 positions 1.15, so drafting γ = 1 pays from "
                                    "α ≥ 0.25 (this reply's α: 0.00)")


def test_a_pause_the_reply_s_own_costs_contradict_says_what_the_controller_predicted():
    # the same costs (α* = 0.25) but every draft accepted (α = 1.00): by this reply's totals
    # drafting paid; the controller, pooling earlier rounds, had predicted 0.93× at best
    metrics = SpeculationMetrics()
    for e in (_round(0, 0, 0, 0.0, 10.0), _round(1, 1, 1, 1.0, 11.5),
              _round(2, 0, 0, 0.0, 10.0, paused=True, predicted=0.93)):
        metrics.update(e)
    note = metrics.pause_note()
    assert note.endswith("; at this reply's α 1.00 drafting would pay, but when it paused the controller, which "
                         "pools the rounds before (recent ones weighted more), predicted at best 0.93× for every γ")
    assert metrics.paused_speedup == 0.93


def test_no_pause_no_note():
    metrics = SpeculationMetrics()
    metrics.update(_round(0, 1, 1, 1.0, 11.5))
    assert metrics.pause_note() is None
