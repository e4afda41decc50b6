"""Kind 3, p/q consistency.

target_probs and draft_probs come from the same warper chain (temperature, top-k, top-p; no
repetition penalty is offered) on the same prefix, and q is the distribution each draft token
was really drawn from: one-hot (``draft_probs=None``) for argmax and n-gram drafts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lossless import (
    TOK,
    FakeLM,
    RecordingDrafter,
    V,
    events_of,
    hashed_logits,
    make_drafter,
    model_drafter,
    naive_greedy_fn,
    ref_warp,
)

from specchat.core.engine import SpeculativeEngine
from specchat.core.sampling import logits_to_probs
from specchat.drafters import NgramDrafter
from specchat.drafters.ngram import lookup
from specchat.runtimes.transformers import TransformersRuntime


@pytest.mark.parametrize(
    "temperature, top_k, top_p, rows, num_ids",
    [
        (1.0, 0, 1.0, V, V),
        (0.7, 3, 1.0, V + 3, V - 1),
        (1.3, 0, 0.6, V - 2, V - 2),
        (0.9, 2, 0.9, V, V),
        (0.0, 0, 1.0, V + 3, V - 1),
    ],
)
def test_q_is_the_warped_drafter_distribution_of_the_same_prefix(temperature, top_k, top_p, rows, num_ids):
    """p/q consistency: each draft's q is the drafter's own distribution on ids + earlier drafts,
    after the same temperature / top-k / top-p, padded or cut to the target's vocab and zero on
    ids that are not tokenizer ids; greedy drafts are the argmax with q one-hot (None)."""
    fn_d = hashed_logits(rows, seed=31, scale=3.0)
    drafter = RecordingDrafter(TransformersRuntime(FakeLM(rows, fn_d)), target_vocab_size=V, num_tokenizer_ids=num_ids, name="rec")
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=30, scale=3.0))), None)
    for seed in range(4):
        drafter.log.clear()
        events_of(
            engine,
            [1, 4, 2],
            drafter,
            num_speculative_tokens=4,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            max_new_tokens=16,
        )
        for entry in drafter.log:
            if entry[0] != "drafted":
                continue
            _, tokens, probs, ids = entry
            for i, tok in enumerate(tokens):
                raw = torch.full((V,), -math.inf)
                logits = fn_d(ids + tokens[:i])
                m = min(rows, V)
                raw[:m] = logits[:m]
                raw[num_ids:] = -math.inf
                q = ref_warp(raw, temperature, top_k, top_p)
                if temperature == 0.0:
                    assert probs is None and tok == int(torch.argmax(q))
                else:
                    assert probs[i].tolist() == pytest.approx(q.tolist(), abs=1e-5)
                    assert q[tok] > 0


def greedy_ref_engine():
    fn_t = hashed_logits(257, seed=20, scale=8.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(257, fn_t)), TOK)
    drafter = model_drafter(FakeLM(257, hashed_logits(257, seed=21, scale=8.0)), 257)
    return engine, drafter, naive_greedy_fn(fn_t, [65, 66], 30)


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=1e-4),
        dict(temperature=1.0, top_k=1),
        dict(temperature=1.0, top_p=1e-9),
        dict(temperature=2.0, top_k=1, top_p=0.5),
    ],
)
def test_settings_that_reduce_to_greedy(settings):
    engine, drafter, ref = greedy_ref_engine()
    for seed in range(3):
        done = events_of(engine, [65, 66], drafter, num_speculative_tokens=3, seed=seed, max_new_tokens=30, **settings)[
            -1
        ]
        assert list(done.token_ids) == ref


@pytest.mark.parametrize("temperature", [1e-20, 1e-38, 1e-39])
def test_tiny_but_valid_temperature_does_not_crash(temperature):
    """GenerationConfig accepts any 0 < T <= 5; logits / T must not overflow into NaN."""
    engine, drafter, ref = greedy_ref_engine()
    done = events_of(
        engine, [65, 66], drafter, num_speculative_tokens=3, temperature=temperature, seed=0, max_new_tokens=30
    )[-1]
    assert list(done.token_ids) == ref


def test_top_k_at_or_above_vocab_is_off_and_seeds_reproduce():
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = make_drafter("other")
    outs = {}
    for top_k in (0, V, V + 1, 10_000):
        outs[top_k] = [
            events_of(
                engine,
                [3, 1],
                drafter,
                num_speculative_tokens=3,
                temperature=1.0,
                top_k=top_k,
                seed=s,
                max_new_tokens=12,
            )[-1].token_ids
            for s in range(8)
        ]
    assert outs[0] == outs[V] == outs[V + 1] == outs[10_000]
    again = [
        events_of(engine, [3, 1], drafter, num_speculative_tokens=3, temperature=1.0, seed=s, max_new_tokens=12)[
            -1
        ].token_ids
        for s in range(8)
    ]
    assert again == outs[0]  # same seed → same reply
    assert len(set(outs[0])) >= 6  # different seeds → different replies


def test_deterministic_drafts_report_a_one_hot_q():
    """n-gram drafts and greedy model drafts are not sampled: q must be one-hot (None), else the
    accept test min(1, p/q) would use a q the draft was not drawn from."""
    from specchat.core.config import GenerationConfig as Config

    gen = torch.Generator().manual_seed(0)
    ngram = NgramDrafter().propose([1, 2, 3, 1, 2, 3, 1, 2], 3, Config(temperature=1.0), gen)
    assert ngram.token_ids.tolist() == [3, 1, 2] and ngram.draft_probs is None
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=3, scale=3.0)), V)
    drafter.begin([1, 2])
    greedy = drafter.propose([1, 2], 3, Config(temperature=0.0), gen)
    assert greedy.draft_probs is None and greedy.token_ids.shape == (3,)
    drafter.end()


# -- the shared warper chain at its boundaries (hand values) ----------------------------------
def test_top_p_keeps_exactly_the_tokens_whose_mass_before_is_below_p():
    # four equal tokens, top-p 0.5: mass before the 3rd is exactly 0.5 → two tokens kept
    p = logits_to_probs(torch.zeros(1, 4), temperature=1.0, top_p=0.5)[0]
    assert p.tolist() == pytest.approx([0.5, 0.5, 0.0, 0.0])


def test_top_p_applies_after_temperature():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    p = logits_to_probs(probs.log()[None], temperature=2.0, top_p=0.8)[0]
    tempered = probs.sqrt() / probs.sqrt().sum()  # T = 2: p^(1/2), renormalised
    kept = tempered.clone()
    kept[3] = 0.0  # mass before the 4th token is 0.82 ≥ 0.8
    assert p.tolist() == pytest.approx((kept / kept.sum()).tolist(), abs=1e-6)


def test_top_k_keeps_every_token_tied_at_the_kth_value():
    p = logits_to_probs(torch.tensor([[3.0, 2.0, 2.0, 0.0]]), temperature=1.0, top_k=2)[0]
    assert int((p > 0).sum()) == 3 and p[3] == 0.0


# -- the n-gram drafter's proposals (its q is one-hot: speed, not correctness) ----------------
def test_ngram_proposes_the_continuation_of_the_latest_match():
    assert lookup(np.array([1, 2, 9, 1, 2, 7, 1, 2]), 2, 3, 1) == [7, 1]


def test_ngram_tries_the_longest_suffix_first():
    assert lookup(np.array([1, 2, 3, 9, 2, 4, 1, 2]), 2, 2, 1) == [3, 9]
