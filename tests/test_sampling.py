"""Hand-computed checks of the warpers and the accept/resample rule (Algorithm 1)."""

import math

import pytest
import torch

from specchat.core.sampling import logits_to_probs


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


@pytest.mark.parametrize("temperature", [1e-300, 1e-45, 1e-38, 1e-31, 1e-29, 1e-12])
def test_a_tiny_positive_temperature_is_greedy_not_nan(temperature):
    """T → 0+ is the argmax, with ties at the maximum sharing the mass equally; a T that rounds
    to 0 in float32 used to give 0/0 = NaN (found by a breaker session via the API)."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 4.0, 3.999]])
    probs = logits_to_probs(logits, temperature=temperature)
    assert torch.isfinite(probs).all()
    assert probs.tolist() == [[0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0]]
