"""Kind 9, resource lifecycle.

Repeated requests through the speculative path, the target-only path and stopped or abandoned
generations leave memory bounded and the engine ready for the next request.
"""

from __future__ import annotations

import gc
import threading
import warnings

import pytest
import torch
from lossless import (
    TINY_PROMPT,
    TINY_VOCAB,
    TOK,
    FakeLM,
    RecordingDrafter,
    V,
    events_of,
    hashed_logits,
    model_drafter,
    naive_greedy,
    naive_greedy_fn,
)
from tiny_models import tiny_model

from specchat.config import GenerationConfig
from specchat.drafters import ModelDrafter, NgramDrafter
from specchat.engine import SpeculativeEngine
from specchat.events import RoundEvent, StopReason


def test_cancel_stops_between_rounds_and_engine_is_reusable(engine, reference):
    cancel = threading.Event()
    events = []
    for e in engine.generate(TINY_PROMPT, NgramDrafter(), GenerationConfig(max_new_tokens=40), cancel):
        events.append(e)
        if isinstance(e, RoundEvent) and e.round_index == 2:
            cancel.set()
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED
    assert list(done.token_ids) == reference[: len(done.token_ids)]
    assert events_of(engine, TINY_PROMPT, None, max_new_tokens=40)[-1].token_ids == tuple(reference)


def test_close_mid_stream_and_drop_release_caches_and_engine_stays_usable():
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    target = FakeLM(V, fn_t)
    engine = SpeculativeEngine(target, None)
    drafter = RecordingDrafter(
        FakeLM(V, hashed_logits(V, seed=9, scale=3.0)), target_vocab_size=V, num_tokenizer_ids=V, name="rec"
    )
    cfg = GenerationConfig(num_speculative_tokens=3, temperature=1.0, seed=5, max_new_tokens=30)
    ref = list(engine.generate([1, 2, 3], drafter, cfg))[-1].token_ids
    ended = drafter.ended
    g = engine.generate([1, 2, 3], drafter, cfg)
    for _ in range(5):
        next(g)
    assert engine.target_cache is not None and drafter.cache is not None
    g.close()
    assert engine.target_cache is None and drafter.cache is None and drafter.ended == ended + 1
    g = engine.generate([1, 2, 3], drafter, cfg)
    next(g)
    del g  # dropped, not closed
    gc.collect()
    assert engine.target_cache is None and drafter.cache is None
    assert list(engine.generate([1, 2, 3], drafter, cfg))[-1].token_ids == ref


class ExplodingDrafter(ModelDrafter):
    def __init__(self, *a, explode_at=3, **k):
        super().__init__(*a, **k)
        self.explode_at, self.calls, self.ended = explode_at, 0, 0

    def propose(self, ids, max_tokens, config, generator):
        self.calls += 1
        if self.calls == self.explode_at:
            raise RuntimeError("drafter exploded")
        return super().propose(ids, max_tokens, config, generator)

    def end(self):
        self.ended += 1
        super().end()


def test_drafter_exception_mid_generation_leaves_engine_usable():
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = ExplodingDrafter(FakeLM(V, fn_t), target_vocab_size=V, num_tokenizer_ids=V, name="boom")
    with pytest.raises(RuntimeError, match="exploded"):
        list(engine.generate([1, 2], drafter, GenerationConfig(num_speculative_tokens=2, max_new_tokens=30)))
    assert engine.target_cache is None and drafter.cache is None and drafter.ended == 1
    done = events_of(engine, [1, 2], drafter, num_speculative_tokens=2, max_new_tokens=30)[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, [1, 2], 30)


def test_generator_stepped_from_several_threads_runs_without_autograd():
    """Gradio (and any thread-pool consumer) calls next() on a sync generator from worker threads.

    torch.inference_mode() is thread-local: entered inside the generator on the first step's
    thread, it does not apply when a later step runs on another thread. Every target/drafter
    forward must still run without building an autograd graph.
    """
    tgt = tiny_model(vocab_size=257, seed=0)
    drf = tiny_model(vocab_size=257, seed=3)
    grads: list[bool] = []
    for m in (tgt, drf):
        m.register_forward_hook(lambda mod, args, kwargs, out: grads.append(out.logits.requires_grad), with_kwargs=True)
    engine = SpeculativeEngine(tgt, TOK)
    drafter = ModelDrafter(drf, target_vocab_size=257, num_tokenizer_ids=257, name="d")
    g = engine.generate(list(b"hello world"), drafter, GenerationConfig(num_speculative_tokens=2, max_new_tokens=8))
    box: list = []

    def step():
        try:
            box.append(next(g))
        except StopIteration:
            box.append(None)

    while not box or box[-1] is not None:
        th = threading.Thread(target=step)
        th.start()
        th.join()
    assert len(grads) > 4
    assert not any(grads), f"{sum(grads)} of {len(grads)} forwards built an autograd graph"


def test_consumer_does_not_run_in_inference_mode_between_events():
    engine = SpeculativeEngine(FakeLM(V, hashed_logits(V, seed=1, scale=1.0)), None)
    assert not torch.is_inference_mode_enabled()
    seen = []
    for _ in engine.generate([1, 2], None, GenerationConfig(max_new_tokens=3)):
        seen.append(torch.is_inference_mode_enabled())
    assert not any(seen), "the engine's inference_mode leaks into the caller while it is suspended"


def test_late_cleanup_of_an_abandoned_generator_does_not_break_the_next_one():
    """An abandoned generator is finalised whenever the GC gets to it (e.g. inside a cycle).

    Its cleanup must not clear the state of a newer generation already running on the engine.
    """
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=9, scale=3.0)), V)
    cfg = GenerationConfig(num_speculative_tokens=2, max_new_tokens=20)
    ref = naive_greedy_fn(fn_t, [1, 2], 20)
    old = engine.generate([5, 5, 5], drafter, cfg)
    next(old)  # abandoned mid-stream, finalised later
    new = engine.generate([1, 2], drafter, cfg)
    events = [next(new) for _ in range(3)]
    old.close()  # what the GC does to the abandoned generator
    events += list(new)
    assert list(events[-1].token_ids) == ref


def live_tensor_bytes() -> tuple[int, int]:
    """(number of live torch tensors, bytes of their distinct storages), after a full GC."""
    gc.collect()
    storages = {}
    count = 0
    with warnings.catch_warnings():  # isinstance() on torch.distributed's deprecated aliases warns
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and not isinstance(o, torch.nn.Parameter)]
    for obj in tensors:
        count += 1
        try:
            storage = obj.untyped_storage()
        except (RuntimeError, NotImplementedError):
            continue
        storages[storage.data_ptr()] = storage.nbytes()
    del tensors
    return count, sum(storages.values())


def test_memory_stays_bounded_over_repeated_mixed_requests(target, other):
    """Speculative, target-only, cancelled, closed mid-stream and abandoned generations, 12
    cycles after 2 warm-up cycles: no tensor is left behind (count and bytes stay flat), the
    caches are released, and the engine still gives the reference reply."""
    engine = SpeculativeEngine(target, TOK, eos_token_ids=[])
    drafter = ModelDrafter(other, target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="other")
    reference = naive_greedy(target, TINY_PROMPT, 12)
    cfg = GenerationConfig(num_speculative_tokens=3, max_new_tokens=12)

    def cycle(i):
        assert list(engine.generate(TINY_PROMPT, drafter, cfg))[-1].token_ids == tuple(reference)
        assert list(engine.generate(TINY_PROMPT, None, cfg))[-1].token_ids == tuple(reference)
        cancel = threading.Event()
        for e in engine.generate(
            TINY_PROMPT, drafter, GenerationConfig(temperature=1.0, seed=i, max_new_tokens=12), cancel
        ):
            if isinstance(e, RoundEvent):
                cancel.set()
        closed = engine.generate(TINY_PROMPT, drafter, cfg)
        next(closed)
        closed.close()
        abandoned = engine.generate(TINY_PROMPT, drafter, cfg)
        next(abandoned)
        del abandoned

    for i in range(2):
        cycle(i)
    before = live_tensor_bytes()
    for i in range(12):
        cycle(i)
    after = live_tensor_bytes()
    assert engine.target_cache is None and drafter.cache is None
    assert after[0] <= before[0] + 2 and after[1] <= before[1] + 4096, (before, after)
