"""Adaptive γ: the controller's estimates and choice against hand-computed numbers, and the
engine with adaptive γ on stays lossless (greedy identity, exact distribution)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch
from lossless import (
    FakeLM,
    V,
    assert_matches,
    events_of,
    exact_sequences,
    hashed_logits,
    make_drafter,
    model_drafter,
    naive_greedy_fn,
    run_many,
)

from specchat.core import adaptive
from specchat.core.adaptive import AdaptiveGamma
from specchat.core.costs import CostEstimator
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent
from specchat.runtimes.transformers import TransformersRuntime


def _round(mask, *, drafted=None, draft_ms=30.0, verify_ms=100.0, gamma=8):
    drafted = len(mask) if drafted is None else drafted
    accepted = next((i for i, a in enumerate(mask) if not a), len(mask))
    return RoundEvent(
        round_index=0, num_speculative_tokens=gamma, num_drafted=drafted, num_accepted=accepted,
        num_committed=accepted + 1, accepted_mask=tuple(mask), draft_ms=draft_ms, draft_steps=drafted,
        verify_ms=verify_ms, elapsed_ms=0.0, round_ms=draft_ms + verify_ms,
    )


def test_one_round_gives_the_hand_computed_estimates_and_choice():
    """After one round (accept, accept, reject; 30 ms drafting 3 tokens; 100 ms verify):
    pooled α = (2 + 0.6·2)/(3 + 2) = 0.64; β1 = β2 = (1 + 1.28)/3 = 0.76, β3 = 1.28/3,
    β4… = 0.64; t_draft = 10 ms; v0 = 100, v1 = 0 (one n seen).
    S(γ) = E[N](γ)·100/(10γ + 100): S(1) = 1.6, S(2) = 1.948, S(3) = 1.98772, S(4) = 1.95840."""
    assert adaptive.PRIOR_ACCEPTANCE == 0.6 and adaptive.PRIOR_WEIGHT == 2.0  # the numbers below use them
    c = AdaptiveGamma(8)
    assert c.choose() == 1  # nothing timed yet: the initial γ, the cheapest round that measures
    assert AdaptiveGamma(8, initial_num_speculative_tokens=4).choose() == 4
    assert AdaptiveGamma(3, initial_num_speculative_tokens=6).choose() == 3  # clipped to γ_max
    c.update(_round([True, True, False]))
    assert c.pooled_acceptance == pytest.approx(0.64)
    beta = c.acceptance_by_position()
    assert beta[:4] == pytest.approx([0.76, 0.76, 1.28 / 3, 0.64])
    assert beta[4:] == pytest.approx([0.64] * 4)
    assert c.draft_ms_per_token == pytest.approx(10.0)
    assert c.verify_ms_fit() == pytest.approx((100.0, 0.0))
    assert c.expected_tokens_per_round(3) == pytest.approx(1 + 0.76 + 0.5776 + 0.5776 * 1.28 / 3)
    speedups = [c.predicted_speedup(g) for g in (1, 2, 3, 4)]
    assert speedups == pytest.approx([1.6, 1.948, 1.98772, 1.95840], abs=1e-5)
    assert c.choose() == 3


def test_uniform_acceptance_reproduces_leviathan_equation_1():
    """With the same β at every position, E[N](γ) = (1 − α^(γ+1)) / (1 − α)."""
    c = AdaptiveGamma(6)
    alpha = c.pooled_acceptance  # the prior alone: every position equals it
    for gamma in range(7):
        assert c.expected_tokens_per_round(gamma) == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha))


def test_verify_cost_fit_on_a_line_is_the_shrunk_slope_and_ignores_rounds_without_drafts():
    """Points on 100 + 10·k at k = 2 and k = 6 drafts, that is n = k + 1 = 3 and 7 checked
    positions (weights 0.9 and 1 after decay): least squares gives slope 10, shrunk by
    S_nn/(S_nn + SLOPE_PRIOR) with S_nn = Σw(n − n̄)²; the line passes through the weighted
    means."""
    c = AdaptiveGamma(8)
    c.costs.anchor_target_step = False  # the plain fit (with t₁ as a point: the test after this one)
    c.update(_round([True, False], verify_ms=120.0))  # n = 2
    c.update(_round([True] * 6, verify_ms=160.0))  # n = 6
    c.update(_round([], drafted=0, verify_ms=500.0))  # no drafts: not part of the fit
    w2, w6 = 0.9, 1.0  # the k = 2 round decayed once; the no-draft round only times t₁
    mean_k = (2 * w2 + 6 * w6) / (w2 + w6)
    s_nn = w2 * (2 - mean_k) ** 2 + w6 * (6 - mean_k) ** 2  # the same in n = k + 1
    slope = 10.0 * s_nn / (s_nn + adaptive.SLOPE_PRIOR)
    v0, v1 = c.verify_ms_fit()
    assert v1 == pytest.approx(slope)
    assert v0 == pytest.approx(100.0 + 10.0 * mean_k - slope * (mean_k + 1))
    assert c.costs.target_step_ms == pytest.approx(500.0)


def test_rounds_without_drafts_and_broken_timings_change_nothing():
    c = AdaptiveGamma(8)
    c.update(_round([True, True, False]))
    before = (c.acceptance_by_position(), c.draft_ms_per_token, c.verify_ms_fit(), c.choose())
    for _ in range(40):
        c.update(_round([], drafted=0, draft_ms=0.1, verify_ms=300.0))
    c.update(_round([True, True, False], draft_ms=float("nan"), verify_ms=float("inf")))
    after = (c.acceptance_by_position(), c.draft_ms_per_token, c.verify_ms_fit(), c.choose())
    assert after[1:] == before[1:]  # d and v(n) untouched by no-draft rounds and non-finite timings
    assert after[0][:3] != before[0][:3]  # (the last round's acceptance still counts)


def test_a_convex_verify_cost_keeps_a_positive_intercept():
    c = AdaptiveGamma(8)
    for n, ms in ((1, 10.0), (2, 12.0), (8, 200.0)):
        c.update(_round([True] * n, verify_ms=ms))
    v0, v1 = c.verify_ms_fit()
    assert v0 > 0 and v1 >= 0
    assert c.predicted_speedup(1) is not None


def test_choice_goes_to_the_ends_for_a_perfect_and_a_useless_drafter():
    good, bad = AdaptiveGamma(8), AdaptiveGamma(8)
    for _ in range(30):
        good.update(_round([True] * 8, draft_ms=8.0))  # 1 ms per draft, always right
        bad.update(_round([False], drafted=8, draft_ms=80.0))  # 10 ms per draft, always wrong
    assert good.choose() == 8
    assert bad.choose() == 1


def test_estimates_follow_a_change_of_regime():
    """Exponential decay: after 40 rounds of rejections the earlier acceptances barely count."""
    c = AdaptiveGamma(8)
    for _ in range(40):
        c.update(_round([True] * 8, draft_ms=8.0))
    assert c.choose() == 8
    for _ in range(40):
        c.update(_round([False], drafted=8, draft_ms=8.0))
    assert c.acceptance_by_position()[0] < 0.1
    assert c.choose() == 1


def test_max_gamma_must_be_positive():
    with pytest.raises(ValueError, match="max_num_speculative_tokens"):
        AdaptiveGamma(0)


# -- the engine with adaptive γ ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["self", "other", "ngram"])
def test_adaptive_greedy_output_is_target_only_greedy(kind):
    """Whatever γ the controller picks, greedy output equals the naive target-only loop."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4]
    expected = naive_greedy_fn(fn_t, prompt, 30)
    for _ in range(2):  # twice: the second generation starts from the learned estimates
        events = events_of(engine, prompt, make_drafter(kind), num_speculative_tokens=6, max_new_tokens=30,
                           adaptive_gamma=True)
        assert list(events[-1].token_ids) == expected
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        # γ in 1..6, or 0 where drafting paused (a real clock: the fake models' timings decide) or
        # where the controller timed t₁ (no timing rounds here: measure_speedup is off)
        assert all(r.num_drafted <= r.num_speculative_tokens <= 6
                   and (r.num_speculative_tokens or r.drafting_paused or r.timing) for r in rounds)
        assert sum(r.timing for r in rounds) <= 1
    assert (make_drafter(kind).name, 6, True, "") in engine.gamma_controllers


def test_confidence_stop_is_greedy_only():
    """A drafter that is the target itself with a flat distribution (top p < 0.4): when greedy it
    stops after one unsure token; when sampling every draft matches q = p, so it drafts all γ."""
    fn_t = hashed_logits(V, seed=11, scale=0.3)  # nearly uniform over 6 ids: top p < 0.4
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = model_drafter(FakeLM(V, fn_t), V)
    greedy = events_of(engine, [3, 1], drafter, num_speculative_tokens=5, max_new_tokens=20, adaptive_gamma=True)
    # (the controller's one target-only round that times t₁ drafts nothing, and so does a last
    # round with one token left to commit; whether drafting pauses depends on real timings)
    rounds = [e for e in greedy if isinstance(e, RoundEvent)]
    drafting = [e for e in rounds[:-1] if not (e.timing or e.drafting_paused)]
    assert drafting and {e.num_drafted for e in drafting} == {1}
    # a sampled reply's controller, set to start at γ = 4 (the default starts at 1)
    engine.gamma_controllers[(drafter.name, 5, False, "")] = AdaptiveGamma(5, initial_num_speculative_tokens=4)
    sampled = events_of(engine, [3, 1], drafter, num_speculative_tokens=5, max_new_tokens=20, adaptive_gamma=True,
                        temperature=1.0, seed=0)
    first = next(e for e in sampled if isinstance(e, RoundEvent))
    assert first.num_drafted == 4  # the initial γ, not cut by the confidence stop


def test_adaptive_gamma_keeps_the_exact_distribution():
    """Sampled 3-token replies at T = 1 with adaptive γ (γ_max 3), 2000 seeds: chi-square against
    exact enumeration (fails at p < 1e-4), with both accept and residual paths exercised. Each
    reply starts from a fresh controller: one carried over 2000 replies would pause drafting (on
    real timings of fake models a γ = 1 round may not pay) and leave few drafts to judge."""

    class Fresh(dict):
        def setdefault(self, key, default):
            return default

    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    engine.gamma_controllers = Fresh()
    prompt = [3, 1]
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    exact = exact_sequences(fn_t, prompt, 3, temperature=1.0)
    stats = Counter()
    counts = run_many(engine, prompt, drafter, 2000, stats=stats, num_speculative_tokens=3, max_new_tokens=3,
                      temperature=1.0, adaptive_gamma=True)
    assert stats["accepted"] >= 100 and stats["resampled"] >= 100
    assert_matches(counts, exact, 2000)


# -- γ = 0 with probes: drafting pauses when no γ pays -----------------------------------------
def _target_step(ms=10.0):
    return _round([], drafted=0, draft_ms=0.0, verify_ms=ms)


def _rejected_rounds(c, n, *, draft_ms, verify_ms):
    for _ in range(n):
        c.update(_round([False], drafted=1, draft_ms=draft_ms, verify_ms=verify_ms, gamma=1))


def test_drafting_pauses_at_the_break_even_and_probes_on_a_hand_computed_schedule():
    """t₁ = 10 ms, d = 5 ms, v(2) = 16 ms (one n seen: v flat), 10 rejected γ = 1 rounds.
    β1 = (0 + 2·pooled)/(R + 2), pooled = (0 + 1.2)/(R + 2), R = Σ_{j<10} 0.9^j = 6.5132;
    S(1) = (1 + β1)·10/21 < 1, and every γ > 1 costs more for less: paused. A probe of γ = 1
    loses 21 − (1 + β1)·10 ms against target-only steps, so P = ceil(loss/(0.02·10) + 1 − (1 + β1))
    = 54 (β1 = 0.0331); break-even α for γ = 1: 1 + α = 21/10, α = 1.1 > 1 → 1.0."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    reached = sum(0.9**j for j in range(10))
    pooled = 1.2 / (reached + 2)
    beta1 = 2 * pooled / (reached + 2)
    assert c.acceptance_by_position()[0] == pytest.approx(beta1)
    assert c.predicted_speedup(1) == pytest.approx((1 + beta1) * 10 / 21)
    assert c.probe_interval(1) == 54 == math.ceil((21 - (1 + beta1) * 10) / (0.02 * 10) + 1 - (1 + beta1))
    assert c.break_even_acceptance(1) == 1.0
    choices = [c.choose() for _ in range(108)]
    assert c.paused
    assert [i for i, g in enumerate(choices) if g] == [53, 107] and set(choices) == {0, 1}
    c.new_reply()  # a new reply's first round probes (its drafter has just read the prompt)
    assert [c.choose() for _ in range(3)] == [1, 0, 0]


def test_without_timing_rounds_the_controller_times_t1_itself_once_per_reply_then_pauses():
    """No target-only step timed, one rejected γ = 1 round (5 ms drafting, 16 ms verify): the
    next choice is 0, a target-only step that times t₁; with t₁ = 10 ms, S(1) = (1 + β1)·10/21
    < 1 (β1 = 2·pooled/3, pooled = 1.2/3): paused. Until t₁ arrives it asks once per reply, then
    drafts the formula's γ (v(1) standing in for t₁); outside a reply it never asks."""
    c = AdaptiveGamma(4)
    _rejected_rounds(c, 1, draft_ms=5.0, verify_ms=16.0)
    assert c.choose() == 1  # outside a reply (no new_reply yet) it never asks
    c.new_reply()
    assert c.choose() == 0 and not c.paused  # timing t₁, not a pause
    assert c.choose() == 1  # asked once: this reply's t₁ round did not arrive, so draft on
    c.new_reply()
    assert c.choose() == 0  # a new reply asks again
    c.update(dataclasses.replace(_target_step(10.0), round_index=5))  # past the warm-up rounds
    assert c.predicted_speedup(1) == pytest.approx((1 + 2 * 0.4 / 3) * 10 / 21)
    assert c.choose() == 1 and c.paused  # paused; the reply's first paused round is its probe
    assert c.choose() == 0 and c.paused


def test_the_controllers_verify_fit_takes_its_slope_from_t1_at_one_position():
    """Rounds that all check n = 3 positions (20 ms) and t₁ = 10 ms: the least-squares line
    through (1, 10) and (3, 20), equally weighted, has slope 5; S_nn = 2·1² = 2 shrinks it to
    5·2/22; the line passes through the drafting rounds' (3, 20). A flat fit would say v(9) = 20."""
    costs = CostEstimator(anchor_target_step=True)
    costs.update(_target_step(10.0))
    costs.update(_round([False, False], drafted=2, draft_ms=0.0, verify_ms=20.0, gamma=2))
    slope = 5.0 * 2 / (2 + adaptive.SLOPE_PRIOR)
    assert costs.verify_fit() == pytest.approx((20.0 - 3 * slope, slope))
    assert costs.verify_ms(9) == pytest.approx(20.0 + 6 * slope)
    assert CostEstimator().verify_fit() is None


def test_break_even_acceptance_solves_leviathan_equation_1_against_the_round_time():
    """t₁ = 10, d = 1, v(2) = 12: γ = 1 breaks even at 1 + α = 13/10 → α = 0.3. v(3) follows the
    line through (2, 12) whose slope is the least-squares one with t₁ at n = 1 (weight W = 1 + 0.9
    + 0.81 for both), 2, shrunk by S_nn/(S_nn + 20), S_nn = W/2; γ = 2 breaks even at
    1 + α + α² = (2 + v(3))/10."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 3, draft_ms=1.0, verify_ms=12.0)
    assert c.break_even_acceptance(1) == pytest.approx(0.3)
    w = 1 + 0.9 + 0.81
    v3 = 12.0 + 2.0 * (w / 2) / (w / 2 + adaptive.SLOPE_PRIOR)
    need = (2.0 + v3) / 10.0
    assert c.break_even_acceptance(2) == pytest.approx((-1 + (1 + 4 * (need - 1)) ** 0.5) / 2)


def test_probes_resume_drafting_when_the_drafter_turns_right():
    """Cheap rounds (t₁ 10, d 1, v 12: γ = 1 pays from α = 0.3): rejections pause drafting; the
    probes are then accepted, α climbs past the break-even and drafting resumes (no pause)."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 20, draft_ms=1.0, verify_ms=12.0)
    assert c.choose() == 0 and c.paused
    for _ in range(200):
        gamma = c.choose()
        if gamma:  # a probe, accepted whole
            c.update(_round([True] * gamma, draft_ms=1.0 * gamma, verify_ms=12.0, gamma=gamma))
        else:
            c.update(_target_step(10.0))
        if not c.paused:
            break
    assert not c.paused and c.choose() >= 1


def test_a_paused_drafters_probes_cost_at_most_the_budget_over_a_long_reply():
    """A drafter that is always wrong (t₁ 10, d 5, v(2) 16): over 2000 rounds, the time spent
    against target-only for the same tokens is at most 2 % more (PROBE_BUDGET) (each probe commits 1 token in
    21 ms where a step takes 10), up to the estimate's prior (β1 ≈ 0.03 where the truth is 0)."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    time_ms = tokens = 0
    for _ in range(2000):
        gamma = c.choose()
        if gamma:
            c.update(_round([False], drafted=gamma, draft_ms=5.0 * gamma, verify_ms=16.0, gamma=gamma))
            time_ms, tokens = time_ms + 5.0 * gamma + 16.0, tokens + 1
        else:
            c.update(_target_step(10.0))
            time_ms, tokens = time_ms + 10.0, tokens + 1
    loss = time_ms / (tokens * 10.0) - 1
    assert 0.013 < loss <= adaptive.PROBE_BUDGET + 0.002  # probes ran (α stays measured), within the budget


def test_a_probe_leaves_the_draft_cost_alone():
    """A probe's drafting time includes the drafter catching up on the paused rounds' tokens: it
    updates α and v(n), not d, and the catch-up is charged to the next probes' interval."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    d = c.draft_ms_per_token
    while not c.choose():
        c.update(_target_step(10.0))
    before = c.probe_interval(1)
    c.update(_round([False], drafted=1, draft_ms=500.0, verify_ms=16.0, gamma=1))
    assert c.draft_ms_per_token == pytest.approx(d)
    # but the catch-up counts in what a probe costs: 495 ms more per probe, so probes grow rarer
    # by 495 / (0.02 · 10) = 2475 rounds
    assert c.probe_catch_up_ms == pytest.approx(500.0 - d)
    assert c.probe_interval(1) - before == pytest.approx(2475, abs=1)
    c.choose()  # paused again: not a probe
    c.update(_round([False], drafted=1, draft_ms=500.0, verify_ms=16.0, gamma=1))
    assert c.draft_ms_per_token > d


def test_a_probe_drafts_the_gamma_that_loses_least():
    """Paused at t₁ 10, d 5, v flat 16: a probe of γ loses 5γ + 16 − 10·E[N](γ) ms, least at γ = 1
    (21 − 10.33 = 10.67 vs 26 − 10.34 for γ = 2), which need not be the γ with the best S."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    assert c.probe_gamma() == 1
    c.new_reply()
    assert c.choose() == 1 and c.paused  # the reply's first probe drafts that γ

    # the best S and the least loss part: t₁ 10, d 0.5, v(3) = 20 at γ = 2 and β ≈ 0.5 (T(1), T(2)
    # from the fitted line): S(2) > S(1), yet a γ = 2 probe loses more than a γ = 1 probe
    mixed = AdaptiveGamma(2)
    mixed.update(_target_step(10.0))
    for mask in [[False], [True, False], [True, True], [False]] * 10:
        mixed.update(_round(mask, drafted=2, draft_ms=1.0, verify_ms=20.0, gamma=2))
    b1, b2 = mixed.acceptance_by_position()
    t_1, t_2 = mixed.costs.round_ms(1), mixed.costs.round_ms(2)
    assert t_2 == pytest.approx(21.0)  # the line passes through the measured rounds
    assert 10 * (1 + b1) / t_1 < 10 * (1 + b1 + b1 * b2) / t_2 < 1
    assert t_1 - 10 * (1 + b1) < t_2 - 10 * (1 + b1 + b1 * b2)
    assert mixed.probe_gamma() == 1
    mixed.new_reply()
    assert mixed.choose() == 1 and mixed.paused


def test_a_fresh_controllers_first_two_rounds_leave_the_cost_fit_alone():
    """The first reply's rounds 0 and 1 (slow first passes: 500 ms) are left out of t₁, d and v;
    from round 2 on, and in later replies from round 0, every round counts."""
    def at(index, event):
        return dataclasses.replace(event, round_index=index)

    c = AdaptiveGamma(4)
    c.new_reply()
    c.update(at(0, _round([False], drafted=1, draft_ms=400.0, verify_ms=500.0, gamma=1)))
    c.update(at(1, _round([False], drafted=1, draft_ms=400.0, verify_ms=500.0, gamma=1)))
    assert c.draft_ms_per_token is None and c.verify_ms_fit() is None
    assert c.acceptance_by_position()[0] < adaptive.PRIOR_ACCEPTANCE  # their acceptance counts
    c.update(at(2, _target_step(10.0)))
    c.update(at(3, _round([False], drafted=1, draft_ms=5.0, verify_ms=16.0, gamma=1)))
    assert c.costs.target_step_ms == 10.0 and c.draft_ms_per_token == 5.0 and c.costs.verify_ms(2) == 16.0
    c.new_reply()
    c.update(at(0, _round([False], drafted=1, draft_ms=5.0, verify_ms=26.0, gamma=1)))
    assert c.costs.verify_ms(2) == pytest.approx((0.9 * 16.0 + 26.0) / 1.9)


def test_a_replys_first_probe_keeps_the_catch_up_of_the_last_one():
    """A reply's first probe owes no catch-up (its drafter just read the prompt), so it neither
    resets the catch-up charged to the probe interval nor is left out of d."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    c.probe_catch_up_ms = 300.0  # what the last scheduled probe spent catching up
    c.new_reply()
    assert c.choose() == 1
    c.update(dataclasses.replace(_round([False], drafted=1, draft_ms=7.0, verify_ms=16.0, gamma=1), round_index=2))
    assert c.probe_catch_up_ms == 300.0
    assert c.draft_ms_per_token > 5.0  # its 7 ms counted in d


def test_a_paused_controller_decides_again_only_when_its_probe_is_due(monkeypatch):
    """Paused (t₁ 10, d 5, v(2) 16: drafting loses), the controller reads its estimates once when
    it answers 0 after a probe and once more when the next probe is due, P rounds on: the P − 2
    target-only steps between cost no estimate at all, and the due round drafts (the probe)."""
    c = AdaptiveGamma(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    c.new_reply()
    assert c.choose() == 1 and c.paused  # the reply's first paused choice is a probe
    c.update(_round([False], drafted=1, draft_ms=5.0, verify_ms=16.0, gamma=1))
    interval = c.probe_interval(c.probe_gamma())
    assert interval > 3
    reads = []
    curves = c._curves
    monkeypatch.setattr(c, "_curves", lambda: reads.append(1) or curves())
    choices = []
    for _ in range(interval - 1):
        choices.append(c.choose())
        c.update(_target_step(10.0))
    assert choices == [0] * (interval - 1) and len(reads) == 1
    assert c.choose() == 1 and len(reads) == 2  # due: decided again, and the probe drafts


def test_on_a_tiny_pair_that_never_pays_the_defaults_pause_drafting_and_keep_the_reply():
    """A tiny target and an equal-size random drafter (scripts/make_tiny_pair.py builds the same
    pair for the bench): a drafted token costs about a target step and is rarely right, so no
    γ can pay. With the CLI's and the app's defaults (adaptive γ up to 12, timing rounds) a
    300-token greedy reply drafts in at most 5 % of its rounds (the first rounds and the probes:
    the bench measured 0.97× target-only on this pair) and is the target's own greedy reply."""
    from tiny_models import tiny_model

    target = tiny_model(vocab_size=257, family="qwen2", seed=0, hidden_size=64, max_positions=2048)
    draft_model = tiny_model(vocab_size=257, family="qwen2", seed=1, hidden_size=64, max_positions=2048)
    engine = SpeculativeEngine(TransformersRuntime(target), None, eos_token_ids=set())
    prompt = list(range(40, 80))
    config = dict(max_new_tokens=300, num_speculative_tokens=12, adaptive_gamma=True, measure_speedup=True)
    events = events_of(engine, prompt, model_drafter(draft_model, 257), **config)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    drafted = [r for r in rounds if r.num_drafted]
    assert len(rounds) >= 250 and len(drafted) <= 0.05 * len(rounds), (len(drafted), len(rounds))

    def target_logits(ids):
        with torch.no_grad():
            return target(torch.tensor([ids])).logits[0, -1]

    assert list(events[-1].token_ids) == naive_greedy_fn(target_logits, prompt, 300)
