"""Kind 1, bookkeeping: a drafter far behind reads only the last MAX_CATCH_UP_TOKENS committed ids.

A model drafter that sat out many rounds (adaptive γ paused it, a long lookup copy) skips the
older unread ids: its cache holds the ids up to a gap, then the last ones. The test model's
logits depend on the whole context it holds, so every assertion below checks what the drafter
really read; the engine's output stays exactly the target's (the target judges against the q the
drafter drew from).
"""

from __future__ import annotations

from collections import Counter

import torch
from lossless import FakeLM, V, assert_matches, cache_tokens, exact_sequences, hashed_logits, naive_greedy_fn, run_many

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.drafters import model as model_module
from specchat.drafters.model import MAX_CATCH_UP_TOKENS, ModelDrafter
from specchat.runtimes.transformers import TransformersRuntime


def context_logits(prefix):
    """Logits that depend on every id of the context (and its length), not just the last ones."""
    g = torch.Generator().manual_seed(hash(tuple(prefix)) % (2**31))
    return 3.0 * torch.rand(V, generator=g)


def _drafter():
    return ModelDrafter(TransformersRuntime(FakeLM(V, context_logits)), target_vocab_size=V, num_tokenizer_ids=V, name="d")


def test_a_drafter_far_behind_reads_the_last_ids_and_its_positions_follow_the_gap():
    greedy = GenerationConfig(num_speculative_tokens=2, max_new_tokens=64)
    prompt = [1, 2, 3, 4, 5]
    behind = [(7 * i + 3) % V for i in range(30)]  # committed while the drafter sat out
    ids = prompt + behind
    drafter = _drafter()
    drafter.begin(prompt)
    assert cache_tokens(drafter.runtime.cache) == prompt[:-1]
    draft = drafter.propose(ids, 2, greedy, torch.Generator())
    read = prompt[:-1] + ids[-MAX_CATCH_UP_TOKENS:]  # the gap: ids[4 : 35 - 16] never read
    d1 = int(context_logits(read).argmax())
    d2 = int(context_logits(read + [d1]).argmax())
    assert draft.token_ids.tolist() == [d1, d2]
    assert drafter.num_skipped == len(ids) - 4 - MAX_CATCH_UP_TOKENS == 15
    assert cache_tokens(drafter.runtime.cache) == read + [d1]
    # the target accepted d1 and rejected d2 (num_valid = committed + 1): nothing to cut yet
    drafter.rollback(len(ids) + 1)
    assert cache_tokens(drafter.runtime.cache) == read + [d1]
    t = (d2 + 1) % V  # the resampled token
    ids2 = ids + [d1, t]
    draft = drafter.propose(ids2, 1, greedy, torch.Generator())
    d3 = int(context_logits(read + [d1, t]).argmax())
    assert draft.token_ids.tolist() == [d3] and cache_tokens(drafter.runtime.cache) == read + [d1, t]
    # rejected: the cut keeps committed ids[:len(ids2)] = cache positions len(ids2) − 15
    drafter.rollback(len(ids2))
    assert cache_tokens(drafter.runtime.cache) == read + [d1, t][: len(ids2) - 15 - len(read)]
    ids3 = ids2 + [(d3 + 1) % V]
    draft = drafter.propose(ids3, 1, greedy, torch.Generator())
    assert draft.token_ids.tolist() == [int(context_logits(read + [d1, t, ids3[-1]]).argmax())]
    # the conversation prefix kept for the next reply ends at the gap
    drafter.keep_prefix(ids3)
    assert drafter.kept_ids == tuple(prompt[:-1])
    drafter.end()


def test_a_drafter_one_token_behind_reads_everything():
    """Behind by no more than MAX_CATCH_UP_TOKENS: no gap, the cache is the committed prefix."""
    prompt = [1, 2, 3, 4, 5]
    ids = prompt + [(5 * i) % V for i in range(MAX_CATCH_UP_TOKENS - 1)]
    drafter = _drafter()
    drafter.begin(prompt)
    draft = drafter.propose(ids, 1, GenerationConfig(num_speculative_tokens=1, max_new_tokens=64), torch.Generator())
    assert drafter.num_skipped == 0 and cache_tokens(drafter.runtime.cache) == ids
    assert draft.token_ids.tolist() == [int(context_logits(ids).argmax())]
    drafter.end()


def test_gaps_at_every_round_keep_the_exact_distribution_and_greedy_output(monkeypatch):
    """With a catch-up of 1 id, every full acceptance (two ids unread) opens a gap: sampled γ = 1
    4-token replies at T = 1 over 2000 seeds still match exact enumeration (p ≥ 1e-4), and
    greedy replies equal the target's own greedy decode."""
    monkeypatch.setattr(model_module, "MAX_CATCH_UP_TOKENS", 1)
    fn_t = hashed_logits(V, seed=21, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = ModelDrafter(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=21, scale=1.5))),
                           target_vocab_size=V, num_tokenizer_ids=V, name="d")
    skipped = []
    original_end = drafter.end
    drafter.end = lambda: (skipped.append(drafter.num_skipped), original_end())
    prompt = [3, 1]
    stats = Counter()
    counts = run_many(engine, prompt, drafter, 2000, stats=stats, num_speculative_tokens=1, max_new_tokens=4,
                      temperature=1.0)
    assert sum(1 for s in skipped if s) >= 200 and stats["accepted"] >= 100 and stats["resampled"] >= 100
    assert_matches(counts, exact_sequences(fn_t, prompt, 4, temperature=1.0), 2000)
    skipped.clear()
    config = GenerationConfig(num_speculative_tokens=2, max_new_tokens=24)
    done = list(engine.generate(prompt, drafter, config))[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, prompt, 24) and skipped[-1] > 0
