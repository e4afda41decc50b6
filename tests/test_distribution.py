"""Distribution: emitted tokens follow the exact target distribution (chi-square).

Exact distributions come from enumeration with an independent float64 warper (lossless.ref_warp),
never from the engine. Each chi-square test fails when p < 1e-4 (1e-3 for the tiny-transformer
tests, which draw fewer samples). Seeds are fixed, so a run is deterministic; with fresh random
seeds a correct engine would fail a given check with probability 1e-4 (1e-3), and this file's 35
checks together with probability below 1 % (union bound: 29 × 1e-4 + 6 × 1e-3 = 0.89 %).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from lossless import (
    FakeLM,
    V,
    assert_matches,
    exact_sequences,
    hashed_logits,
    make_drafter,
    model_drafter,
    run_many,
)
from scipy.stats import chisquare
from tiny_models import tiny_model

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.drafters import ModelDrafter, NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime

# -- every warper, for a model drafter and for the n-gram drafter --------------------------------
WARPERS = [
    pytest.param(0.5, 0, 1.0, id="T0.5"),
    pytest.param(1.0, 0, 1.0, id="T1"),
    pytest.param(1.5, 0, 1.0, id="T1.5"),
    pytest.param(1.0, 2, 1.0, id="top-k2"),
    pytest.param(1.0, 0, 0.7, id="top-p0.7"),
    pytest.param(0.7, 3, 1.0, id="T0.7+top-k3"),
    pytest.param(1.3, 0, 0.8, id="T1.3+top-p0.8"),
    pytest.param(0.8, 4, 0.9, id="T0.8+top-k4+top-p0.9"),
]


@pytest.mark.parametrize("temperature, top_k, top_p", WARPERS)
@pytest.mark.parametrize("drafter_kind", ["model", "ngram"])
def test_every_warper_gives_the_exact_target_distribution(drafter_kind, temperature, top_k, top_p):
    """Joint distribution of 3-token replies, γ = 3, 2000 seeds; both the accept path and the
    residual path must have run (at least 100 accepted and 100 resampled tokens)."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    if drafter_kind == "model":
        prompt, drafter = [3, 1], model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    else:  # the prompt holds repeated n-grams, so lookups find continuations
        prompt, drafter = [3, 1, 4, 1, 5, 3, 1, 4, 0, 2, 5, 4], NgramDrafter()
    settings = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    exact = exact_sequences(fn_t, prompt, 3, **settings)
    n, stats = 2000, Counter()
    counts = run_many(engine, prompt, drafter, n, stats=stats, num_speculative_tokens=3, max_new_tokens=3, **settings)
    assert_matches(counts, exact, n)
    assert stats["accepted"] >= 100 and stats["resampled"] >= 100, stats


DIST_CASES = [
    # drafter, gamma, temperature, top_k, top_p, max_new, eos
    ("other", 2, 1.0, 0, 1.0, 3, ()),
    ("self", 3, 1.0, 0, 1.0, 3, ()),
    ("sharp", 3, 0.8, 0, 1.0, 3, ()),
    ("smaller_vocab", 2, 1.0, 0, 1.0, 3, ()),
    ("padded_vocab", 3, 1.2, 0, 1.0, 3, ()),
    ("ngram", 3, 1.0, 0, 1.0, 3, ()),
    ("fixed_q_bad", 4, 1.0, 3, 1.0, 3, ()),
    ("ragged", 3, 0.9, 0, 0.8, 3, ()),
    ("other", 4, 1.0, 2, 1.0, 3, (0,)),  # EOS inside multi-token commits
    ("sharp", 6, 1.0, 0, 0.9, 2, (5,)),  # γ larger than the budget
    ("self", 5, 0.5, 4, 0.95, 4, (1,)),
]


@pytest.mark.parametrize("kind, gamma, temperature, top_k, top_p, max_new, eos", DIST_CASES)
def test_reply_distribution_is_exactly_the_targets(kind, gamma, temperature, top_k, top_p, max_new, eos):
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    target = FakeLM(V, fn_t)
    engine = SpeculativeEngine(TransformersRuntime(target), None, eos_token_ids=eos)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4] if kind == "ngram" else [3, 1]
    exact = exact_sequences(fn_t, prompt, max_new, temperature=temperature, top_k=top_k, top_p=top_p, eos=eos)
    n = 3000
    counts = run_many(
        engine,
        prompt,
        make_drafter(kind),
        n,
        num_speculative_tokens=gamma,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=max_new,
    )
    assert_matches(counts, exact, n)


def test_target_only_distribution_is_exact():
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    exact = exact_sequences(fn_t, [3, 1], 3, temperature=1.0)
    assert_matches(run_many(engine, [3, 1], None, 3000, temperature=1.0, max_new_tokens=3), exact, 3000)


def test_tiny_transformer_distribution_with_sibling_three_tokens():
    """Real (tiny) transformers and ModelDrafter with real KV caches: joint of 3 tokens, γ=3."""
    vocab = 5
    tgt = tiny_model(vocab_size=vocab, seed=21, init_std=0.2)
    drf = tiny_model(vocab_size=vocab + 2, seed=22, init_std=0.2, family="qwen2")

    @torch.inference_mode()
    def fn(ids):
        return tgt(torch.tensor([ids])).logits[0, -1]

    prompt = [1, 2]
    exact = exact_sequences(fn, prompt, 3, temperature=1.0)
    engine = SpeculativeEngine(TransformersRuntime(tgt), None)
    drafter = ModelDrafter(TransformersRuntime(drf), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="sib")
    n = 1200
    counts = run_many(engine, prompt, drafter, n, num_speculative_tokens=3, temperature=1.0, max_new_tokens=3)
    assert_matches(counts, exact, n)


@torch.inference_mode()
def exact_second_token_distribution(model, prompt, temperature, top_k, top_p):
    from specchat.core.sampling import logits_to_probs

    def probs(ids):
        return logits_to_probs(
            model(torch.tensor([ids])).logits[0, -1:], temperature=temperature, top_k=top_k, top_p=top_p
        )[0].double()

    p1 = probs(prompt)
    out = torch.zeros_like(p1)
    for t in torch.nonzero(p1).flatten().tolist():
        out += p1[t] * probs(prompt + [t])
    return p1, out


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8)])
def test_sampled_tokens_follow_exact_target_distribution(temperature, top_k, top_p):
    """Chi-square of the first two emitted tokens against the exact target distribution.

    Vocabulary 12; 1500 samples through a drafter from another random model (γ=2), fixed
    seeds. Significance 1e-3 per check: with random seeds a correct engine fails 0.2% of runs.
    """
    tgt = tiny_model(vocab_size=12, seed=5, init_std=0.15)
    drf = tiny_model(vocab_size=12, seed=6, init_std=0.15)
    prompt = [1, 2, 3]
    p1, p2 = exact_second_token_distribution(tgt, prompt, temperature, top_k, top_p)
    eng = SpeculativeEngine(TransformersRuntime(tgt), None, eos_token_ids=[])
    drafter = ModelDrafter(TransformersRuntime(drf), target_vocab_size=12, num_tokenizer_ids=12, name="other")
    n = 1500
    c1, c2 = torch.zeros(12), torch.zeros(12)
    for seed in range(n):
        cfg = GenerationConfig(
            num_speculative_tokens=2, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=2
        )
        done = list(eng.generate(prompt, drafter, cfg))[-1]
        c1[done.token_ids[0]] += 1
        c2[done.token_ids[1]] += 1
    for counts, exact in ((c1, p1), (c2, p2)):
        support = exact > 0
        assert counts[~support].sum() == 0  # nothing outside top-k / top-p is ever emitted
        expected = exact[support] / exact[support].sum() * n  # renormalise float rounding
        assert chisquare(counts[support].tolist(), expected.tolist()).pvalue > 1e-3
