"""Kind 7, context bounds.

A prompt that ends 0…γ+1 tokens before the context limit still works (drafts shrink, then
plain decoding); an empty prompt is a clear error.
"""

from __future__ import annotations

import pytest
from lossless import (
    TINY_PROMPT,
    TINY_VOCAB,
    FakeLM,
    V,
    events_of,
    hashed_logits,
    model_drafter,
    naive_greedy,
    naive_greedy_fn,
)

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import StopReason
from specchat.drafters import ModelDrafter
from specchat.runtimes.transformers import TransformersRuntime


def test_context_window_bounds(target):
    eng = SpeculativeEngine(TransformersRuntime(target), None, eos_token_ids=[], context_length=len(TINY_PROMPT) + 3)
    ref = naive_greedy(target, TINY_PROMPT, 3)
    drafter = ModelDrafter(TransformersRuntime(target), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="self")
    done = events_of(eng, TINY_PROMPT, drafter, num_speculative_tokens=8, max_new_tokens=40)[-1]
    assert list(done.token_ids) == ref and done.stop_reason is StopReason.CONTEXT_FULL
    with pytest.raises(ValueError, match="no room"):
        list(
            SpeculativeEngine(TransformersRuntime(target), None, context_length=len(TINY_PROMPT)).generate(
                TINY_PROMPT, None, GenerationConfig()
            )
        )
    with pytest.raises(ValueError, match="empty"):
        list(eng.generate([], None, GenerationConfig()))


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompts_ending_0_to_gamma_plus_1_before_the_context_limit(gamma, temperature):
    fn_t = hashed_logits(V, seed=8, scale=4.0)
    prompt = [1, 2, 3, 4, 5, 0, 1]
    for slack in range(gamma + 3):
        ctx = len(prompt) + slack
        target = FakeLM(V, fn_t, max_positions=ctx)
        engine = SpeculativeEngine(TransformersRuntime(target), None)
        dmodel = FakeLM(V, fn_t, max_positions=ctx)  # the drafter = the target: long commits
        drafter = model_drafter(dmodel, V)
        cfg = dict(num_speculative_tokens=gamma, temperature=temperature, seed=1, max_new_tokens=50)
        if slack == 0:
            with pytest.raises(ValueError):
                list(engine.generate(prompt, drafter, GenerationConfig(**cfg)))
            continue
        done = events_of(engine, prompt, drafter, **cfg)[-1]
        assert len(done.token_ids) == slack and done.stop_reason is StopReason.CONTEXT_FULL
        if temperature == 0.0:
            assert list(done.token_ids) == naive_greedy_fn(fn_t, prompt, slack)


def test_one_token_prompt_and_empty_prompt():
    fn_t = hashed_logits(V, seed=8, scale=4.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=9, scale=4.0)), V)
    done = events_of(engine, [4], drafter, num_speculative_tokens=3, max_new_tokens=12)[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, [4], 12)
    with pytest.raises(ValueError, match="empty"):
        list(engine.generate([], drafter, GenerationConfig()))
