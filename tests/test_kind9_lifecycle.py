"""Kind 9, resource lifecycle.

Repeated requests through the speculative path, the target-only path and stopped or abandoned
generations leave memory bounded and the engine ready for the next request.
"""

from __future__ import annotations

import gc
import threading
import warnings
from collections import Counter

import pytest
import torch
from lossless import (
    TINY_PROMPT,
    TINY_VOCAB,
    TOK,
    FakeLM,
    RecordingDrafter,
    V,
    assert_matches,
    events_of,
    exact_sequences,
    hashed_logits,
    model_drafter,
    naive_greedy,
    naive_greedy_fn,
)
from tiny_models import tiny_model

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DrafterFailedEvent, RoundEvent, StopReason
from specchat.drafters import ModelDrafter, NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime


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
    engine = SpeculativeEngine(TransformersRuntime(target), None)
    drafter = RecordingDrafter(
        TransformersRuntime(FakeLM(V, hashed_logits(V, seed=9, scale=3.0))), target_vocab_size=V, num_tokenizer_ids=V, name="rec"
    )
    cfg = GenerationConfig(num_speculative_tokens=3, temperature=1.0, seed=5, max_new_tokens=30)
    ref = list(engine.generate([1, 2, 3], drafter, cfg))[-1].token_ids
    ended = drafter.ended
    g = engine.generate([1, 2, 3], drafter, cfg)
    for _ in range(5):
        next(g)
    assert engine.target.cache is not None and drafter.runtime.cache is not None
    g.close()
    assert engine.target.cache is None and drafter.runtime.cache is None and drafter.ended == ended + 1
    g = engine.generate([1, 2, 3], drafter, cfg)
    next(g)
    del g  # dropped, not closed
    gc.collect()
    assert engine.target.cache is None and drafter.runtime.cache is None
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


@pytest.mark.drafter_failure
def test_drafter_exception_mid_generation_falls_back_to_the_target_alone():
    """The drafter raises in round 2: one DrafterFailedEvent, the rest is target-only, and the
    greedy reply is still exactly the target's (naive full-sequence greedy reference)."""
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = ExplodingDrafter(TransformersRuntime(FakeLM(V, fn_t)), target_vocab_size=V, num_tokenizer_ids=V, name="boom")
    events = list(engine.generate([1, 2], drafter, GenerationConfig(num_speculative_tokens=2, max_new_tokens=30)))
    failures = [e for e in events if isinstance(e, DrafterFailedEvent)]
    assert len(failures) == 1 and failures[0].drafter_name == "boom" and failures[0].round_index == 2
    assert failures[0].error == "RuntimeError: drafter exploded" and "target alone" in failures[0].text
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert [r.num_drafted > 0 for r in rounds[:2]] == [True, True]
    assert all(r.num_drafted == 0 and r.num_speculative_tokens == 0 for r in rounds[2:])
    assert drafter.calls == 3  # never asked again after it failed
    assert events.index(failures[0]) < events.index(rounds[2])  # announced before that round's tokens
    assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, [1, 2], 30)
    assert engine.released and drafter.runtime.cache is None and drafter.ended >= 1
    # the next generation uses the drafter again (a transient failure, e.g. memory, may pass)
    done = events_of(engine, [1, 2], drafter, num_speculative_tokens=2, max_new_tokens=30)[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, [1, 2], 30)


class _FailingIn(ModelDrafter):
    """Raises ``exc`` from one method (begin, propose or rollback) on its ``at``-th call."""

    def __init__(self, *a, method: str, exc: BaseException, at: int = 1, **k):
        super().__init__(*a, **k)
        self.method, self.exc, self.at, self.counts = method, exc, at, {}

    def _maybe_fail(self, method):
        self.counts[method] = self.counts.get(method, 0) + 1
        if method == self.method and self.counts[method] == self.at:
            raise self.exc

    def begin_in_steps(self, prompt_ids):  # what the engine calls for a model drafter's begin
        self._maybe_fail("begin")
        yield from super().begin_in_steps(prompt_ids)

    def propose(self, ids, max_tokens, config, generator):
        self._maybe_fail("propose")
        return super().propose(ids, max_tokens, config, generator)

    def rollback(self, num_valid):
        self._maybe_fail("rollback")
        super().rollback(num_valid)


@pytest.mark.drafter_failure
@pytest.mark.parametrize(
    "method, at, exc",
    [
        ("begin", 1, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")),
        ("propose", 4, torch.OutOfMemoryError("out of memory")),
        ("rollback", 2, RuntimeError("cache broke")),
        ("propose", 1, ValueError("bad weights")),
    ],
)
def test_drafter_failing_anywhere_falls_back_and_keeps_the_exact_greedy_reply(method, at, exc):
    fn_t = hashed_logits(V, seed=21, scale=3.0)
    fn_d = hashed_logits(V, seed=22, scale=3.0)  # a different model: rejections happen too
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    drafter = _FailingIn(TransformersRuntime(FakeLM(V, fn_d)), method=method, at=at, exc=exc, target_vocab_size=V,
                    num_tokenizer_ids=V, name="d")
    events = list(engine.generate([3, 1, 4], drafter, GenerationConfig(num_speculative_tokens=3, max_new_tokens=25)))
    failures = [e for e in events if isinstance(e, DrafterFailedEvent)]
    assert len(failures) == 1 and failures[0].error == f"{type(exc).__name__}: {exc}"
    if method == "begin":
        assert events[0] is failures[0] and failures[0].round_index == 0
        assert all(e.num_drafted == 0 for e in events if isinstance(e, RoundEvent))
    assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, [3, 1, 4], 25)
    assert events[-1].stop_reason is StopReason.MAX_NEW_TOKENS
    assert engine.released and drafter.runtime.cache is None


@pytest.mark.drafter_failure
def test_fallback_keeps_the_exact_sampled_distribution():
    """T = 1, the drafter fails in its second propose: every reply's frequency matches the
    target's exact sequence probabilities (chi-square), as if it had never been there."""
    fn_t = hashed_logits(4, seed=31, scale=1.5)
    fn_d = hashed_logits(4, seed=32, scale=1.5)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(4, fn_t)), None)
    exact = exact_sequences(fn_t, [0, 1], 4, temperature=1.0)
    counts: Counter = Counter()
    n = 3000
    for seed in range(n):
        drafter = _FailingIn(TransformersRuntime(FakeLM(4, fn_d)), method="propose", at=2, exc=torch.OutOfMemoryError("oom"),
                             target_vocab_size=4, num_tokenizer_ids=4, name="d")
        cfg = GenerationConfig(num_speculative_tokens=2, temperature=1.0, seed=seed, max_new_tokens=4)
        events = list(engine.generate([0, 1], drafter, cfg))
        assert sum(isinstance(e, DrafterFailedEvent) for e in events) <= 1
        counts[tuple(events[-1].token_ids)] += 1
    assert_matches(counts, exact, n)


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
    engine = SpeculativeEngine(TransformersRuntime(tgt), TOK)
    drafter = ModelDrafter(TransformersRuntime(drf), target_vocab_size=257, num_tokenizer_ids=257, name="d")
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
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=1, scale=1.0))), None)
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
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
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
        try:  # a fake tensor (left by torch.compile's tracing) has no data and no data pointer
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):
            continue
    del tensors
    return count, sum(storages.values())


def test_memory_stays_bounded_over_repeated_mixed_requests(target, other):
    """Speculative, target-only, cancelled, closed mid-stream and abandoned generations, 12
    cycles after 2 warm-up cycles: no tensor is left behind (count and bytes stay flat), the
    caches are released, and the engine still gives the reference reply."""
    engine = SpeculativeEngine(TransformersRuntime(target), TOK, eos_token_ids=[])
    drafter = ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="other")
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
    assert engine.target.cache is None and drafter.runtime.cache is None
    assert after[0] <= before[0] + 2 and after[1] <= before[1] + 4096, (before, after)


def test_decode_time_leaves_out_the_time_the_consumer_holds_the_stream(monkeypatch):
    """A fake clock that only the consumer advances (100 s per event it receives, as a slow page
    would): every RoundEvent.elapsed_ms and the DoneEvent.decode_ms must stay 0, since no time
    passed inside the engine. Before, the app's speed included its own rendering time and even
    target-only showed as slower than the baseline (0.65x, found by a fresh-user session)."""
    clock = [1000.0]
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    monkeypatch.setattr(engine, "now", lambda: clock[0])
    for drafter in (None, NgramDrafter()):
        events = []
        for event in engine.generate([1, 2, 1, 2, 1], drafter, GenerationConfig(max_new_tokens=12)):
            events.append(event)
            clock[0] += 100.0  # the consumer's time
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert len(rounds) >= 2 and all(r.elapsed_ms == 0.0 and r.round_ms == 0.0 for r in rounds)
        assert events[-1].decode_ms == 0.0
        assert list(events[-1].token_ids) == naive_greedy_fn(fn_t, [1, 2, 1, 2, 1], 12)
