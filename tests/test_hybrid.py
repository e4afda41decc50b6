"""The hybrid drafter (lookup first, then a model): its lookup on hand-worked contexts, greedy
identity against a naive target-only loop, and the exact target distribution (chi-square) at two
warper settings with both sources drafting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from lossless import (
    TINY_PROMPT,
    TINY_VOCAB,
    FakeLM,
    V,
    assert_matches,
    events_of,
    exact_sequences,
    hashed_logits,
    model_drafter,
    naive_greedy,
)
from tiny_models import tiny_model

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent
from specchat.drafters import HybridDrafter, ModelDrafter
from specchat.drafters import kinds as drafter_kinds
from specchat.drafters.hybrid import frequent_continuation
from specchat.runtimes.transformers import TransformersRuntime


def lookup(ids, max_tokens=16, max_ngram=8, min_ngram=2):
    return frequent_continuation(np.asarray(ids, dtype=np.int64), max_tokens, max_ngram, min_ngram)


# -- the lookup, worked by hand ------------------------------------------------------------------
def test_the_continuation_seen_most_often_wins_over_the_latest():
    # [5, 6] is followed by 7 (at 2), 7 (at 5) and 8 (at 8): 7 twice, so 7, although plain prompt
    # lookup (the latest match) would copy 8. Then 5, 6 at both places; then 7 (place 2) and 8
    # (place 5) tie once each: the latest place, 5, gives 8, and the copy goes on from there.
    ids = [5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6]
    assert lookup(ids) == ([7, 5, 6, 8, 5, 6], 5, 2)
    # cut at two tokens: places 2 and 5 both still agree, and the copy is named by the latest
    assert lookup(ids, max_tokens=2) == ([7, 5], 5, 2)


def test_the_longest_suffix_is_tried_first():
    # the 6-token suffix [1, 2, 3, 9, 1, 2] occurred once, at 0, followed by 4; the 2-token
    # suffix [1, 2] is followed by 3 twice and 4 once, but the longer match decides
    ids = [1, 2, 3, 9, 1, 2, 4, 1, 2, 3, 9, 1, 2]
    assert lookup(ids, max_tokens=3) == ([4, 1, 2], 6, 6)
    assert lookup(ids, max_tokens=3, max_ngram=2) == ([3, 9, 1], 9, 2)


def test_no_match_of_min_ngram_tokens_gives_nothing():
    assert lookup([1, 2, 3, 4, 5, 1]) == ([], None, None)  # only a 1-token match ([1])
    assert lookup([1, 2, 3, 4, 5, 1], min_ngram=1) == ([2, 3, 4, 5, 1], 1, 1)
    assert lookup([7]) == ([], None, None)


def test_the_copy_is_where_the_trace_says_on_random_contexts():
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(300):
        ids = rng.integers(0, 4, size=int(rng.integers(2, 40))).tolist()
        tokens, start, n = lookup(ids, max_tokens=6, min_ngram=1)
        if not tokens:
            continue
        found += 1
        assert 1 <= len(tokens) <= 6
        assert ids[start - n : start] == ids[-n:] and start - n < len(ids) - n
        assert ids[start : start + len(tokens)] == tokens
        longer = ids[-(n + 1):]  # no longer suffix occurs earlier
        assert n == min(8, len(ids) - 1) or not any(
            ids[i : i + n + 1] == longer for i in range(len(ids) - n - 1)
        )
    assert found > 200


def test_a_round_is_named_by_its_source_and_match_length():
    # adaptive γ keeps one controller per name: a lookup after a long match is right far more
    # often than one after a short match, and a model round costs a drafter step per token
    drafter = HybridDrafter(model_drafter(FakeLM(V, hashed_logits(V, seed=1, scale=2.0)), V))  # min 3, long 8
    long_ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8]  # the last 8 ids occurred at 0
    assert drafter.round_source(long_ids) == "lookup-long"
    short_ids = [1, 2, 3, 4, 9, 1, 2, 3]  # [1, 2, 3] occurred, [9, 1, 2, 3] did not
    assert drafter.round_source(short_ids) == "lookup-short"
    assert drafter.round_source(short_ids[:-1]) == "model"  # [1, 2]: shorter than min_match
    assert HybridDrafter(drafter.model_drafter, long_match=3).round_source(short_ids) == "lookup-long"
    with pytest.raises(ValueError, match="long_match"):
        HybridDrafter(drafter.model_drafter, min_match=3, long_match=2)


def test_the_kind_is_in_the_table():
    kind = drafter_kinds.get("hybrid")
    assert kind.is_model and not kind.needs_sibling
    assert "hybrid" in drafter_kinds.kinds_for(has_sibling=False)


# -- greedy identity -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_pair():
    target = tiny_model(vocab_size=TINY_VOCAB, seed=0)
    other = tiny_model(vocab_size=TINY_VOCAB, seed=1)
    return target, other


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_hybrid_greedy_output_is_target_only_output(tiny_pair, gamma):
    target, other = tiny_pair
    prompt = TINY_PROMPT * 2  # repeats itself: lookup rounds; the tiny model's own text: model rounds
    reference = naive_greedy(target, prompt, 40)
    part = ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="sibling")
    drafter = HybridDrafter(part)
    engine = SpeculativeEngine(TransformersRuntime(target), None, eos_token_ids=[])
    events = events_of(engine, prompt, drafter, num_speculative_tokens=gamma, max_new_tokens=40)
    assert list(events[-1].token_ids) == reference
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert drafter.num_lookup_rounds >= 1 and drafter.num_model_rounds >= 1, (
        drafter.num_lookup_rounds, drafter.num_model_rounds)
    assert sum(r.num_drafted for r in rounds) >= 10
    if gamma == 8:  # adaptive γ: one controller per source, since their acceptance and costs differ
        events_of(engine, prompt, drafter, num_speculative_tokens=8, adaptive_gamma=True, max_new_tokens=40)
        # the prompt repeated whole: its lookups follow long matches
        assert {k[3] for k in engine.gamma_controllers if k[0] == "hybrid"} == {"lookup-long", "model"}
    # the model part kept the conversation's cache for the next turn; forgetting it reaches the part
    assert drafter.kept_ids is not None and part.kept_ids == drafter.kept_ids
    drafter.forget_prefix()
    assert part.kept_ids is None and part.runtime.cache is None


# -- the exact target distribution -----------------------------------------------------------------
@pytest.mark.parametrize("temperature, top_k, top_p", [
    pytest.param(1.0, 0, 1.0, id="T1"),
    pytest.param(0.8, 4, 0.9, id="T0.8+top-k4+top-p0.9"),
])
def test_hybrid_gives_the_exact_target_distribution(temperature, top_k, top_p):
    """Joint distribution of 4-token replies, γ = 3, 3000 seeds, p < 1e-4 fails; both sources
    drafted hundreds of rounds, and both the accept and the residual path ran."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    part = model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    drafter = HybridDrafter(part, min_match=2)  # 6 ids: 2-token matches make lookup rounds often enough
    prompt = [3, 1, 4, 1, 5, 3, 1, 4, 0, 2, 5, 4]  # repeated bigrams: some rounds find a match
    settings = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    exact = exact_sequences(fn_t, prompt, 4, **settings)
    lookups = models = 0
    n, stats, counts = 3000, Counter(), Counter()
    for seed in range(n):
        events = list(engine.generate(prompt, drafter, GenerationConfig(
            seed=seed, num_speculative_tokens=3, max_new_tokens=4, **settings)))
        counts[tuple(events[-1].token_ids)] += 1
        stats.update(k.value for k in events[-1].kinds)
        lookups += drafter.num_lookup_rounds
        models += drafter.num_model_rounds
    assert_matches(counts, exact, n)
    assert lookups >= 300 and models >= 300, (lookups, models)
    assert stats["accepted"] >= 100 and stats["resampled"] >= 100, stats
