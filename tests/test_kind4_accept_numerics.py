"""Kind 4, accept-rule numerics (Leviathan et al. 2023, Algorithm 1; hand-made p/q pairs).

A token with p(x) = 0 is never emitted; q(x) = 0 divides by nothing; p = q leaves a residual
without mass, which falls back to p (no NaN); u = 0 and u close to 1 behave correctly.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from lossless import FakeLM, FixedQDrafter, V, events_of, hashed_logits
from scipy.stats import chisquare

from specchat.core.engine import SpeculativeEngine
from specchat.core.events import TokenEvent, TokenKind
from specchat.core.sampling import residual_probs, sample, verify_draft
from specchat.runtimes.transformers import TransformersRuntime


def one_row(values):
    return torch.tensor([values], dtype=torch.float32)


def test_p_zero_is_never_accepted_even_at_u_zero(fixed_u):
    fixed_u([0.0])
    target = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    res = verify_draft(torch.tensor([0]), one_row([1.0, 0.0]), target, None)
    assert res.num_accepted == 0 and res.next_kind is TokenKind.RESAMPLED
    assert res.next_token_id == 1  # residual = norm(max(0, [0,1] - [1,0])) = [0, 1]


def test_q_zero_accepts_without_division(fixed_u):
    fixed_u([0.999999])
    target = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    res = verify_draft(torch.tensor([0]), one_row([0.0, 1.0]), target, None)
    assert res.num_accepted == 1 and res.next_kind is TokenKind.BONUS


@pytest.mark.parametrize("u, accepted", [(0.0, True), (0.49, True), (0.5, False), (0.9999999, False)])
def test_accept_threshold_is_p_over_q(fixed_u, u, accepted):
    fixed_u([u])
    # p(x)=0.4, q(x)=0.8: accept iff u < 0.5
    target = torch.tensor([[0.4, 0.6], [0.0, 1.0]])
    res = verify_draft(torch.tensor([0]), one_row([0.8, 0.2]), target, None)
    assert (res.num_accepted == 1) is accepted


def test_u_near_one_accepts_when_q_le_p(fixed_u):
    fixed_u([0.99999994])
    target = torch.tensor([[0.9, 0.1], [0.0, 1.0]])
    res = verify_draft(torch.tensor([0]), one_row([0.9, 0.1]), target, None)
    assert res.num_accepted == 1


def test_residual_equal_distributions_has_no_nan():
    p = torch.tensor([0.25, 0.25, 0.5])
    r = residual_probs(p, p.clone(), 0)
    assert torch.equal(r, p)
    assert not torch.isnan(r).any()


def test_residual_hand_values():
    r = residual_probs(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.6, 0.2]), 1)
    assert r.tolist() == pytest.approx([1.0, 0.0, 0.0])
    r = residual_probs(torch.tensor([0.5, 0.3, 0.2]), None, 0)  # one-hot q at token 0
    assert r.tolist() == pytest.approx([0.0, 0.6, 0.4])


def test_sample_one_hot_is_deterministic():
    assert sample(torch.tensor([0.0, 0.0, 1.0]), None) == 2


def test_one_round_emits_exactly_the_target_distribution():
    """P(first committed token = x) must equal p(x) (ALGORITHM.md: min(p,q) + residual = p).

    Exact p = [0.5, 0.3, 0.15, 0.05]; q = [0.1, 0.1, 0.4, 0.4] (a bad drafter). N = 20000
    draws with a fixed seed; chi-square at significance 1e-3 (a random seed would fail 0.1%
    of runs).
    """
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.1, 0.4, 0.4])
    gen = torch.Generator().manual_seed(1234)
    counts = [0] * 4
    n = 20000
    target = torch.stack([p, p])
    for _ in range(n):
        x = int(torch.multinomial(q, 1, generator=gen))
        res = verify_draft(torch.tensor([x]), q.unsqueeze(0), target, gen)
        counts[x if res.num_accepted else res.next_token_id] += 1
    exact = [0.5, 0.3, 0.15, 0.05]
    assert chisquare(counts, [n * v for v in exact]).pvalue > 1e-3


def test_one_hot_none_equals_explicit_one_hot():
    """q=None (deterministic drafts) must behave exactly like an explicit one-hot q."""
    p = torch.softmax(torch.randn(4, 7, generator=torch.Generator().manual_seed(0)), -1)
    drafts = torch.tensor([2, 5, 1])
    one_hot = torch.zeros(3, 7)
    one_hot[torch.arange(3), drafts] = 1.0
    for seed in range(200):
        a = verify_draft(drafts, None, p, torch.Generator().manual_seed(seed))
        b = verify_draft(drafts, one_hot, p, torch.Generator().manual_seed(seed))
        assert a == b


def test_drafted_token_with_q_zero_and_p_zero():
    """A draft the drafter claims it could not draw (q=0): no division; p=0 still never accepted."""
    p = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])
    for seed in range(50):
        res = verify_draft(torch.tensor([0]), torch.tensor([[0.0, 1.0, 0.0]]), p, torch.Generator().manual_seed(seed))
        assert res.num_accepted == 0 and res.next_token_id == 2  # residual = max(0, p - q) = [0, 0, .5]
    p = torch.tensor([[0.4, 0.6, 0.0], [0.2, 0.3, 0.5]])
    for seed in range(50):
        res = verify_draft(torch.tensor([0]), torch.tensor([[0.0, 1.0, 0.0]]), p, torch.Generator().manual_seed(seed))
        assert res.num_accepted == 1  # u * 0 < 0.4 always


def test_residual_without_mass_falls_back_to_p_not_nan():
    p = torch.tensor([0.1, 0.2, 0.7])
    q = torch.tensor([0.1, 0.2, 0.7]) + torch.tensor([1e-8, -1e-8, 0.0])
    r = residual_probs(p, q, 2)
    assert torch.isfinite(r).all() and torch.allclose(r, p)


def test_unnormalised_draft_probs_do_not_crash_and_respect_target_support():
    """A buggy drafter reporting q rows that do not sum to 1: the engine must still never emit p=0."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = FixedQDrafter([0.2] * 6, report=[0.9, 0.0, 0.3, 0.0, 2.0, 0.1])
    for seed in range(30):
        events = events_of(
            engine, [3, 1], drafter, num_speculative_tokens=3, temperature=1.0, top_k=2, seed=seed, max_new_tokens=8
        )
        assert all(e.target_prob > 0 for e in events if isinstance(e, TokenEvent))


def test_a_small_but_real_residual_is_used_not_replaced_by_p():
    """p = [.5, .5], q = [.497, .503]: the residual has mass 0.003, all on token 0."""
    r = residual_probs(torch.tensor([0.5, 0.5]), torch.tensor([0.497, 0.503]), 0)
    assert r.tolist() == [1.0, 0.0]


def test_one_hot_rows_consume_no_randomness():
    """sample() returns a one-hot row's index without drawing, so greedy replies and the
    random stream of later sampled positions do not depend on how many greedy steps ran."""
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    assert sample(torch.tensor([0.0, 1.0, 0.0]), generator) == 1
    assert torch.equal(generator.get_state(), state)


def test_each_draft_position_draws_its_own_u():
    """With q = one-hot and p(x) = 0.5 at both positions, acceptances are independent: the
    pattern (accept, reject) must occur (a single shared u would make both equal)."""
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    patterns = Counter()
    for seed in range(200):
        res = verify_draft(torch.tensor([0, 0]), None, p, torch.Generator().manual_seed(seed))
        patterns[res.accepted_mask] += 1
    assert patterns[(True, False)] > 20
