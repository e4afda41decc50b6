"""Adaptive γ: the controller's estimates and choice against hand-computed numbers, and the
engine with adaptive γ on stays lossless (greedy identity, exact distribution)."""

from __future__ import annotations

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
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent
from specchat.core.round_costs import RelativeCosts
from specchat.runtimes.transformers import TransformersRuntime


def _round(mask, *, drafted=None, draft_ms=30.0, verify_ms=100.0, gamma=8):
    drafted = len(mask) if drafted is None else drafted
    accepted = next((i for i, a in enumerate(mask) if not a), len(mask))
    return RoundEvent(
        round_index=0, num_speculative_tokens=gamma, num_drafted=drafted, num_accepted=accepted,
        num_committed=accepted + 1, accepted_mask=tuple(mask), draft_ms=draft_ms, draft_steps=drafted,
        verify_ms=verify_ms, elapsed_ms=0.0, round_ms=draft_ms + verify_ms,
    )


def _target_step(ms=10.0):
    return _round([], drafted=0, draft_ms=0.0, verify_ms=ms)


def _controller(max_gamma=8, **kwargs) -> AdaptiveGamma:
    """A controller whose costs count from the first round (the warm-up skip is tested apart)."""
    return AdaptiveGamma(max_gamma, costs=RelativeCosts(_skip=0), **kwargs)


def test_one_round_gives_the_hand_computed_estimates_and_choice():
    """A target step of 100 ms, then one round (accept, accept, reject; 30 ms drafting 3 tokens;
    100 ms verify): pooled α = (2 + 0.6·2)/(3 + 2) = 0.64; β1 = β2 = (1 + 1.28)/3 = 0.76,
    β3 = 1.28/3, β4… = 0.64; c = 10/100 = 0.1; ρ(4) = 100/100 = 1, so ρ is flat (1 from (1, 1) to
    n = 4, and the measured slope 0 beyond). S(γ) = E[N](γ)/(0.1γ + 1): S(1) = 1.6, S(2) = 1.948,
    S(3) = 1.98772, S(4) = 1.95840."""
    assert adaptive.PRIOR_ACCEPTANCE == 0.6 and adaptive.PRIOR_WEIGHT == 2.0  # the numbers below use them
    c = _controller()
    assert c.choose() == 1  # nothing timed yet: the initial γ, the cheapest round that measures
    assert AdaptiveGamma(8, initial_num_speculative_tokens=4).choose() == 4
    assert AdaptiveGamma(3, initial_num_speculative_tokens=6).choose() == 3  # clipped to γ_max
    c.update(_target_step(100.0))
    c.update(_round([True, True, False]))
    assert c.pooled_acceptance == pytest.approx(0.64)
    beta = c.acceptance_by_position()
    assert beta[:4] == pytest.approx([0.76, 0.76, 1.28 / 3, 0.64])
    assert beta[4:] == pytest.approx([0.64] * 4)
    assert c.draft_cost() == pytest.approx(0.1)
    assert c.costs.verify_curve(9) == pytest.approx([1.0] * 8)
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


def _blocks(costs, load, *, rest2=15.0, step=10.0, draft=2.0, rounds=3):
    """Three target steps then ``rounds`` drafting rounds of γ = 1, every time × ``load``."""
    for _ in range(3):
        costs.add(_target_step(step * load))
    for _ in range(rounds):
        costs.add(_round([False], drafted=1, draft_ms=draft * load, verify_ms=rest2 * load, gamma=1))


def test_costs_are_ratios_to_the_target_steps_next_to_them_so_a_busy_moment_changes_nothing():
    """Three times slower for two blocks, then quiet (t₁ 10 ms, v(2) 15, d 2): every drafting
    round divided by the median of the 3 target steps nearest it (ties: the earlier) gives
    ρ(2) = 1.5 and c = 0.2 throughout, where dividing by the latest t₁ (10 ms) would read the
    busy rounds as 4.5 and 0.6 (the mean v(2) here is 35 ms against a mean t₁ of 23.3). A round at
    the seam is normalised by a mix (round 12: steps 13, 14 and 9 → 10 ms, ρ = 4.5) and the median
    of the 9 ignores it; so does one round slowed 10×."""
    costs = RelativeCosts(_skip=0)
    for load in (3, 3, 1):
        _blocks(costs, load)
    assert [costs.step_near(seq) for seq in (4, 11, 12, 16)] == [30.0, 30.0, 10.0, 10.0]
    assert costs.verify_cost(2) == pytest.approx(1.5) and costs.draft_cost() == pytest.approx(0.2)
    costs.add(_round([False], drafted=1, draft_ms=2.0, verify_ms=150.0, gamma=1))
    assert costs.verify_cost(2) == pytest.approx(1.5)
    assert costs.target_step_ms == 10.0 and costs.num_samples() == (9, 10, 10)


def test_the_verify_cost_is_measured_between_its_points_and_explored_one_n_above_them():
    """One n measured (n = 3, ρ = 2): below it the line from (1, 1), ρ(2) = 1.5; one n above it
    nearly flat, ρ(4) = 2 + min(0.5, 0.1) = 2.1 (the next γ up is worth a try: on llama.cpp's CPU
    kernels a pass over 2 positions cost about what one over 3 did); beyond by the slope through
    (1, 1), 0.5 a position: ρ(9) = 2.1 + 5·0.5. Two n: medians ρ(2) = 1.4 (2 rounds) and
    ρ(4) = 2.6 (1 round) lie on 1.4 + 0.6·(n − 2), which weighted least squares returns
    (n̄ = 8/3, ρ̄ = 1.8, Sxx = 8/3, Sxy = 1.6); above: 2.6 + 0.1, then + 0.6 a position."""
    costs = RelativeCosts(_skip=0)
    costs.add(_target_step(10.0))
    costs.add(_round([False, False], drafted=2, draft_ms=0.0, verify_ms=20.0, gamma=2))
    assert costs.verify_curve(9) == pytest.approx([1.5, 2.0, 2.1, 2.6, 3.1, 3.6, 4.1, 4.6])
    assert costs.verify_cost(1) == 1.0 and costs.verify_cost(9) == pytest.approx(4.6)
    costs = RelativeCosts(_skip=0)
    costs.add(_target_step(10.0))
    for ms, n in ((14.0, 2), (14.0, 2), (26.0, 4)):
        costs.add(_round([False], drafted=n - 1, draft_ms=0.0, verify_ms=ms, gamma=n - 1))
    assert [x for point in costs.verify_points() for x in point] == pytest.approx([2, 1.4, 2, 4, 2.6, 1])
    assert costs.verify_curve(6) == pytest.approx([1.4, 2.0, 2.6, 2.7, 3.3])
    assert RelativeCosts().verify_curve(4) is None and RelativeCosts().verify_cost(1) is None


def test_a_reply_starts_from_two_earlier_samples_and_its_own_two_replace_them():
    """At a reply's start the latest 2 ratios per n stay (a prior); once the reply has 2 of its
    own for that n, only its own count."""
    costs = RelativeCosts(_skip=0)
    costs.add(_target_step(10.0))
    for ms in (30.0, 30.0, 30.0, 20.0, 20.0):  # ρ(2) = 3, 3, 3, 2, 2
        costs.add(_round([False], drafted=1, draft_ms=0.0, verify_ms=ms, gamma=1))
    assert costs.verify_cost(2) == pytest.approx(3.0)
    costs.new_reply()
    assert costs.verify_points() == [(2, 2.0, 2)]  # the latest two
    costs.add(_round([False], drafted=1, draft_ms=0.0, verify_ms=15.0, gamma=1))
    assert costs.verify_cost(2) == pytest.approx(2.0)  # one of its own: with the prior (2, 2, 1.5)
    costs.add(_round([False], drafted=1, draft_ms=0.0, verify_ms=15.0, gamma=1))
    assert costs.verify_cost(2) == pytest.approx(1.5)  # two of its own: they alone


def test_rounds_without_drafts_and_broken_timings_change_no_ratio_of_a_steady_load():
    c = _controller()
    c.update(_target_step(100.0))
    c.update(_round([True, True, False]))
    before = (c.draft_cost(), c.costs.verify_curve(9), c.choose())
    for _ in range(40):
        c.update(_target_step(100.0))
    c.update(_round([True, True, False], draft_ms=float("nan"), verify_ms=float("inf")))
    assert (c.draft_cost(), c.costs.verify_curve(9), c.choose()) == before


def test_choice_goes_to_the_ends_for_a_perfect_and_a_useless_drafter():
    good, bad = _controller(), _controller()
    for c in (good, bad):
        c.update(_target_step(100.0))
    for _ in range(30):
        good.update(_round([True] * 8, draft_ms=8.0))  # c = 0.01, always right
        bad.update(_round([False], drafted=8, draft_ms=80.0))  # c = 0.1, always wrong
    assert good.choose() == 8
    assert bad.choose() == 0 and bad.paused  # every γ loses: paused


def test_estimates_follow_a_change_of_regime():
    """Exponential decay: after 40 rounds of rejections the earlier acceptances barely count."""
    c = _controller()
    c.update(_target_step(100.0))
    for _ in range(40):
        c.update(_round([True] * 8, draft_ms=8.0))
    assert c.choose() == 8
    for _ in range(40):
        c.update(_round([False], drafted=8, draft_ms=8.0))
    assert c.acceptance_by_position()[0] < 0.1
    assert c.choose() in (0, 1)


def test_earlier_replies_acceptance_is_a_prior_of_three_judged_drafts():
    """40 rejected rounds, then a new reply: the history is scaled to 3 judged drafts at the first
    position (all positions alike), so two accepted γ = 1 rounds raise β1 to
    (1.9 + 2·pooled)/(3·0.81 + 1.9 + 2), pooled = (1.9 + 1.2)/(3·0.81 + 1.9 + 2), where the
    unscaled history (Σ 0.9^j, j < 40) would hold it near 0.2."""
    c = _controller(1)
    c.update(_target_step(100.0))
    for _ in range(40):
        c.update(_round([False], drafted=1, draft_ms=1.0, gamma=1))
    history = sum(0.9**j for j in range(40))
    assert c.judged == pytest.approx(history)
    c.new_reply()
    assert c.judged == pytest.approx(adaptive.HISTORY_WEIGHT)
    for _ in range(2):
        c.update(_round([True], drafted=1, draft_ms=1.0, gamma=1))
    reached = 3 * 0.81 + 0.9 + 1
    pooled = (1.9 + 1.2) / (reached + 2)
    assert c.acceptance_by_position()[0] == pytest.approx((1.9 + 2 * pooled) / (reached + 2))
    assert c.acceptance_by_position()[0] > 0.45


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
    sources = {key[3] for key in engine.gamma_controllers if key[:3] == (make_drafter(kind).name, 6, True)}
    assert sources == ({"match-1", "match-2", "miss"} & sources if kind == "ngram" else {""}) and sources


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
def _rejected_rounds(c, n, *, draft_ms, verify_ms):
    for _ in range(n):
        c.update(_round([False], drafted=1, draft_ms=draft_ms, verify_ms=verify_ms, gamma=1))


def _paused(max_gamma=4):
    """t₁ = 10 ms, d = 5 ms (c = 0.5), v(2) = 16 ms (ρ(2) = 1.6, ρ(3) = 1.7, then + 0.6 a position),
    then 10 rejected γ = 1 rounds."""
    c = _controller(max_gamma)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=5.0, verify_ms=16.0)
    return c


def test_drafting_pauses_at_the_break_even_and_probes_on_a_hand_computed_schedule():
    """c = 0.5 and ρ(2) = 1.6: a round of γ = 1 costs 2.1 target steps. After 10 rejections
    β1 = (0 + 2·pooled)/(R + 2), pooled = (0 + 1.2)/(R + 2), R = Σ_{j<10} 0.9^j = 6.5132;
    S(1) = (1 + β1)/2.1 < 1, and every γ > 1 costs more for less: paused. A probe of γ = 1 loses
    2.1 − (1 + β1) steps, so P = ceil(loss/0.02 + 1 − (1 + β1)) = 54 (β1 = 0.0331); the break-even
    α of γ = 1 would be 1.1 > 1 → 1.0."""
    c = _paused()
    reached = sum(0.9**j for j in range(10))
    pooled = 1.2 / (reached + 2)
    beta1 = 2 * pooled / (reached + 2)
    assert c.acceptance_by_position()[0] == pytest.approx(beta1)
    assert c.predicted_speedup(1) == pytest.approx((1 + beta1) / 2.1)
    assert c.probe_interval(1) == 54 == math.ceil((2.1 - (1 + beta1)) / 0.02 + 1 - (1 + beta1))
    assert c.break_even_acceptance(1) == 1.0
    choices = [c.choose() for _ in range(108)]
    assert c.paused
    assert [i for i, g in enumerate(choices) if g] == [53, 107] and set(choices) == {0, 1}
    c.new_reply()  # a new reply's first round probes (its drafter has just read the prompt)
    assert [c.choose() for _ in range(3)] == [1, 0, 0]


def test_without_timing_rounds_the_controller_times_t1_itself_once_per_reply_then_pauses():
    """One rejected γ = 1 round (5 ms drafting, 16 ms verify) and no target step timed: the costs
    are unknown, so within a reply the next choice is 0, a target-only step that times t₁; with
    t₁ = 10 ms, S(1) = (1 + β1)/2.1 < 1 (β1 = 2·pooled/3, pooled = 1.2/3): paused. Until t₁
    arrives it asks once per reply, then drafts the initial γ; outside a reply it never asks."""
    c = _controller(4)
    _rejected_rounds(c, 1, draft_ms=5.0, verify_ms=16.0)
    assert c.choose() == 1  # outside a reply (no new_reply yet) it never asks
    c.new_reply()
    assert c.choose() == 0 and not c.paused  # timing t₁, not a pause
    assert c.choose() == 1  # asked once: this reply's t₁ round did not arrive, so draft on
    c.new_reply()
    assert c.choose() == 0  # a new reply asks again
    c.update(_target_step(10.0))
    assert c.predicted_speedup(1) == pytest.approx((1 + 2 * 0.4 / 3) / 2.1)
    assert c.choose() == 1 and c.paused  # paused; the reply's first paused round is its probe
    assert c.choose() == 0 and c.paused


def test_break_even_acceptance_solves_leviathan_equation_1_against_the_round_cost():
    """t₁ = 10, d = 1, v(2) = 12: c = 0.1, ρ(2) = 1.2, so γ = 1 breaks even at 1 + α = 1.3 → α = 0.3;
    ρ(3) = 1.2 + 0.1 (one n above the measured), so γ = 2 breaks even at 1 + α + α² = 0.2 + 1.3."""
    c = _controller(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 3, draft_ms=1.0, verify_ms=12.0)
    assert c.break_even_acceptance(1) == pytest.approx(0.3)
    need = 0.2 + 1.3
    assert c.break_even_acceptance(2) == pytest.approx((-1 + (1 + 4 * (need - 1)) ** 0.5) / 2)


def test_probes_resume_drafting_when_the_drafter_turns_right():
    """Cheap rounds (c 0.1, ρ(2) 1.2: γ = 1 pays from α = 0.3): rejections pause drafting; the
    probes are then accepted, α climbs past the break-even and drafting resumes (no pause)."""
    c = _controller(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 20, draft_ms=1.0, verify_ms=12.0)
    assert c.choose() == 0 and c.paused
    for _ in range(200):
        gamma = c.choose()
        if gamma:  # a probe, accepted whole
            c.update(_round([True] * gamma, draft_ms=1.0 * gamma, verify_ms=10.0 + 2.0 * gamma, gamma=gamma))
        else:
            c.update(_target_step(10.0))
        if not c.paused:
            break
    assert not c.paused and c.choose() >= 1


def test_a_paused_drafters_probes_cost_at_most_the_budget_over_a_long_reply():
    """A drafter that is always wrong (t₁ 10, d 5, v(2) 16): over 2000 rounds, the time spent
    against target-only for the same tokens is at most 2 % more (PROBE_BUDGET) (each probe commits 1 token in
    21 ms where a step takes 10), up to the estimate's prior (β1 ≈ 0.03 where the truth is 0)."""
    c = _paused()
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
    updates α and ρ(n), not c, and the catch-up (500/10 − 0.5 = 49.5 target steps) is charged to
    the next probes' interval: 49.5 / 0.02 = 2475 rounds longer."""
    c = _paused()
    assert c.draft_cost() == pytest.approx(0.5)
    while not c.choose():
        c.update(_target_step(10.0))
    before = c.probe_interval(1)
    c.update(_round([False], drafted=1, draft_ms=500.0, verify_ms=16.0, gamma=1))
    assert c.draft_cost() == pytest.approx(0.5)
    assert c.probe_catch_up == pytest.approx(49.5)
    assert c.probe_interval(1) - before == pytest.approx(2475, abs=1)
    # a reply of paused rounds: its first probe owes no catch-up (5 ms: counted), its scheduled
    # probes do (500 ms: not counted), so c stays 0.5, where counting them would make it 50
    c.new_reply()
    c.costs.new_reply()
    probes = 0
    while probes < 3:
        gamma = c.choose()
        if gamma:
            c.update(_round([False], drafted=1, draft_ms=5.0 if probes == 0 else 500.0, verify_ms=16.0, gamma=1))
            probes += 1
        else:
            c.update(_target_step(10.0))
    assert c.draft_cost() == pytest.approx(0.5)
    c.choose()  # paused again: not a probe
    for _ in range(20):
        c.update(_round([False], drafted=1, draft_ms=500.0, verify_ms=16.0, gamma=1))
    assert c.draft_cost() > 0.5  # drafting rounds that are not probes count in c


def test_a_catch_up_is_priced_before_the_first_probe_times_one():
    """Before any scheduled probe was timed, its catch-up is priced from the drafter's prompt-reading
    rate: 16 tokens at 2.5 ms = 40 ms = 4 target steps (t₁ = 10 ms), so P grows by 4 / 0.02 = 200
    rounds; once a probe is timed (draft 30 ms: 30/10 − 0.5 = 2.5 steps) its own catch-up counts,
    and the prior no longer does."""
    c = _paused()
    plain = c.probe_interval(1)
    c.catch_up_prior_ms = 16 * 2.5
    assert c.catch_up_cost() == pytest.approx(4.0)
    assert c.probe_interval(1) - plain == pytest.approx(200, abs=1)
    while not c.choose():
        c.update(_target_step(10.0))
    c.update(_round([False], drafted=1, draft_ms=30.0, verify_ms=16.0, gamma=1))
    assert c.catch_up_cost() == pytest.approx(2.5) == c.probe_catch_up
    assert c.probe_interval(1) - plain == pytest.approx(125, abs=1)


def test_the_engine_prices_a_model_drafters_catch_up_from_its_prefill_rate():
    """The engine hands each reply's controllers the drafter's catch-up bound (16 tokens) times the
    rate at which the drafter read the prompt (a pass of 40 tokens, timed by the prefill); before
    the drafter has read 32 tokens in one pass there is no rate and no prior."""
    fn_t = hashed_logits(V, seed=11, scale=2.5)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    events_of(engine, [3, 1], drafter, num_speculative_tokens=4, max_new_tokens=4, adaptive_gamma=True)
    assert all(c.catch_up_prior_ms is None for c in engine.gamma_controllers.values())
    events_of(engine, [int(t) % V for t in range(41)], drafter, num_speculative_tokens=4, max_new_tokens=4,
              adaptive_gamma=True)
    rate = engine.prefill_rates.ms_per_token[drafter.name]
    assert drafter.max_catch_up_tokens == 16
    assert [c.catch_up_prior_ms for c in engine.gamma_controllers.values()] == [pytest.approx(16 * rate)]


def test_a_pause_right_after_drafting_owes_no_probe():
    """A fresh reply drafts γ = 1 three times (the first two are warm-up, left out of the costs), then
    times t₁ once: c = 1.2 (a draft step dearer than a target step, so no γ can pay) and ρ(2) = 1.5.
    It pauses there without a probe (its own drafting rounds were the evidence; a probe at once
    would lose 2.7 − E[N] steps for nothing): the first probe comes P rounds after the t₁ step,
    P = ceil(loss/0.02 + 1 − E[N]) with loss = 1.2 + 1.5 − E[N] (no catch-up priced)."""
    c = AdaptiveGamma(12)
    c.new_reply()
    c.costs.new_reply()
    choices, interval = [], None
    for _ in range(200):
        gamma = c.choose()
        choices.append(gamma)
        if c.paused and interval is None:  # the pause starts: P from the estimates now
            assert c.draft_cost() == 1.2 and c.costs.verify_cost(2) == 1.5
            expected = 1 + c.acceptance_by_position()[0]
            interval = math.ceil((1.2 + 1.5 - expected) / 0.02 + 1 - expected - 1e-9)
            assert c.probe_interval(1) == interval and 20 < interval < 100
        if gamma:
            c.update(_round([True] * gamma, drafted=gamma, draft_ms=12.0 * gamma, verify_ms=15.0, gamma=gamma))
        else:
            c.update(_target_step(10.0))
    assert choices[:4] == [1, 1, 1, 0]
    assert choices[3 : 3 + interval] == [0] * interval and choices[3 + interval] == 1


def test_a_probe_drafts_the_gamma_that_loses_least():
    """Paused at c 0.5, ρ(2) = 1.6: a probe of γ loses T(γ)/t₁ − E[N](γ) target steps, least at
    γ = 1, which need not be the γ with the best S."""
    c = _paused()
    assert c.probe_gamma() == 1
    c.new_reply()
    assert c.choose() == 1 and c.paused  # the reply's first probe drafts that γ

    # the best S and the least loss part: a fixed cost per round (ρ(2) = 2.5, ρ(3) = 2.95), c = 0.01
    # and β ≈ 0.6: S(2) > S(1), yet a γ = 2 probe loses more than a γ = 1 probe
    mixed = _controller(2)
    mixed.update(_target_step(10.0))
    for mask, drafted in [([False], 1), ([True, False], 2), ([True], 1), ([True, True], 2), ([False], 2)] * 8:
        mixed.update(_round(mask, drafted=drafted, draft_ms=0.1 * drafted, verify_ms=20.5 + 4.5 * drafted, gamma=drafted))
    b1, b2 = mixed.acceptance_by_position()
    t_1, t_2 = mixed.costs.round_cost(1), mixed.costs.round_cost(2)
    assert (t_1, t_2) == pytest.approx((0.01 + 2.5, 0.02 + 2.95))
    assert (1 + b1) / t_1 < (1 + b1 + b1 * b2) / t_2 < 1
    assert t_1 - (1 + b1) < t_2 - (1 + b1 + b1 * b2)
    assert mixed.probe_gamma() == 1
    mixed.new_reply()
    assert mixed.choose() == 1 and mixed.paused


def test_the_first_two_rounds_ever_leave_the_costs_alone():
    """The first rounds a cost model sees (slow first passes: 500 ms) are left out of t₁, c and ρ;
    from the third on every round counts, in later replies too."""
    c = AdaptiveGamma(4)  # the default costs: the warm-up skip on
    c.new_reply()
    c.update(_round([False], drafted=1, draft_ms=400.0, verify_ms=500.0, gamma=1))
    c.update(_round([False], drafted=1, draft_ms=400.0, verify_ms=500.0, gamma=1))
    assert c.draft_cost() is None and c.costs.num_samples() == (0, 0, 0)
    assert c.acceptance_by_position()[0] < adaptive.PRIOR_ACCEPTANCE  # their acceptance counts
    c.update(_target_step(10.0))
    c.update(_round([False], drafted=1, draft_ms=5.0, verify_ms=16.0, gamma=1))
    assert c.costs.target_step_ms == 10.0 and c.draft_cost() == 0.5 and c.costs.verify_cost(2) == 1.6


def test_a_replys_first_probe_keeps_the_catch_up_of_the_last_one():
    """A reply's first probe owes no catch-up (its drafter just read the prompt), so it neither
    resets the catch-up charged to the probe interval nor is left out of c."""
    c = _paused()
    c.probe_catch_up = 30.0  # what the last scheduled probe spent catching up
    c.new_reply()
    c.costs.new_reply()
    assert c.choose() == 1
    c.update(_round([False], drafted=1, draft_ms=7.0, verify_ms=16.0, gamma=1))
    assert c.probe_catch_up == 30.0
    assert c.costs.num_samples()[2] == 3  # 2 kept from the last reply, and this probe's 7 ms


def test_a_paused_controller_decides_again_only_when_its_probe_is_due(monkeypatch):
    """Paused (c 0.5, ρ(2) 1.6: drafting loses), the controller reads its estimates once when it
    answers 0 after a probe and once more when the next probe is due, P rounds on: the P − 2
    target-only steps between cost no estimate at all, and the due round drafts (the probe)."""
    c = _paused()
    c.new_reply()
    assert c.choose() == 1 and c.paused  # the reply's first paused choice is a probe
    c.update(_round([False], drafted=1, draft_ms=5.0, verify_ms=16.0, gamma=1))
    interval = c.probe_interval(c.probe_gamma())
    assert interval > 3
    reads = []
    curves = c._curves
    monkeypatch.setattr(c, "_curves", lambda **kw: reads.append(1) or curves(**kw))
    choices = []
    for _ in range(interval - 1):
        choices.append(c.choose())
        c.update(_target_step(10.0))
    assert choices == [0] * (interval - 1) and len(reads) == 2  # one decision: its estimates and the cautious ones
    assert c.choose() == 1 and len(reads) == 4  # due: decided again, and the probe drafts


def test_a_probe_that_alone_says_drafting_pays_is_confirmed_at_once_then_resumes():
    """A lookup (c 0) paused after a busy reply (ρ(2) 1.6, always rejected) turns right and the
    machine quiet: the reply's first probe is accepted and cheap (v(2) 11 ms: 1.1 steps for
    E[N](1) = 1 + β1 = 1.31 tokens, β1 = (1 + 2·0.386)/5.7). Alone it does not replace the
    history's costs, but it is probed again at once; two of the reply's own rounds then replace
    them, and drafting resumes on the third round rather than a probe interval later."""
    c = _controller(4)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=0.0, verify_ms=16.0)  # a lookup: c = 0
    c.new_reply()
    c.costs.new_reply()
    choices = []
    for _ in range(6):
        gamma = c.choose()
        choices.append(gamma)
        if gamma:
            c.update(_round([True] * gamma, drafted=gamma, draft_ms=0.0, verify_ms=10.0 + gamma, gamma=gamma))
        else:
            c.update(_target_step(10.0))
    assert choices[0] == 1 and choices[1] >= 1 and not c.paused and all(choices[2:])  # probe, confirm, drafting


def test_free_evidence_ends_a_lookup_pause_as_soon_as_it_says_drafting_pays():
    """A lookup (c 0, free) paused at ρ(2) = 1.7 after rejections: each round that drafts nothing
    judges what it would have proposed (observe). With the decayed sums, β1 after k accepted
    observations is (A_k + 2·pooled)/(R_k + 2) (A_k = Σ_{j<k} 0.9^j, R_k = 0.9^k·R_0 + A_k); a
    paused controller drafts again once the cautious β1, one standard deviation lower
    (β1 − sqrt(β1(1 − β1)/(R_k + 3))), gives 1 + β1 > 1.7 (γ = 1; γ_max 1). It decides again after
    each observation, never probes, and resumes at the first k where the arithmetic says so."""
    c = _controller(1, free=True)
    c.update(_target_step(10.0))
    _rejected_rounds(c, 10, draft_ms=0.0, verify_ms=17.0)
    assert c.choose() == 0 and c.paused
    r0 = sum(0.9**j for j in range(10))
    expected_k = None
    for k in range(1, 40):
        a_k = sum(0.9**j for j in range(k))
        r_k = 0.9**k * r0 + a_k
        pooled = (a_k + 1.2) / (r_k + 2)
        beta = (a_k + 2 * pooled) / (r_k + 2)
        if 1 + beta - math.sqrt(beta * (1 - beta) / (r_k + 3)) > 1.7:
            expected_k = k
            break
    resumed_at = None
    for observed in range(1, 40):
        c.observe([(0, True)])
        c.update(_target_step(10.0))
        if c.choose():
            assert not c.paused  # a free source never probes: drafting again means resumed
            resumed_at = observed
            break
    assert resumed_at == expected_k and expected_k <= 14


def test_under_a_cpu_hog_the_choice_is_a_quiet_machines_once_the_hog_stops():
    """Fake clock: a lookup (c ≈ 0) whose drafts are right twice then wrong (β1 = β2 = 1, β3 = 0:
    E[N] = 3 from γ = 2 on), on a machine where t₁ = 10 ms and a pass over n positions costs
    10 + 6·(n − 1) ms: S(2) = 3/2.2 beats S(3) = 3/2.8, so γ = 2. One reply under a hog that slows
    every pass 3× and the passes over several positions 4× (the worst case: the ratios change), then
    a quiet reply: from its 10th round on the controller drafts the quiet machine's γ again, and
    its costs are the quiet ones."""
    def run_reply(c, rounds, slow_step, slow_verify):
        c.new_reply()
        c.costs.new_reply()
        chosen = []
        for i in range(rounds):
            gamma = 0 if i in (2, 6, 22, 38) else c.choose()  # the engine's timing rounds
            chosen.append(gamma)
            if gamma:
                mask = [True, True, False][:gamma]
                c.update(_round(mask, drafted=gamma, draft_ms=0.01 * gamma, verify_ms=(10 + 6 * gamma) * slow_verify,
                                gamma=gamma))
            else:
                c.update(_target_step(10.0 * slow_step))
        return chosen

    quiet = _controller(8)
    run_reply(quiet, 60, 1, 1)
    assert quiet.choose() == 2 and quiet.costs.verify_cost(3) == pytest.approx(2.2)
    c = _controller(8)
    run_reply(c, 60, 1, 1)
    run_reply(c, 60, 3, 4)  # the hog
    assert c.costs.verify_cost(3) == pytest.approx(2.2 * 4 / 3)
    after = run_reply(c, 12, 1, 1)
    assert after[9:] == [2, 2, 2], after
    assert c.costs.verify_cost(3) == pytest.approx(2.2)


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


def test_a_new_lookup_source_is_judged_for_free_before_it_drafts():
    """Costs known (c 0, ρ(2) = 1.5): the prior β = 0.6 alone would draft (S(1) = 1.6/1.5 > 1), so a
    new model source drafts. A new lookup source (free) starts paused: its cautious β, one SD below
    the prior (0.6 − sqrt(0.24/3) = 0.317), gives 1.317/1.5 < 1, so it answers 0 and its draft is
    judged against the target's token; after one right token β1 = (1 + 2·0.733)/3 = 0.822, cautious
    0.822 − sqrt(0.822·0.178/4) = 0.631, and 1.631/1.5 > 1: it drafts."""
    from specchat.core.adaptive import GammaPolicy

    class Lookup:
        name = "look"

        def round_source(self, ids):
            return "model" if ids[-1] == 9 else "lookup"

        def free_draft(self, ids):
            return [] if ids[-1] == 9 else [7]

    controllers, costs = {}, {}
    shared = costs[("look", 1, True)] = RelativeCosts(_skip=0)
    shared.add(_target_step(10.0))
    shared.add(_round([False], drafted=1, draft_ms=0.0, verify_ms=15.0, gamma=1))
    policy = GammaPolicy(controllers, costs, Lookup(), 1, True)
    assert policy.choose([1, 9], timing=False) == (1, False, False)  # the model source drafts on the prior
    policy.update(_round([True], drafted=1, draft_ms=0.0, verify_ms=15.0, gamma=1), [3, 4])
    assert policy.choose([1, 2], timing=False) == (0, True, False)  # the lookup: judged, not drafted
    lookup = controllers[("look", 1, True, "lookup")]
    assert lookup.free and lookup.draft_cost() == 0.0
    policy.update(_target_step(10.0), [7])  # the lookup's draft was right
    assert lookup.acceptance_by_position(cautious=True)[0] == pytest.approx(
        0.8222 - math.sqrt(0.8222 * 0.1778 / 4), abs=1e-3)
    assert policy.choose([1, 2], timing=False) == (1, False, False)


def test_the_policy_judges_a_free_draft_against_the_targets_token_in_a_round_that_drafts_nothing():
    """GammaPolicy: one controller per source (sharing one cost model); in a round that drafts
    nothing, the free draft's first token is compared with the token the target committed (the
    draft's acceptance: P(token = x) = p(x)), and a model source (no free draft) is not judged."""
    from specchat.core.adaptive import GammaPolicy

    class Lookup:
        name = "look"

        def round_source(self, ids):
            return "model" if ids[-1] == 9 else "lookup"

        def free_draft(self, ids):
            return [] if ids[-1] == 9 else [7, 8]

    controllers, costs = {}, {}
    policy = GammaPolicy(controllers, costs, Lookup(), 4, True)
    assert policy.choose([1, 2], timing=True) == (0, False, False)  # the engine's timing round
    policy.update(_target_step(10.0), [7])  # the target's token is the lookup's first: accepted
    lookup = controllers[("look", 4, True, "lookup")]
    assert lookup.free and lookup.costs is costs[("look", 4, True)] and lookup.judged == 1.0
    assert lookup.acceptance_by_position()[0] > adaptive.PRIOR_ACCEPTANCE
    policy.choose([1, 2, 7], timing=True)  # its draft [7, 8] again; the first draft's 8 is next
    policy.update(_target_step(10.0), [5])  # 5: the first draft's second token and the new first both wrong
    assert lookup.judged == pytest.approx(1.9) and lookup._accepted[0] == pytest.approx(0.9)
    assert lookup._reached[1] == 1.0 and lookup._accepted[1] == 0.0
    policy.choose([1, 2, 7, 9], timing=True)
    policy.update(_target_step(10.0), [7])
    model = controllers[("look", 4, True, "model")]
    assert model.costs is lookup.costs and model.judged == 0.0  # nothing free to judge
    gamma, paused, own = policy.choose([1, 2, 7, 9, 3], timing=False)
    assert gamma >= 1 and not paused  # a drafting round: nothing to judge after it
    policy.update(_round([True], drafted=1, draft_ms=0.0, verify_ms=12.0, gamma=1), [7, 3])
    assert lookup.judged == pytest.approx(1.9 * 0.9 + 1.0)  # its own round, judged once
