"""Faults on the real small model (SmolLM2-135M): Stop at any moment, drafters that fail.

Stop is cooperative: the cancel event is checked between rounds, so a Stop that arrives in
the middle of the prefill, of a draft or of a verify pass ends the generation at the next
round boundary. Each test sets the cancel event from *inside* a forward pass (a forward hook
on the model) and checks, from first principles, that what was committed is a prefix of the
target's own greedy reply (a naive full-sequence loop, tests/lossless.py), that the engine
released its state, and that the next generation is exactly the target's reply again.

A drafter that cannot be loaded, or that raises while drafting (out of memory), must not end
the chat: the turn is answered by the target alone, with a warning, and the reply is still
exactly the target's.
"""

from __future__ import annotations

import threading

import pytest
import torch
from lossless import naive_greedy

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, DrafterFailedEvent, RoundEvent, StopReason, TokenEvent
from specchat.service import ChatService, Notice

pytestmark = pytest.mark.real_model

MESSAGE = "Write a Python function that adds two numbers."
N = 24


@pytest.fixture(scope="module")
def service(smollm2_dir):
    """SmolLM2 in float32; the sibling drafter is SmolLM2 itself (a second copy, own cache)."""
    svc = ChatService(target=str(smollm2_dir), dtype="float32", drafter_model=str(smollm2_dir))
    svc.load()
    return svc


@pytest.fixture(autouse=True)
def whole_prefill(request):
    """These tests count forward passes from the prefill on: each starts with no kept
    conversation cache (the prefix cache would skip the prefill of a prompt seen before)."""
    if "service" in request.fixturenames:
        request.getfixturevalue("service").forget_prefix()


@pytest.fixture(scope="module")
def prompt(service):
    ids, notice = service.encode_chat([], MESSAGE, N)
    assert notice is None
    return ids


@pytest.fixture(scope="module")
def reference(service, prompt):
    """The target's greedy reply, from a naive loop over full sequences (no cache, no engine)."""
    return naive_greedy(service.engine.target.model, prompt, N, eos=service.engine.eos_token_ids)


def _cancel_on_forward(model: torch.nn.Module, cancel: threading.Event, *, at_call: int, calls: list):
    """Set ``cancel`` inside the ``at_call``-th forward pass of ``model`` (1-based)."""

    def hook(module, args, kwargs, output):
        calls.append(kwargs["input_ids"].shape[1] if "input_ids" in kwargs else args[0].shape[1])
        if len(calls) == at_call:
            cancel.set()

    return model.register_forward_hook(hook, with_kwargs=True)


def _check_consistent_and_next_works(service, prompt, reference, drafter: str):
    assert service.engine.released  # released
    drafter_obj = service.prepare_drafter(drafter)
    assert getattr(drafter_obj, "cache", None) is None
    done = list(service.generate(prompt, drafter=drafter, config=GenerationConfig(max_new_tokens=N)))[-1]
    assert list(done.token_ids) == reference


@pytest.mark.parametrize("drafter", ["none", "sibling"])
def test_stop_during_the_prefill(service, prompt, reference, drafter):
    """Stop pressed while the target reads the prompt: nothing is committed, the reply is empty
    and marked cancelled, and the next generation is the target's reply."""
    cancel, calls = threading.Event(), []
    handle = _cancel_on_forward(service.engine.target.model, cancel, at_call=1, calls=calls)
    try:
        events = list(service.generate(prompt, drafter=drafter, config=GenerationConfig(max_new_tokens=N), cancel=cancel))
    finally:
        handle.remove()
    assert calls[0] == len(prompt) - 1  # the hook fired in the prefill pass (all prompt tokens but the last)
    assert len(calls) == 1  # no verify pass ran after it
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason is StopReason.CANCELLED
    assert done.token_ids == () and done.text == "" and len(events) == 1
    _check_consistent_and_next_works(service, prompt, reference, drafter)


@pytest.mark.parametrize("at_call", [2, 5])
def test_stop_in_the_middle_of_a_draft(service, prompt, reference, at_call):
    """Stop pressed while the drafter is drafting (its at_call-th forward pass, inside a
    round): that round still verifies and commits, then generation ends."""
    drafter = service.prepare_drafter("sibling")
    cancel, calls = threading.Event(), []
    handle = _cancel_on_forward(drafter.runtime.model, cancel, at_call=at_call, calls=calls)
    try:
        config = GenerationConfig(max_new_tokens=N, num_speculative_tokens=4)
        events = list(service.generate(prompt, drafter="sibling", config=config, cancel=cancel))
    finally:
        handle.remove()
    done = events[-1]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert done.stop_reason is StopReason.CANCELLED
    assert len(rounds) >= 1 and sum(r.num_committed for r in rounds) == len(tokens) == len(done.token_ids)
    assert 0 < len(done.token_ids) < N
    assert list(done.token_ids) == reference[: len(done.token_ids)]  # a prefix of the target's reply
    assert "".join(e.text for e in tokens) + done.final_text == done.text
    _check_consistent_and_next_works(service, prompt, reference, "sibling")


def test_stop_during_a_verify_pass(service, prompt, reference):
    """Stop pressed during the target's 3rd forward (the 2nd verify): that round commits, then stop."""
    cancel, calls = threading.Event(), []
    handle = _cancel_on_forward(service.engine.target.model, cancel, at_call=3, calls=calls)
    try:
        events = list(service.generate(prompt, drafter="ngram", config=GenerationConfig(max_new_tokens=N), cancel=cancel))
    finally:
        handle.remove()
    done = events[-1]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert done.stop_reason is StopReason.CANCELLED and len(rounds) == 2 and len(calls) == 3
    assert list(done.token_ids) == reference[: len(done.token_ids)]
    _check_consistent_and_next_works(service, prompt, reference, "ngram")


def test_a_drafter_that_cannot_load_answers_with_the_target_alone(smollm2_dir, tmp_path, reference):
    svc = ChatService(target=str(smollm2_dir), dtype="float32", drafter_model=str(tmp_path / "missing"))
    svc.start("sibling").join()  # the start-up drafter fails: the app still starts
    assert svc.startup_error is None
    assert "not an entry of" in str(svc.drafter_errors["sibling"])
    events = list(svc.stream_chat([], MESSAGE, drafter="sibling", config=GenerationConfig(max_new_tokens=N)))
    assert isinstance(events[0], Notice) and events[0].warning
    assert "'sibling' could not be loaded" in events[0].text and "target alone" in events[0].text
    assert all(e.num_drafted == 0 for e in events if isinstance(e, RoundEvent))
    assert list(events[-1].token_ids) == reference
    # an explicit prepare retries (and fails again, with the same clear error)
    with pytest.raises(Exception, match="not an entry of"):
        svc.prepare_drafter("sibling")
    # a drafter this target does not have is still a plain error, not a silent fallback
    with pytest.raises(ValueError, match="not available"):
        list(svc.stream_chat([], MESSAGE, drafter="medusa", config=GenerationConfig(max_new_tokens=N)))


@pytest.mark.drafter_failure
def test_a_drafter_out_of_memory_mid_reply_keeps_the_target_reply(service, reference, monkeypatch):
    drafter = service.prepare_drafter("sibling")
    real_forward = drafter.runtime.model.forward
    calls = {"n": 0}

    def forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:  # mid-draft, in a later round
            raise torch.OutOfMemoryError("simulated: CUDA out of memory. Tried to allocate 20.00 MiB")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(drafter.runtime.model, "forward", forward)
    config = GenerationConfig(max_new_tokens=N, num_speculative_tokens=3)
    events = list(service.stream_chat([], MESSAGE, drafter="sibling", config=config))
    failed = [e for e in events if isinstance(e, DrafterFailedEvent)]
    assert len(failed) == 1 and failed[0].error.startswith("OutOfMemoryError: simulated")
    assert calls["n"] == 6  # not called again after the failure
    assert list(events[-1].token_ids) == reference
    assert service.engine.released and drafter.runtime.cache is None
    monkeypatch.undo()
    # the next turn drafts again
    events = list(service.stream_chat([], MESSAGE, drafter="sibling", config=config))
    assert not any(isinstance(e, DrafterFailedEvent) for e in events)
    assert any(e.num_drafted for e in events if isinstance(e, RoundEvent))
    assert list(events[-1].token_ids) == reference
