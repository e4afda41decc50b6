"""The audit's checks: they pass on the engine and fail when the engine is broken on purpose."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lossless import FakeLM, TinyService, V, hashed_logits, naive_greedy_fn
from tiny_models import tiny_model

from specchat.analysis import audit
from specchat.core import sampling
from specchat.core.config import GenerationConfig
from specchat.drafters.ngram import lookup


@pytest.fixture(scope="module")
def service():
    return TinyService(
        tiny_model(vocab_size=10, seed=3, init_std=0.2), tiny_model(vocab_size=10, seed=4, init_std=0.2), 10
    )


def test_chi_square_matches_hand_computation():
    exact = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0], dtype=torch.float64)
    counts = torch.tensor([480.0, 330.0, 140.0, 50.0, 0.0])
    check = audit.chi_square(exact, counts)
    # (20²/500 + 30²/300 + 10²/150 + 0) = 0.8 + 3 + 0.6667 = 4.4667 with 3 dof → p = 0.2153
    assert check.statistic == pytest.approx(4.46667, abs=1e-4) and check.dof == 3
    assert check.p_value == pytest.approx(0.21528, abs=1e-4)
    assert check.outside_support == 0 and check.rows[0] == (0, 0.5, 480)


def test_greedy_check_passes_on_the_engine(service):
    ref, other, div = audit.greedy_check(service, [1, 2, 3], "other", 30)
    assert div is None and ref == other and len(ref) == 30


def test_sampled_check_passes_and_fails_when_the_residual_is_broken(service, monkeypatch):
    config = GenerationConfig(num_speculative_tokens=1, temperature=1.0, seed=0)
    good = audit.sampled_check(service, [1, 2, 3], "other", 600, config)
    assert good.num_drafted == 600 and good.p_value > 1e-3 and good.outside_support == 0
    # deliberate breakage: resample from p instead of norm(max(0, p − q))
    monkeypatch.setattr(sampling, "residual_probs", lambda target_probs, draft_probs, token: target_probs)
    bad = audit.sampled_check(service, [1, 2, 3], "other", 600, config)
    assert bad.p_value < 1e-3


def test_sampled_check_counts_what_was_drafted_by_token_kind(service):
    """With the drafter 'none' every draw is a target token: nothing was drafted, nothing
    accepted, and the distribution is still exactly the target's. With an n-gram lookup on a
    prompt whose last token never occurred before, the lookup finds nothing either."""
    config = GenerationConfig(num_speculative_tokens=1, temperature=1.0, seed=0)
    for drafter, prompt in (("none", [1, 2, 3]), ("ngram", [1, 2, 3])):
        check = audit.sampled_check(service, prompt, drafter, 100, config)
        assert (check.num_drafted, check.num_accepted) == (0, 0), drafter
        assert check.outside_support == 0 and check.p_value > 1e-4


def test_sampled_check_with_top_k_compares_like_with_like(service):
    config = GenerationConfig(num_speculative_tokens=1, temperature=1.0, top_k=3, seed=0)
    check = audit.sampled_check(service, [1, 2, 3], "other", 300, config)
    assert check.outside_support == 0 and check.p_value > 1e-3


def test_auto_position_is_drafted_and_exercises_both_paths():
    """A target built so that the most uncertain reply position (0) has an n-gram proposal with
    p = 0.02 (nearly always resampled) and the next most uncertain (1) one with p = 0.5: the
    audit must pick position 1, where accepts and resamples both occur."""
    prompt = [0, 1, 2, 4, 5, 3, 5]

    def fn(prefix):
        i = len(prefix) - len(prompt)
        proposal = lookup(np.array(prefix), 1, 3, 1)
        if i == 0 and proposal:  # entropy 1.68 nats
            p = torch.full((V,), 0.98 / (V - 1))
            p[proposal[0]] = 0.02
        elif i == 1 and proposal:  # entropy 1.50 nats
            p = torch.full((V,), 0.5 / (V - 1))
            p[proposal[0]] = 0.5
        else:  # decisive: entropy 0.28 nats
            p = torch.full((V,), 0.01)
            p[2] = 0.95
        return p.log()

    service = TinyService(FakeLM(V, fn), FakeLM(V, hashed_logits(V, seed=12, scale=2.0)), V)
    reference = naive_greedy_fn(fn, prompt, 12)
    config = GenerationConfig(temperature=1.0, seed=0)
    assert lookup(np.array(prompt), 1, 3, 1) and lookup(np.array(prompt + reference[:1]), 1, 3, 1)
    assert audit.choose_position(service, prompt, reference, "ngram", config) == 1
