"""Speed measured like for like, in the same run: timing rounds, round times, t₁, the measured
and predicted speedup (specchat.core.costs, the engine's timing rounds, specchat.core.metrics).

The engine runs on a fake clock that only the models advance, by amounts the test sets: a
target pass costs 100 ms plus 10 ms per extra position, a drafter step 20 ms. Every expected
number follows from that cost model by hand, never from the engine's own output.
"""

from __future__ import annotations

import pytest
import torch
from lossless import (
    FakeLM,
    StatelessDrafter,
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

from specchat.core import costs, theory
from specchat.core.costs import CostEstimator, timing_rounds_due
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import Draft
from specchat.runtimes.transformers import TransformersRuntime

TARGET_MS, PER_POSITION_MS, DRAFT_STEP_MS = 100.0, 10.0, 20.0


class ClockedLM(FakeLM):
    """A FakeLM whose every forward advances a shared fake clock by ``cost(n new tokens)`` ms."""

    def __init__(self, vocab, fn, clock, cost):
        super().__init__(vocab, fn)
        self.clock, self.cost = clock, cost

    def forward(self, input_ids, **kwargs):
        self.clock[0] += self.cost(int(input_ids.shape[-1])) / 1000.0
        return super().forward(input_ids, **kwargs)


def clocked_engine(monkeypatch, drafter_fn=None):
    """(engine, drafter or None, clock): target 100 ms + 10 ms per extra position, drafter 20 ms a step."""
    clock = [0.0]
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    target = ClockedLM(V, fn_t, clock, lambda n: TARGET_MS + PER_POSITION_MS * (n - 1))
    engine = SpeculativeEngine(TransformersRuntime(target), None)
    monkeypatch.setattr(engine, "now", lambda: clock[0])
    drafter = None
    if drafter_fn is not None:
        drafter = model_drafter(ClockedLM(V, drafter_fn, clock, lambda n: DRAFT_STEP_MS), V)
    return engine, drafter, clock, fn_t


def rounds_of(events):
    return [e for e in events if isinstance(e, RoundEvent)]


def test_timing_rounds_due_by_hand():
    due = [timing_rounds_due(i) for i in range(40)]
    assert due[:2] == [0, 0] and due[2:6] == [1] * 4 and due[6:22] == [2] * 16
    assert due[22:38] == [3] * 16 and due[38] == 4
    assert costs.TIMING_ROUND_INTERVAL == 16


def test_perfect_drafter_with_timing_rounds_on_a_fake_clock(monkeypatch):
    """A drafter that is the target itself (always accepted), γ = 4, greedy, 60 tokens, with
    measure_speedup: rounds 2 and 6 are target-only timing rounds, every round's time is what
    the clock model says, and t₁, the measured and the predicted speedup follow by hand."""
    fn = hashed_logits(V, seed=11, scale=2.0)
    engine, drafter, _, fn_t = clocked_engine(monkeypatch, drafter_fn=fn)
    prompt = [3, 1, 4, 1]
    events = events_of(engine, prompt, drafter, num_speculative_tokens=4, max_new_tokens=60, measure_speedup=True)
    assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, prompt, 60)  # still the target's output
    rounds = rounds_of(events)
    assert [r.round_index for r in rounds if r.num_drafted == 0] == [2, 6]
    assert [r.round_index for r in rounds if r.timing] == [2, 6]
    assert [r.round_index for r in rounds if r.timing_next] == [1, 5]  # announced one round ahead
    assert all(r.num_speculative_tokens == 0 for r in rounds if r.timing)
    for r in rounds:
        k = r.num_drafted
        assert r.draft_ms == pytest.approx(DRAFT_STEP_MS * k)
        assert r.verify_ms == pytest.approx(TARGET_MS + PER_POSITION_MS * k)
        assert r.round_ms == pytest.approx(DRAFT_STEP_MS * k + TARGET_MS + PER_POSITION_MS * k)
    assert sum(r.round_ms for r in rounds) == pytest.approx(events[-1].decode_ms)

    metrics = SpeculationMetrics()
    for e in events:
        metrics.update(e)
    decode_ms = sum((DRAFT_STEP_MS + PER_POSITION_MS) * r.num_drafted + TARGET_MS for r in rounds)
    assert metrics.target_step_ms == pytest.approx(TARGET_MS)
    assert metrics.measured_speedup == pytest.approx(60 * TARGET_MS / decode_ms)
    assert metrics.cost_ratio == pytest.approx(DRAFT_STEP_MS / TARGET_MS)
    assert metrics.acceptance_rate == 1.0
    # α = 1: E[N](γ) = γ + 1; v(n) = 100 + 10(n − 1) exactly (the drafting rounds had γ = 4 and,
    # at the budget's end, fewer), d = 20: the prediction for the rounds as run is the truth
    assert metrics.predicted_speedup == pytest.approx(60 * TARGET_MS / decode_ms, rel=0.02)


def test_no_timing_round_without_measure_speedup(monkeypatch):
    fn = hashed_logits(V, seed=11, scale=2.0)
    engine, drafter, _, _ = clocked_engine(monkeypatch, drafter_fn=fn)
    rounds = rounds_of(events_of(engine, [3, 1, 4, 1], drafter, num_speculative_tokens=4, max_new_tokens=60))
    assert all(r.num_drafted > 0 and not r.timing for r in rounds[:-1])
    metrics = SpeculationMetrics()
    for r in rounds:
        metrics.update(r)
    assert metrics.measured_speedup is None  # nothing timed t₁: no speedup is claimed


class MissingDrafter(StatelessDrafter):
    """Drafts the target's own greedy token, except on the calls listed in ``misses`` (nothing)."""

    name = "missing"

    def __init__(self, fn, misses):
        self.fn, self.misses, self.calls = fn, set(misses), 0

    def propose(self, ids, max_tokens, config, generator):
        self.calls += 1
        if self.calls - 1 in self.misses:
            return Draft(torch.empty(0, dtype=torch.long), None, 0)
        out, seq = [], list(ids)
        for _ in range(max_tokens):
            out.append(int(torch.argmax(self.fn(seq))))
            seq.append(out[-1])
        return Draft(torch.tensor(out, dtype=torch.long), None, 0)


def test_rounds_that_drafted_nothing_anyway_stand_in_for_timing_rounds(monkeypatch):
    """A lookup that finds nothing on its 2nd and 4th call (rounds 1 and 3) already timed t₁
    twice, so the engine inserts no timing round until round 22 wants a third."""
    engine, _, _, fn_t = clocked_engine(monkeypatch)
    drafter = MissingDrafter(fn_t, misses={1, 3})
    events = events_of(engine, [3, 1, 4, 1], drafter, num_speculative_tokens=2, max_new_tokens=70, measure_speedup=True)
    rounds = rounds_of(events)
    assert [r.round_index for r in rounds if r.num_drafted == 0][:3] == [1, 3, 22]
    assert [r.round_index for r in rounds if r.timing] == [22]
    assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, [3, 1, 4, 1], 70)


def test_a_round_that_asks_no_drafter_is_all_target_step(monkeypatch):
    """The engine's own work before the verify pass (here 5 ms on the fake clock, as a busy
    interpreter can make it) belongs to the target-only step when no drafter is asked: with the
    drafter none every round has draft_ms 0, t₁ is the whole round (105 ms), and the measured
    speedup of a target-only reply is 1 exactly. A lookup that is asked and finds nothing is the
    drafter's time: its 5 ms stay out of t₁."""
    engine, _, clock, fn_t = clocked_engine(monkeypatch)
    draft = engine._draft

    def slow_draft(*args):
        clock[0] += 0.005
        return draft(*args)

    monkeypatch.setattr(engine, "_draft", slow_draft)
    events = events_of(engine, [3, 1, 4, 1], None, max_new_tokens=12, measure_speedup=True)
    rounds = rounds_of(events)
    assert all(r.draft_ms == 0.0 and r.round_ms == pytest.approx(TARGET_MS + 5.0) for r in rounds)
    metrics = SpeculationMetrics()
    for e in events:
        metrics.update(e)
    assert metrics.target_step_ms == pytest.approx(TARGET_MS + 5.0)
    assert metrics.measured_speedup == pytest.approx(1.0, abs=1e-12)
    assert metrics.target_only_tokens_per_s == pytest.approx(metrics.tokens_per_s)

    engine, _, clock, fn_t = clocked_engine(monkeypatch)
    draft = engine._draft
    monkeypatch.setattr(engine, "_draft", slow_draft)
    lookup = MissingDrafter(fn_t, misses={0})
    first = rounds_of(events_of(engine, [3, 1, 4, 1], lookup, num_speculative_tokens=2, max_new_tokens=4))[0]
    assert first.num_drafted == 0 and first.draft_ms == pytest.approx(5.0)
    assert first.round_ms - first.draft_ms == pytest.approx(TARGET_MS)


@pytest.mark.parametrize("kind", ["self", "other", "ngram"])
def test_timing_rounds_keep_greedy_identity(kind):
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4]
    for adaptive in (False, True):
        events = events_of(engine, prompt, make_drafter(kind), num_speculative_tokens=3, max_new_tokens=40,
                           measure_speedup=True, adaptive_gamma=adaptive)
        assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, prompt, 40)


def test_timing_rounds_keep_the_exact_distribution():
    """4-token replies at T = 1, top-k 3, γ = 1 (so that round 2, a timing round, is often
    reached): chi-square against exact enumeration over 3000 seeds."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    exact = exact_sequences(fn_t, [3, 1], 4, temperature=1.0, top_k=3)
    counts = run_many(engine, [3, 1], drafter, 3000, num_speculative_tokens=1, temperature=1.0, top_k=3,
                      max_new_tokens=4, measure_speedup=True)
    assert_matches(counts, exact, 3000)


def _r(drafted, round_ms, draft_ms=0.0):
    return RoundEvent(0, drafted, drafted, 0, 1, (False,) * min(drafted, 1), draft_ms, drafted, 0.0, 0.0, round_ms)


def test_cost_estimator_plain_means_and_decay():
    plain, decayed = CostEstimator(), CostEstimator(decay=0.5)
    for ms in (100.0, 140.0):
        plain.update(_r(0, ms))
        decayed.update(_r(0, ms))
    assert plain.target_step_ms == pytest.approx(120.0)
    assert decayed.target_step_ms == pytest.approx((0.5 * 100 + 140) / 1.5)  # the later round weighs 2x
    plain.update(_r(3, 190.0, draft_ms=60.0))
    assert plain.draft_ms_per_token == pytest.approx(20.0) and plain.verify_fit() == pytest.approx((130.0, 0.0))
    assert plain.round_ms(5) == pytest.approx(5 * 20 + 130) and plain.round_ms(0) == pytest.approx(120.0)
    assert plain.cost_ratio == pytest.approx(20 / 120)
    assert plain.predicted_speedup(theory.expected_tokens_per_round(0.5, 2), 2) == pytest.approx(
        1.75 * 120 / (2 * 20 + 130))
    for bad in (float("nan"), float("inf"), -1.0):
        plain.update(_r(0, bad))
    assert plain.target_step_ms == pytest.approx(120.0)
    with pytest.raises(ValueError, match="decay"):
        CostEstimator(decay=0.0)


def test_the_relative_standard_error_of_t1_by_hand():
    c = CostEstimator()
    c.update(_r(0, 100.0))
    assert c.target_step_rel_se is None  # one sample says nothing about the spread
    c.update(_r(0, 140.0))
    # mean 120, sample variance ((−20)² + 20²)/1 = 800, standard error sqrt(800 / 2) = 20
    assert c.target_step_rel_se == pytest.approx(20 / 120)
    c.update(_r(0, 120.0))
    assert c.target_step_rel_se == pytest.approx((400 / 3) ** 0.5 / 120)  # variance 400, n = 3


def test_extra_timing_rounds_only_while_t1_is_imprecise_and_within_their_budget():
    due = costs.timing_round_due
    assert costs.TIMING_PRECISION == 0.04 and costs.TIMING_BUDGET == 0.03 and costs.TIMING_MAX_SHARE == 0.25
    # the schedule alone when t₁ is precise (or unknown)
    assert [due(i, 2, t1_rel_se=0.03, speedup=0.5) for i in (7, 21, 22)] == [False, False, True]
    assert not due(10, 2, t1_rel_se=None)
    # imprecise and speculation loses (S < 1): up to a quarter of the rounds
    assert not due(10, 2, t1_rel_se=0.1, speedup=0.5)  # a 3rd would be 3 of 11 rounds > 25 %
    assert due(11, 2, t1_rel_se=0.1, speedup=0.5)  # 3 of 12
    # imprecise and S = 3 at E[N] = 5: their share is held to 0.03 × 5 / (3 − 1) = 7.5 %
    assert [due(i, 2, t1_rel_se=0.1, speedup=3.0, tokens_per_round=5.0) for i in (20, 39)] == [False, True]


class NoisyClockedLM(ClockedLM):
    """A target whose one-token steps alternate 60 and 140 ms (a busy machine), other passes as before."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def forward(self, input_ids, **kwargs):
        if int(input_ids.shape[-1]) == 1:
            self.steps += 1
            self.clock[0] += (60.0 if self.steps % 2 else 140.0) / 1000.0 - self.cost(1) / 1000.0
        return super().forward(input_ids, **kwargs)


def test_a_noisy_target_step_gets_more_timing_rounds_when_they_cost_nothing(monkeypatch):
    """A drafter slower than the target (S < 1, a timing round is free) and one-token steps that
    scatter ±40 %: the engine times t₁ more often than the schedule, up to a quarter of the
    rounds; with steady steps it keeps to the schedule."""
    fn = hashed_logits(V, seed=11, scale=2.0)

    def timing_rounds(noisy: bool) -> list[int]:
        clock = [0.0]
        lm = NoisyClockedLM if noisy else ClockedLM
        engine = SpeculativeEngine(TransformersRuntime(lm(V, fn, clock, lambda n: TARGET_MS + PER_POSITION_MS * (n - 1))), None)
        monkeypatch.setattr(engine, "now", lambda: clock[0])
        slow = model_drafter(ClockedLM(V, fn, clock, lambda n: 300.0), V)  # 3 target steps per draft
        events = events_of(engine, [3, 1, 4, 1], slow, num_speculative_tokens=2, max_new_tokens=120, measure_speedup=True)
        rounds = rounds_of(events)
        assert list(events[-1].token_ids) == naive_greedy_fn(fn, [3, 1, 4, 1], 120)
        return [r.round_index for r in rounds if r.timing], len(rounds)

    steady, n_steady = timing_rounds(False)
    assert steady == [i for i in (2, 6, 22, 38) if i < n_steady]
    noisy, n_noisy = timing_rounds(True)
    assert len(noisy) > len([i for i in (2, 6, 22, 38) if i < n_noisy])
    assert len(noisy) <= costs.TIMING_MAX_SHARE * n_noisy + 1


def test_a_poor_drafter_pauses_and_costs_little_on_a_fake_clock(monkeypatch):
    """A drafter model that is mostly wrong (another hash), γ_max 4, adaptive, timing rounds on,
    200 greedy tokens. By the clock model a γ = 1 round costs 20 + 110 ms for 1 + α tokens
    against 100 ms a token, so below α = 0.3 no γ pays: drafting pauses (γ = 0 with probes). The
    reply is the target's own greedy one, most rounds are paused target-only steps, and the
    decode takes at most 5 % more than 200 target-only steps (a 3 % probe budget plus the first
    rounds, drafted before t₁ was timed)."""
    engine, drafter, _, fn_t = clocked_engine(monkeypatch, drafter_fn=hashed_logits(V, seed=99, scale=2.0))
    prompt = [3, 1, 4, 1]
    events = events_of(engine, prompt, drafter, num_speculative_tokens=4, max_new_tokens=200, adaptive_gamma=True,
                       measure_speedup=True)
    done = events[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, prompt, 200)
    rounds = rounds_of(events)
    drafted = [r for r in rounds if r.num_drafted]
    assert sum(r.num_accepted for r in drafted) / sum(r.num_drafted for r in drafted) < 0.3  # it is poor
    paused = [r for r in rounds if r.drafting_paused]
    assert len(paused) > 0.8 * len(rounds) and all(r.num_drafted == 0 and not r.timing for r in paused)
    assert len(drafted) >= 3  # probes went on: α stays measured (their cost is the bound below)
    assert done.decode_ms <= 1.05 * 200 * TARGET_MS


def test_the_prefill_time_is_split_into_the_targets_part_and_the_drafters(monkeypatch):
    """Fake clock: the target reads the 6-token prompt's first 5 tokens in one pass (100 + 4·10 =
    140 ms), then the drafter reads them in one step (20 ms): prefill_ms = 160, of which the
    drafter's part is 20 ms (the ledger used to call it all the target's prefill)."""
    from specchat.analysis.ledger import count_ledger
    from specchat.core.config import GenerationConfig

    engine, drafter, clock, fn_t = clocked_engine(monkeypatch, hashed_logits(V, seed=11, scale=2.0))
    events = list(engine.generate([1, 2, 3, 4, 5, 1], drafter, GenerationConfig(max_new_tokens=4, num_speculative_tokens=2)))
    done = events[-1]
    assert done.prefill_ms == pytest.approx(160.0) and done.drafter_prefill_ms == pytest.approx(20.0)
    ledger = count_ledger(rounds_of(events), prefill_ms=done.prefill_ms, drafter_prefill_ms=done.drafter_prefill_ms)
    assert "prefill 0.16 s (the drafter's part 0.02 s)" in ledger.line()
