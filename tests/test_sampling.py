"""Hand-computed checks of the warpers and the accept/resample rule (Algorithm 1)."""

import math

import pytest
import torch
from scipy.stats import chisquare

from specchat.events import TokenKind
from specchat.sampling import logits_to_probs, residual_probs, sample, verify_draft


def probs_of(values):
    return torch.log(torch.tensor([values], dtype=torch.float32))


def test_greedy_is_one_hot_at_argmax_lowest_id_on_ties():
    probs = logits_to_probs(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), temperature=0.0)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_temperature_matches_hand_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    probs = logits_to_probs(logits, temperature=2.0)[0]
    z = [math.exp(x / 2.0) for x in (0.0, 1.0, 2.0)]
    assert probs.tolist() == pytest.approx([v / sum(z) for v in z], abs=1e-6)


def test_top_k_keeps_k_most_likely():
    probs = logits_to_probs(probs_of([0.1, 0.4, 0.2, 0.3]), temperature=1.0, top_k=2)[0]
    assert probs.tolist() == pytest.approx([0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7], abs=1e-6)


@pytest.mark.parametrize(
    "top_p, expected",
    [
        (0.8, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]),  # mass before the 3rd token is already 0.8
        (0.81, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),
        (0.1, [1.0, 0.0, 0.0, 0.0]),  # the most likely token is always kept
    ],
)
def test_top_p_hand_values(top_p, expected):
    probs = logits_to_probs(probs_of([0.5, 0.3, 0.15, 0.05]), temperature=1.0, top_p=top_p)[0]
    assert probs.tolist() == pytest.approx(expected, abs=1e-6)


def test_top_k_then_top_p():
    # top_k=3 → [0.5, 0.3, 0.15]/0.95; top_p=0.6 keeps 0.526 + 0.316 (mass before 2nd = 0.526 < 0.6)
    probs = logits_to_probs(probs_of([0.5, 0.3, 0.15, 0.05]), temperature=1.0, top_k=3, top_p=0.6)[0]
    assert probs.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0], abs=1e-6)


@pytest.fixture
def fixed_u(monkeypatch):
    """verify_draft draws u with torch.rand; make it return the given values."""

    def install(values):
        real_rand = torch.rand

        def fake_rand(n, generator=None, device=None):
            assert n == len(values)
            return torch.tensor(values, dtype=torch.float32)

        monkeypatch.setattr(torch, "rand", fake_rand)
        return real_rand

    return install


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


def test_leading_run_only(fixed_u):
    # accept, reject, accept → num_accepted = 1 even though position 2 passed the test
    fixed_u([0.0, 0.99, 0.0])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0], [1.0, 0.0]])
    draft = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    res = verify_draft(torch.tensor([0, 0, 0]), draft, target, None)
    assert res.num_accepted == 1
    assert res.accepted_mask == (True, False, True)
    assert res.next_kind is TokenKind.RESAMPLED and res.next_token_id == 1


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
