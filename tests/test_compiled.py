"""The compiled target (issue 14): torch.compile with freezing over one static cache, passes
padded to buckets. Its logits equal the eager model's full-sequence logits (fp32, to float
precision) for every pass length, before and after padded passes and cuts; greedy generation
through it, with and without a drafter and across turns that reuse the static cache, equals
the naive full-sequence greedy loop."""

from __future__ import annotations

import pytest
import torch
from lossless import TINY_PROMPT, TINY_VOCAB, naive_greedy

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.runtimes.compiled import CompiledTarget
from specchat.runtimes.transformers import TransformersRuntime

BUCKETS = (2, 4)  # one dynamic graph; a 1-position pass is padded to 2, a 3-position one to 4, 5+ run eagerly


@pytest.fixture(scope="module")
def compiled(target):
    ct = CompiledTarget(target, max_cache_len=160, buckets=BUCKETS)
    ct.warm_up()
    assert ct.compiled_buckets == set(BUCKETS) and ct.seq_length() == 0
    yield ct
    del ct
    torch._dynamo.reset()  # drop the graphs and their traced (fake) tensors for the tests after


@torch.inference_mode()
def _full_logits(model, ids):
    return model(torch.tensor([ids])).logits[0]


def test_bad_buckets_are_refused(target):
    with pytest.raises(ValueError, match="ascending"):
        CompiledTarget(target, buckets=(4, 1))
    with pytest.raises(ValueError, match="ascending"):
        CompiledTarget(target, buckets=())
    with pytest.raises(ValueError, match="exceed the largest bucket"):
        CompiledTarget(target, max_cache_len=4, buckets=(2, 4))


def test_every_pass_length_gives_the_eager_logits(compiled, target):
    """Passes of 1…6 positions in a row (padded to 2 or 4, or eager past 4), then a cut back as
    after a rejection and more passes: each pass's logits are the full-sequence logits at its
    positions, so the padding's states never leak into a real position."""
    ids = [(7 * i + 3) % 256 for i in range(80)]
    full = _full_logits(target, ids)
    with torch.inference_mode():
        compiled.reset()
        compiled.forward(ids[:10], logits_to_keep=1)  # a prefill (eager, on the static cache)
        for n in (1, 2, 3, 4, 5, 6, 2, 1):
            length = compiled.seq_length()
            out = compiled.forward(ids[length : length + n], logits_to_keep=0)
            assert out.shape == (n, TINY_VOCAB)
            torch.testing.assert_close(out, full[length : length + n], rtol=0, atol=1e-4)
            assert compiled.seq_length() == length + n  # the padding was cut off
        # a rejection: cut back two positions, then feed different tokens there
        length = compiled.seq_length()
        compiled.cache.crop(-2)
        other = ids[: length - 2] + [200, 201, 202]
        out = compiled.forward(other[length - 2 :], logits_to_keep=2)
        torch.testing.assert_close(out, _full_logits(target, other)[-2:], rtol=0, atol=1e-4)
        compiled.reset()


def test_a_pass_that_does_not_fit_is_refused(compiled):
    with torch.inference_mode():
        compiled.reset()
        compiled.forward(list(range(158)), logits_to_keep=1)
        assert compiled.fits(156) and not compiled.fits(157)  # + the largest bucket's 4
        with pytest.raises(ValueError, match="static cache holds 160"):
            compiled.forward([1, 2, 3], logits_to_keep=1)  # padded to 4: 158 + 4 > 160
        compiled.reset()


@pytest.mark.parametrize("kind", ["none", "ngram", "model"])
def test_greedy_through_the_compiled_target_equals_naive_greedy_over_two_turns(compiled, target, other, kind):
    """Two turns on one engine: the second reuses the static cache's prefix. Both replies equal
    the naive full-sequence greedy continuation of their prompts."""
    from tiny_models import byte_tokenizer

    engine = SpeculativeEngine(TransformersRuntime(target, compiled=compiled), byte_tokenizer(), eos_token_ids=[])
    drafter = {"none": None, "ngram": NgramDrafter(), "model": ModelDrafter(
        TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="other")}[kind]
    config = GenerationConfig(num_speculative_tokens=3, max_new_tokens=20, seed=0)
    first = list(engine.generate(TINY_PROMPT, drafter, config))[-1]
    assert isinstance(first, DoneEvent) and engine.target.static
    assert list(first.token_ids) == naive_greedy(target, TINY_PROMPT, 20)
    assert engine.kept_ids is not None and engine.target.cache is compiled.cache
    prompt2 = TINY_PROMPT + list(first.token_ids) + list(b"\ndef sub(a, b):\n")
    second = list(engine.generate(prompt2, drafter, config))[-1]
    assert second.num_prefilled == len(prompt2) - 1 - (len(TINY_PROMPT) + 20 - 1)  # the kept prefix reused
    assert list(second.token_ids) == naive_greedy(target, prompt2, 20)


def test_a_generation_too_long_for_the_static_cache_runs_eagerly(compiled, target):
    from tiny_models import byte_tokenizer

    engine = SpeculativeEngine(TransformersRuntime(target, compiled=compiled), byte_tokenizer(), eos_token_ids=[])
    config = GenerationConfig(num_speculative_tokens=3, max_new_tokens=140, seed=0)
    done = list(engine.generate(TINY_PROMPT, NgramDrafter(), config))[-1]
    assert not engine.target.static  # prompt + 140 + the largest bucket > 160 positions
    assert list(done.token_ids) == naive_greedy(target, TINY_PROMPT, 140)


def test_a_kept_prefix_is_reused_only_on_the_kind_of_cache_it_was_kept_on(compiled, target):
    """A long generation (eager, dynamic cache) then a short one that extends it (static cache),
    then a long one again: the kept prefix of the other kind is dropped, so each prompt is
    prefilled whole, and every reply equals naive greedy."""
    from tiny_models import byte_tokenizer

    engine = SpeculativeEngine(TransformersRuntime(target, compiled=compiled), byte_tokenizer(), eos_token_ids=[])
    long, short = (GenerationConfig(num_speculative_tokens=3, max_new_tokens=n, seed=0) for n in (140, 12))
    first = list(engine.generate(TINY_PROMPT, NgramDrafter(), long))[-1]
    assert not engine.target.static and engine.kept_ids is not None and engine.target.cache is not compiled.cache
    prompt2 = TINY_PROMPT + list(first.token_ids[:10]) + list(b"\n# next\n")
    second = list(engine.generate(prompt2, NgramDrafter(), short))[-1]
    assert engine.target.static and second.num_prefilled == len(prompt2) - 1
    assert list(second.token_ids) == naive_greedy(target, prompt2, 12)
    prompt3 = prompt2 + list(second.token_ids) + list(b"\n")
    third = list(engine.generate(prompt3, NgramDrafter(), long))[-1]
    assert not engine.target.static and third.num_prefilled == len(prompt3) - 1
    assert list(third.token_ids) == naive_greedy(target, prompt3, len(third.token_ids))
