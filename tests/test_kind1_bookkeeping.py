"""Kind 1, bookkeeping after partial acceptance.

After every round both KV caches hold exactly the committed tokens and positions derive from
that one length; a cache that cannot be cut back is refused with CacheRollbackError and left
untouched; full acceptance leaves the drafter one token behind and it catches up.
"""

from __future__ import annotations

import pytest
import torch
from lossless import FakeLM, RecordingDrafter, V, events_of, hashed_logits, naive_greedy
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent, RoundEvent
from specchat.drafters import ModelDrafter
from specchat.runtimes.transformers import CacheRollbackError, TransformersRuntime, cut_cache


def check_bookkeeping(target: FakeLM, drafter: RecordingDrafter | None, prompt, done: DoneEvent):
    committed = list(prompt) + list(done.token_ids)
    # target: the prefill, then one verify per round whose cache is committed[:len-1] and whose
    # first input is the last committed token
    calls = target.calls
    first_cached, first_new = calls[0]
    if list(first_cached) + list(first_new) == list(prompt[:-1]):
        calls = calls[1:]  # the prefill, of what a kept cache (the prefix cache) did not hold
    else:  # the kept cache held the whole prompt but its last token: no prefill pass
        assert first_cached == tuple(prompt[:-1])
    for cached, new in calls:
        seq = list(cached) + [new[0]]
        assert seq == committed[: len(seq)], "target cache holds tokens that were not committed"
    if drafter is None:
        return
    for entry in drafter.log:
        if entry[0] == "propose":
            _, ids, cache, _ = entry
            assert ids == committed[: len(ids)]
            assert cache == ids[: len(cache)], "drafter cache is not a prefix of the committed ids"
            assert len(ids) - 2 <= len(cache) <= len(ids) - 1
        elif entry[0] == "rollback":
            _, num_valid, cache = entry
            assert len(cache) <= num_valid
            assert cache == committed[: len(cache)]


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_exactly_the_committed_tokens(gamma, temperature):
    fn_t = hashed_logits(V, seed=1, scale=2.0)
    target = FakeLM(V, fn_t)
    dmodel = FakeLM(V, hashed_logits(V, seed=2, scale=2.0))
    drafter = RecordingDrafter(TransformersRuntime(dmodel), target_vocab_size=V, num_tokenizer_ids=V, name="rec")
    engine = SpeculativeEngine(TransformersRuntime(target), None)
    prompt = [1, 2, 3, 4, 5]
    for seed in range(6):
        target.calls.clear()
        drafter.log.clear()
        events = events_of(
            engine, prompt, drafter, num_speculative_tokens=gamma, temperature=temperature, seed=seed, max_new_tokens=25
        )
        done = events[-1]
        assert len(done.token_ids) == 25
        check_bookkeeping(target, drafter, prompt, done)
        # the drafter is exactly one behind after a fully accepted round, else fully caught up
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        proposes = [e for e in drafter.log if e[0] == "propose"]
        for r, nxt in zip(rounds, proposes[1:]):
            _, ids, cache, _ = nxt
            behind = len(ids) - len(cache)
            assert behind == (2 if r.num_accepted == r.num_drafted else 1), (r, behind)


def test_self_drafter_full_acceptance_every_round():
    """Drafting with the target itself at T=1: q = p exactly, every draft accepted, bonus each round."""
    fn = hashed_logits(V, seed=3, scale=2.0)
    target = FakeLM(V, fn)
    drafter = RecordingDrafter(TransformersRuntime(FakeLM(V, fn)), target_vocab_size=V, num_tokenizer_ids=V, name="self")
    engine = SpeculativeEngine(TransformersRuntime(target), None)
    events = events_of(engine, [0, 1], drafter, num_speculative_tokens=4, temperature=1.0, seed=0, max_new_tokens=23)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert [r.num_committed for r in rounds] == [5, 5, 5, 5, 3]
    assert all(r.num_accepted == r.num_drafted for r in rounds)
    check_bookkeeping(target, drafter, [0, 1], events[-1])


# Caches that cannot be cut back (sliding-window layers past their window)


def sliding_qwen(window=8, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        use_sliding_window=True,
        sliding_window=window,
        max_window_layers=1,
        initializer_range=0.3,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return Qwen2ForCausalLM(cfg).eval()


def test_cut_cache_within_the_sliding_window_is_exact():
    model = sliding_qwen()
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.arange(6)[None], cache=cache, use_cache=True)
        cut_cache(cache, 4)
        assert [layer.get_seq_length() for layer in cache.layers] == [4, 4]
        with pytest.raises(CacheRollbackError):
            cut_cache(cache, 5)
        with pytest.raises(CacheRollbackError):
            cut_cache(cache, -1)


@pytest.mark.parametrize(
    "num_tokens, cut_to",
    [
        (12, 10),  # past the window of 8
        (8, 6),  # exactly at the window: transformers keeps only window − 1 positions in a full sliding layer
    ],
)
def test_cut_cache_refuses_a_sliding_layer_at_or_past_its_window_and_leaves_it_untouched(num_tokens, cut_to):
    model = sliding_qwen(window=8)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.arange(num_tokens)[None], cache=cache, use_cache=True)
    before = [(layer.get_seq_length(), layer.keys.shape[-2]) for layer in cache.layers]
    with pytest.raises(CacheRollbackError):
        cut_cache(cache, cut_to)
    assert [(layer.get_seq_length(), layer.keys.shape[-2]) for layer in cache.layers] == before


def test_engine_with_sliding_window_target_is_exact_or_refuses_clearly():
    """Past the window a partial rejection needs a cut: exact output, or a CacheRollbackError."""
    model = sliding_qwen(window=8, seed=1)
    prompt = list(range(3, 15))
    ref = naive_greedy(model, prompt, 12)
    engine = SpeculativeEngine(TransformersRuntime(model), None)
    drafter = ModelDrafter(TransformersRuntime(sliding_qwen(window=8, seed=2)), target_vocab_size=64, num_tokenizer_ids=64, name="sw")
    try:
        done = events_of(engine, prompt, drafter, num_speculative_tokens=3, max_new_tokens=12)[-1]
    except CacheRollbackError:
        return
    assert list(done.token_ids) == ref
