"""Break-even acceptance at measured costs (specchat.core.costs.BreakEven), hand-computed.

A round of γ costs T(γ)/t₁ = γ·c + v(γ+1)/t₁ target steps and commits Σ_{k=0..γ} α^k tokens
(Leviathan et al. 2023, Equation 1, with the round's time measured): it pays above the α* that
makes the two equal. Every number below is worked out by hand in the test's docstring or comment.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from specchat.core.costs import BreakEven, CostEstimator
from specchat.core.events import RoundEvent
from specchat.core.evidence import break_even_sentence
from specchat.core.metrics import SpeculationMetrics


def test_gamma_1_breaks_even_at_c_plus_v2_minus_1():
    # t₁ = 10 ms, d = 1 ms, v(2) = 11.5 ms: c = 0.1, v(2)/t₁ = 1.15, a round 1.25 steps, α* = 0.25
    even = BreakEven(1, 0.1, 1.15)
    assert even.round_cost == pytest.approx(1.25)
    assert even.acceptance == pytest.approx(0.25)
    assert even.pays(0.3) and not even.pays(0.2)  # 1.3 > 1.25 > 1.2
    assert break_even_sentence(even) == ("drafting one token costs c = 0.10 target steps and the verify pass over 2 positions "
                               "1.15, so drafting γ = 1 pays from α ≥ 0.25")


def test_a_drafter_dearer_than_the_target_can_never_pay():
    # c = 27 / 10 = 2.7 and v(2)/t₁ = 0.98: a round of γ = 1 costs 3.68 steps for at most 2 tokens
    even = BreakEven(1, 2.7, 0.98)
    assert even.never_pays and not even.pays_always and even.acceptance is None
    assert not even.pays(1.0)
    assert break_even_sentence(even).endswith("a round of γ = 1 costs 3.68 target steps and commits at most 2 tokens, "
                                    "so no acceptance rate can pay")


def test_a_round_cheaper_than_a_target_step_pays_at_any_alpha():
    # v(2) < t₁ (9.3 ms against 10 ms) and d = 0.2 ms: a round of γ = 1 costs 0.95 steps and
    # commits at least 1 token: α* = −0.05 is no threshold, the sentence says so instead
    even = BreakEven(1, 0.02, 0.93)
    assert even.pays_always and even.acceptance is None
    assert even.pays(0.0)
    assert break_even_sentence(even).endswith("a round of γ = 1 costs 0.95 target steps, no more than one, so drafting pays "
                                    "at any acceptance rate")


def test_gamma_2_solves_the_quadratic():
    # c = 0.2, v(3)/t₁ = 1.3: T(2)/t₁ = 1.7 = 1 + α + α²  →  α* = (−1 + √(1 + 4·0.7)) / 2 = 0.4747
    even = BreakEven(2, 0.2, 1.3)
    assert even.acceptance == pytest.approx((-1 + math.sqrt(3.8)) / 2, abs=1e-12)
    assert break_even_sentence(even).endswith("so drafting γ = 2 pays from α ≥ 0.48")  # rounded up, still true


@pytest.mark.parametrize(("round_cost", "shown"), [(1.2501, "0.26"), (1.003, "0.01"), (1.25, "0.25"), (1.98, "0.98")])
def test_the_threshold_is_rounded_up_and_never_reads_0(round_cost, shown):
    assert break_even_sentence(BreakEven(1, 0.0, round_cost)).endswith(f"pays from α ≥ {shown}")


@pytest.mark.parametrize(("round_cost", "shown"), [(1.999, "0.999"), (1.9951, "0.996"), (1.991, "0.991"),
                                                    (1.9996, "0.9996"), (1.99999, "0.99999")])
def test_a_threshold_near_1_is_never_written_as_alpha_at_least_1(round_cost, shown):
    """α* = 0.999 rounded up to two digits would read "pays from α ≥ 1.00", a condition no
    acceptance rate below 1 meets (a reply once said so at α 0.00)."""
    assert break_even_sentence(BreakEven(1, 0.0, round_cost)).endswith(
        f"pays only if nearly every draft is accepted (α ≥ {shown})")


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


def _reply(*rounds):
    metrics = SpeculationMetrics()
    for i, e in enumerate(rounds):
        metrics.update(dataclasses.replace(e, round_index=i))
    return metrics


def test_a_pause_note_gives_the_break_even_once_the_sample_carries_one():
    """t₁ = 10 ms (3 steps), d = 1, v(2) = 11.5 (3 drafting rounds): α* = 0.25, said with the
    controller's own prediction where it paused; with fewer timed rounds the note says so
    instead of a break-even from one round's timing."""
    step, drafted = _round(0, 0, 0, 0.0, 10.0), _round(0, 1, 0, 1.0, 11.5)
    paused = _round(0, 0, 0, 0.0, 10.0, paused=True, predicted=0.8)
    metrics = _reply(step, drafted, drafted, drafted, step, paused)
    assert metrics.pause_note() == ("drafting paused in 1 of 6 rounds (where it paused, its controller predicted at "
                                    "best 0.80× for every γ): here drafting one token costs c = 0.10 target steps "
                                    "and the verify pass over 2 positions 1.15, so drafting γ = 1 pays from α ≥ 0.25")
    thin = _reply(step, drafted, paused)
    assert thin.pause_note() == ("drafting paused in 1 of 3 rounds (where it paused, its controller predicted at best "
                                 "0.80× for every γ): here too few timed rounds to say where drafting pays "
                                 "(2 target steps, 1 drafting round)")


def test_a_pause_despite_an_alpha_over_the_break_even_says_why():
    """The same costs (α* = 0.25), every draft accepted (α = 1.00) and a pause: the note says the
    controller judged its latest rounds of one source, not the reply's pooled α."""
    step, drafted = _round(0, 0, 0, 0.0, 10.0), _round(0, 1, 1, 1.0, 11.5)
    paused = _round(0, 0, 0, 0.0, 10.0, paused=True, predicted=0.8)
    note = _reply(step, drafted, drafted, drafted, step, paused).pause_note()
    assert note.endswith("pays from α ≥ 0.25; this reply's α 1.00 clears that over all its drafts, but the controller "
                         "pauses on the latest rounds of the drafting source at hand alone (a hybrid's lookup and model "
                         "are judged apart), and there it predicted a loss")
    low = _reply(step, _round(0, 1, 0, 1.0, 11.5), _round(0, 1, 0, 1.0, 11.5), _round(0, 1, 0, 1.0, 11.5), step, paused)
    assert low.pause_note().endswith("pays from α ≥ 0.25")  # α 0.00 under it: nothing to explain


def test_timings_that_disagree_give_no_break_even():
    """A pass over 2 positions timed at 0.34 target steps (a busy moment during the target steps):
    no "pays at any acceptance rate" from it."""
    step, fast = _round(0, 0, 0, 0.0, 30.0), _round(0, 1, 0, 0.0, 10.2)
    metrics = _reply(step, step, step, fast, fast, fast, _round(0, 0, 0, 0.0, 30.0, paused=True))
    assert metrics.pause_note().endswith("here the timings disagree (a pass over 2 positions timed at 0.34 target "
                                         "steps): the machine's load changed during the reply, so no break-even is given")


def test_no_pause_no_note():
    metrics = SpeculationMetrics()
    metrics.update(_round(0, 1, 1, 1.0, 11.5))
    assert metrics.pause_note() is None
