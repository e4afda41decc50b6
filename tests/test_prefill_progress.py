"""A long prompt's prefill in forward passes (issue 35): the same KV states as one pass, progress
the consumer can show (PrefillEvent: counts, elapsed and estimated time), and Stop honoured
between passes, the target's and the drafter's, with nothing left behind in either cache."""

from __future__ import annotations

import threading

import pytest
import torch
from lossless import TINY_VOCAB, naive_greedy

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent, PrefillEvent, StopReason, TokenEvent
from specchat.core.prefill import PREFILL_FIRST_CHUNK, prefill_in_chunks
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime

GREEDY = GenerationConfig(num_speculative_tokens=3, max_new_tokens=12, seed=0)
LONG = [(7 * i * i + 3 * i) % 250 + 1 for i in range(600)]  # 600 ids, no repeats of short n-grams to speak of


@pytest.fixture(scope="module")
def long_target():
    from tiny_models import tiny_model

    return tiny_model(vocab_size=TINY_VOCAB, seed=0, max_positions=1024)


@pytest.fixture(scope="module")
def long_other():
    from tiny_models import tiny_model

    return tiny_model(vocab_size=300, seed=1, family="qwen2", max_positions=1024)


def _engine(model):
    return SpeculativeEngine(TransformersRuntime(model), None, eos_token_ids=[], prefix_cache=False)


def _drafter(model):
    return ModelDrafter(TransformersRuntime(model), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="other")


class _CountingRuntime:
    """A runtime stub: records each forward's length and advances a fake clock (10 ms a token)."""

    device = torch.device("cpu")

    def __init__(self, ms_per_token: float = 10.0):
        self.now, self.passes, self.seconds_per_token = 0.0, [], ms_per_token / 1000

    def clock(self):
        return self.now

    def forward(self, ids, *, num_logits):
        assert num_logits == 0
        self.passes.append(len(ids))
        self.now += self.seconds_per_token * len(ids)


def test_passes_are_sized_to_about_a_second_at_the_measured_rate():
    runtime = _CountingRuntime()
    steps = list(prefill_in_chunks(runtime, list(range(1000)), clock=runtime.clock))
    # 32 first; 10 ms a token = 100 tokens/s, so 1.5 s holds 150 tokens, rounded down to 144 (a
    # multiple of the least pass, 16)
    assert PREFILL_FIRST_CHUNK == 32 and runtime.passes == [32] + [144] * 6 + [104]  # the last pass: what is left
    assert [done for done, _ in steps] == [32, 176, 320, 464, 608, 752, 896, 1000]
    assert steps[0][1] == pytest.approx(0.32) and steps[-1][1] == pytest.approx(1.04)
    # 2 ms a token: 500 tokens/s, 750 in 1.5 s, rounded down to 736
    fast = _CountingRuntime(ms_per_token=2.0)
    list(prefill_in_chunks(fast, list(range(3000)), clock=fast.clock))
    assert fast.passes == [32, 736, 736, 736, 736, 24]
    # 100 ms a token (a busy slow CPU: 10 tokens/s): 15 tokens in 1.5 s, so passes of the least, 16
    # (1.6 s); the last takes the 4 a pass of 16 would leave
    slow = _CountingRuntime(ms_per_token=100.0)
    list(prefill_in_chunks(slow, list(range(100)), clock=slow.clock))
    assert slow.passes == [32, 16, 16, 16, 20]
    # a short message is one pass; no pass is shorter than 16 unless the whole prefill is
    for n, passes in [(5, [5]), (38, [38]), (47, [47]), (48, [32, 16]), (60, [32, 28])]:
        short = _CountingRuntime(ms_per_token=100.0)
        list(prefill_in_chunks(short, list(range(n)), clock=short.clock))
        assert short.passes == passes, n


def test_a_prefill_in_passes_leaves_the_same_states_as_one_pass(long_target):
    """The next token's logits after a prefill in passes equal those after one pass (fp32)."""
    one, passes = TransformersRuntime(long_target), TransformersRuntime(long_target)
    with torch.inference_mode():
        one.start([], max_positions=700)
        one.forward(LONG[:-1], num_logits=0)
        passes.start([], max_positions=700)
        counts = [done for done, _ in prefill_in_chunks(passes, LONG[:-1])]
        assert len(counts) >= 2 and counts[-1] == len(LONG) - 1  # more than one pass
        assert passes.cached_ids == one.cached_ids == tuple(LONG[:-1])
        torch.testing.assert_close(passes.forward(LONG[-1:], num_logits=1), one.forward(LONG[-1:], num_logits=1),
                                   rtol=1e-5, atol=1e-5)


def test_the_reply_after_a_long_prefill_is_the_target_only_greedy_reply(long_target, long_other):
    reference = naive_greedy(long_target, LONG, GREEDY.max_new_tokens)
    for drafter in (None, _drafter(long_other)):
        events = list(_engine(long_target).generate(LONG, drafter, GREEDY, prefill_progress=True))
        assert [e.token_id for e in events if isinstance(e, TokenEvent)] == reference


def test_prefill_events_count_each_models_part_in_order(long_target, long_other):
    engine = _engine(long_target)
    events = list(engine.generate(LONG, _drafter(long_other), GREEDY, prefill_progress=True))
    prefill = [e for e in events if isinstance(e, PrefillEvent)]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenEvent))
    assert all(isinstance(e, PrefillEvent) for e in events[: len(prefill)]) and len(prefill) <= first_token
    target = [e for e in prefill if e.model == "target"]
    drafter = [e for e in prefill if e.model == "drafter"]
    assert prefill == target + drafter  # the target's part, then the drafter's
    for part in (target, drafter):
        assert part[0].num_done == 0 and part[-1].num_done == part[0].num_total == 599
        assert [e.num_done for e in part] == sorted({e.num_done for e in part})  # strictly rising
    assert {e.num_prompt_tokens for e in prefill} == {600}
    assert [e.elapsed_ms for e in prefill] == sorted(e.elapsed_ms for e in prefill)
    assert target[0].remaining_ms is None  # no rate measured yet, nothing to estimate from
    assert all(e.remaining_ms is not None and e.remaining_ms >= 0 for e in prefill[1:])
    assert drafter[-1].remaining_ms == 0.0
    assert set(engine.prefill_rates.ms_per_token) == {"target", "other"}
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.num_prefilled == 599


def test_the_estimate_before_any_pass_uses_the_rates_measured_before(long_target, long_other):
    engine = _engine(long_target)
    engine.prefill_rates.ms_per_token.update({"target": 10.0, "other": 4.0})
    first = next(iter(engine.generate(LONG, _drafter(long_other), GREEDY, prefill_progress=True)))
    assert first == PrefillEvent("target", 0, 599, 600, first.elapsed_ms, 599 * 10.0 + 599 * 4.0)
    engine.prefill_rates.ms_per_token = {"target": 10.0}  # a drafter not measured yet counts at the target's rate
    first = next(iter(engine.generate(LONG, _drafter(long_other), GREEDY, prefill_progress=True)))
    assert first.remaining_ms == 599 * 10.0 * 2
    first = next(iter(engine.generate(LONG, NgramDrafter(), GREEDY, prefill_progress=True)))
    assert first.remaining_ms == 599 * 10.0  # a lookup drafter computes nothing


def test_no_prefill_events_unless_asked_for(long_target):
    assert not any(isinstance(e, PrefillEvent) for e in _engine(long_target).generate(LONG, None, GREEDY))


@pytest.mark.parametrize("part", ["target", "drafter"])
def test_stop_during_the_prefill_ends_at_the_next_pass_and_keeps_what_was_read(long_target, long_other, part):
    """Stop before a pass ends the reply with no token; the prompt tokens the target has read stay
    in its cache (a KV state depends only on the tokens before it), so the next reply reads only
    the rest, and it is the exact target-only reply; the drafter keeps nothing."""
    engine = SpeculativeEngine(TransformersRuntime(long_target), None, eos_token_ids=[])  # the prefix cache on
    drafter, cancel = _drafter(long_other), threading.Event()
    events = []
    for event in engine.generate(LONG, drafter, GREEDY, cancel=cancel, prefill_progress=True):
        events.append(event)
        if isinstance(event, PrefillEvent) and event.model == part and event.num_done > 0:
            cancel.set()  # Stop, read by the engine before its next forward pass
    prefill = [e for e in events if isinstance(e, PrefillEvent)]
    assert prefill[-1].model == part and 0 < prefill[-1].num_done < 599  # no pass after the Stop
    assert not any(isinstance(e, TokenEvent) for e in events)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason is StopReason.CANCELLED and done.token_ids == ()
    assert done.num_prefilled == (prefill[-1].num_done if part == "target" else 599)
    assert engine.target.cached_ids == tuple(LONG[: done.num_prefilled])
    assert drafter.runtime.num_cached == 0 and not drafter.active
    # the next generation reads only what is left, and gives the exact target-only reply
    again = list(engine.generate(LONG, drafter, GREEDY))
    assert again[-1].num_prefilled == 599 - done.num_prefilled
    assert [e.token_id for e in again if isinstance(e, TokenEvent)] == naive_greedy(long_target, LONG, GREEDY.max_new_tokens)


def test_the_bubble_says_what_is_left_once_the_target_has_read_the_message():
    from specchat.core.events import PrefillEvent
    from specchat.ui.html.waits import prefill_html

    reading = prefill_html(PrefillEvent("target", 16, 33, 34, 2000.0, 3000.0))
    assert "16 of 33 tokens · 2 s · about 3 s left" in reading
    drafter_next = prefill_html(PrefillEvent("target", 33, 33, 34, 4000.0, 3000.0))  # a model drafter's part is left
    assert "33 of 33 tokens · 4 s · the drafter reads it next: about 3 s" in drafter_next and "left" not in drafter_next
    assert "left" not in prefill_html(PrefillEvent("target", 33, 33, 34, 4000.0, 0.0))  # target only: nothing left
