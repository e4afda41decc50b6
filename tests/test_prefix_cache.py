"""The prefix cache (issue 14): a chat's next turn reuses the KV states of the conversation so
far and prefills only its new tokens, and the reply is token-identical to one computed from a
fresh cache (greedy, fp32), against a naive full-sequence greedy loop as well. A different
prompt, a trimmed history, another drafter, a cancelled or failed generation: every case reuses
only what matches token for token."""

from __future__ import annotations

import threading

import pytest
from lossless import TINY_PROMPT, TINY_VOCAB, naive_greedy

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime

GREEDY = GenerationConfig(num_speculative_tokens=4, max_new_tokens=24, seed=0)


@pytest.fixture()
def fresh_engine(target):
    """A new engine per test (the shared one keeps a cache between tests)."""
    from tiny_models import byte_tokenizer

    return SpeculativeEngine(TransformersRuntime(target), byte_tokenizer(), eos_token_ids=[])


def _drafter(kind, other):
    if kind == "ngram":
        return NgramDrafter()
    if kind == "model":
        return ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="other")
    return None


def _done(events) -> DoneEvent:
    done = list(events)[-1]
    assert isinstance(done, DoneEvent)
    return done


@pytest.mark.parametrize("kind", ["none", "ngram", "model"])
def test_second_turn_prefills_only_its_new_tokens_and_equals_a_fresh_run(fresh_engine, target, other, kind):
    """Turn 1: the prompt. Turn 2: prompt + reply + a new message. Turn 2 prefills only what
    follows the kept prefix, and its reply equals the naive greedy continuation and a run of
    the same prompt on an engine without the prefix cache."""
    drafter = _drafter(kind, other)
    first = _done(fresh_engine.generate(TINY_PROMPT, drafter, GREEDY))
    assert first.num_prefilled == len(TINY_PROMPT) - 1  # nothing kept yet
    kept = fresh_engine.kept_ids
    assert kept is not None and fresh_engine.released  # nothing held but the kept prefix
    history = TINY_PROMPT + list(first.token_ids)
    assert list(kept) == history[: len(kept)] and len(kept) == len(history) - 1
    prompt2 = history + list(b"\ndef sub(a, b):\n")
    second = _done(fresh_engine.generate(prompt2, drafter, GREEDY))
    assert second.num_prefilled == len(prompt2) - 1 - len(kept)
    assert list(second.token_ids) == naive_greedy(target, prompt2, len(second.token_ids))
    plain = SpeculativeEngine(TransformersRuntime(target), fresh_engine.tokenizer, eos_token_ids=[], prefix_cache=False)
    baseline = _done(plain.generate(prompt2, _drafter(kind, other), GREEDY))
    assert baseline.num_prefilled == len(prompt2) - 1 and plain.kept_ids is None and plain.target.cache is None
    assert second.token_ids == baseline.token_ids
    if kind == "model":
        assert drafter.kept_ids is not None and not drafter.active


def test_a_different_or_trimmed_prompt_reuses_only_what_matches(fresh_engine, target, other):
    drafter = _drafter("model", other)
    _done(fresh_engine.generate(TINY_PROMPT, drafter, GREEDY))
    # a prompt that shares its first 4 bytes ("def ") with the last one
    other_prompt = list(b"def mul(x, y):\n    return x * y\n")
    done = _done(fresh_engine.generate(other_prompt, drafter, GREEDY))
    assert done.num_prefilled == len(other_prompt) - 1 - 4
    assert list(done.token_ids) == naive_greedy(target, other_prompt, len(done.token_ids))
    # the history trimmed from the front: nothing matches at position 0
    trimmed = other_prompt[6:] + list(done.token_ids)
    again = _done(fresh_engine.generate(trimmed, drafter, GREEDY))
    assert again.num_prefilled == len(trimmed) - 1
    assert list(again.token_ids) == naive_greedy(target, trimmed, len(again.token_ids))


def test_a_drafter_switch_and_back(fresh_engine, target, other):
    """Switching drafters: the target's kept cache serves any drafter; a model drafter's own
    kept cache is checked against the new prompt when it comes back."""
    model = _drafter("model", other)
    first = _done(fresh_engine.generate(TINY_PROMPT, model, GREEDY))
    p2 = TINY_PROMPT + list(first.token_ids) + list(b"\n# next\n")
    second = _done(fresh_engine.generate(p2, NgramDrafter(), GREEDY))
    assert second.num_prefilled < len(p2) - 1
    p3 = p2 + list(second.token_ids) + list(b"\n")
    third = _done(fresh_engine.generate(p3, model, GREEDY))
    assert list(third.token_ids) == naive_greedy(target, p3, len(third.token_ids))


def test_a_cancelled_generation_keeps_a_consistent_prefix(fresh_engine, target, other):
    cancel = threading.Event()
    drafter = _drafter("model", other)
    events = fresh_engine.generate(TINY_PROMPT, drafter, GenerationConfig(num_speculative_tokens=4, max_new_tokens=40),
                                   cancel)
    for _event in events:
        cancel.set()  # stops before the next round
    kept = fresh_engine.kept_ids
    assert kept is not None
    assert list(kept) == TINY_PROMPT[: len(kept)] or list(kept)[: len(TINY_PROMPT)] == TINY_PROMPT
    prompt = list(kept) + list(b"\nx = 1\n")
    done = _done(fresh_engine.generate(prompt, drafter, GREEDY))
    assert list(done.token_ids) == naive_greedy(target, prompt, len(done.token_ids))


def test_an_abandoned_generation_keeps_nothing(fresh_engine, other):
    """A consumer that stops reading mid-reply (no DoneEvent): nothing is kept (its caches may
    be mid-round), and the next generation prefills everything."""
    drafter = _drafter("model", other)
    stream = fresh_engine.generate(TINY_PROMPT, drafter, GREEDY)
    next(stream)
    stream.close()
    assert fresh_engine.kept_ids is None and fresh_engine.target.cache is None
    assert drafter.kept_ids is None and drafter.runtime.cache is None
    assert _done(fresh_engine.generate(TINY_PROMPT, drafter, GREEDY)).num_prefilled == len(TINY_PROMPT) - 1

