"""ZeroGPU (Hugging Face Spaces): a reply generated in a forked worker, plain data only across
the boundary, and Stop that reaches the worker.

The subprocess test runs the real app module with ``SPACES_ZERO_GPU=1`` and a stand-in
``spaces`` module whose ``GPU`` runs the decorated generator in a forked process, as ZeroGPU
does, and sends what it yields back through a pipe. It is strict where ZeroGPU is lenient:
arguments and items are unpickled with an unpickler that refuses every class (so anything but
plain data fails the test), and when the reader stops early the worker runs on until it ends
by itself (the stand-in drains it), so only a Stop that reaches the worker can end it early.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from specchat.analysis.trace import CommittedToken, DraftedToken, PositionTrace, ProofTrace, RoundTrace
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, DrafterFailedEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.service import Notice
from specchat.ui.page.zerogpu import CancelSlot, from_plain, to_plain

ROOT = Path(__file__).resolve().parents[1]


class PlainOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"not plain data: {module}.{name}")


def across(obj):
    """What the other side of a pickle boundary gets, if ``obj`` is plain data."""
    return PlainOnly(io.BytesIO(pickle.dumps(obj))).load()


def test_every_event_crosses_as_plain_data_and_comes_back_equal():
    top = ((5, 0.5), (7, 0.25))
    trace = RoundTrace(
        drafted=(DraftedToken(5, 0.5, 0.4, 0.3, True), DraftedToken(9, 0.1, 0.6, 0.9, False)),
        next_token_id=7, next_kind="resampled",
        committed=(CommittedToken(5, "accepted", "a", 0.5, 0.4), CommittedToken(7, "resampled", "b", 0.25, None)),
        positions=(PositionTrace(top, top, top, top, None, None),
                   PositionTrace(top, top, top, top, top, ProofTrace(0.7, ((7, 0.25, 0.1, 0.5),), (0.1, 0.05, 0.2)))),
        draft_step_ms=(1.5, 2.0), token_texts={5: "a", 7: "b", 9: "c"}, num_prompt_tokens=12,
    )
    items = [
        Notice("history trimmed", warning=True, fallback_drafter="int4"),
        TokenEvent(5, TokenKind.ACCEPTED, "a", 0.5, 0.4, None, None, None, 0, 0, 2),
        TokenEvent(7, TokenKind.RESAMPLED, "b", 0.25, None, 9, 0.1, 0.6, 0, 1, 2),
        RoundEvent(0, 2, 2, 1, 2, (True, False), 3.5, 2, 10.0, 14.0, 14.0, timing=False, timing_next=True, trace=trace),
        DrafterFailedEvent("int4", "OutOfMemoryError: CUDA out of memory", 1),
        DoneEvent(StopReason.CANCELLED, (5, 7), (TokenKind.ACCEPTED, TokenKind.RESAMPLED), "ab", 12.0, 14.0, 12,
                  final_text="", prompt_ids=(1, 2, 3), num_prefilled=11),
        GenerationConfig(num_speculative_tokens=6, temperature=0.7, top_p=0.9, seed=3, max_new_tokens=64,
                         stop_strings=("\n\n",), adaptive_gamma=True, measure_speedup=True, trace=True),
    ]
    for item in items:
        back = from_plain(across(to_plain(item)))
        assert back == item and type(back) is type(item)
    assert from_plain(across(to_plain(items[3]))).trace == trace  # compare=False on the field: check it too
    assert isinstance(from_plain(to_plain(items[1])).kind, TokenKind)


def test_what_must_not_cross_is_refused():
    with pytest.raises(TypeError, match="Tensor cannot cross"):
        to_plain({"ids": torch.tensor([1, 2])})
    with pytest.raises(ValueError, match="unknown type 'Evil'"):
        from_plain({"__type__": "Evil"})


def test_cancel_slot_flags_only_its_generation():
    slot = CancelSlot()
    first, second = slot.new_id(), slot.new_id()
    assert not slot.flag(first).is_set() and not slot.flag(second).is_set()
    slot.cancel(second)
    assert slot.flag(second).is_set() and not slot.flag(first).is_set()


# ---- the app on a stand-in ZeroGPU -----------------------------------------------------------
STAND_IN = '''
"""Stand-in for Hugging Face's `spaces` package: GPU runs the function in a forked process."""
import io, multiprocessing, os, pickle

calls = []


class _PlainOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"not plain data: {module}.{name}")


def _plain(data):
    return _PlainOnly(io.BytesIO(data)).load()


def GPU(fn=None, duration=None):
    def wrap(function):
        def run(*args, **kwargs):
            args, kwargs = _plain(pickle.dumps((args, kwargs)))  # only plain data goes in
            ctx = multiprocessing.get_context("fork")
            receive, send = ctx.Pipe(duplex=False)

            def worker():
                import faulthandler
                faulthandler.dump_traceback_later(240, exit=True)  # a hung worker fails the test with its stack
                sent = 0
                try:
                    for item in function(*args, **kwargs):
                        send.send_bytes(pickle.dumps(("item", item)))
                        sent += 1
                    send.send_bytes(pickle.dumps(("end", sent)))
                except BaseException as exc:
                    send.send_bytes(pickle.dumps(("error", repr(exc))))
                finally:
                    send.close()
                    os._exit(0)

            process = ctx.Process(target=worker)
            process.start()
            send.close()
            call = {"pid": process.pid, "received": 0, "sent": None}
            calls.append(call)
            try:
                while True:
                    kind, value = _plain(receive.recv_bytes())  # only plain data comes out
                    if kind == "end":
                        call["sent"] = value
                        return
                    if kind == "error":
                        raise RuntimeError(value)
                    call["received"] += 1
                    yield value
            finally:
                while call["sent"] is None:  # the reader stopped early: the worker runs on until it ends
                    try:
                        kind, value = pickle.loads(receive.recv_bytes())
                    except EOFError:
                        break
                    if kind != "item":
                        call["sent"] = value if kind == "end" else -1
                process.join()
        return run
    return wrap if fn is None else wrap(fn)
'''

SCRIPT = '''
import json, sys, threading
import spaces
from specchat.ui.page import app
from specchat.ui.page import host
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent

assert host.ON_ZEROGPU and host._ZEROGPU_SLOT is not None
service = app.get_service(target="smollm2-135m-instruct", dtype="float32", device="cpu")
service.load()
stream = host.stream_fn(service)
out = {}

def done_of(items):
    assert isinstance(items[-1], DoneEvent), items[-1]
    return items[-1]

# 1. a whole reply in the worker, ngram drafter, equals target-only in this process (greedy)
message = "Write a Python function that returns the n-th Fibonacci number."
config = GenerationConfig(num_speculative_tokens=4, max_new_tokens=48, measure_speedup=True)
reference = done_of(list(service.stream_chat([], message, drafter="none", config=config)))
items = list(stream([], message, "ngram", config, threading.Event()))
out["identical"] = list(done_of(items).token_ids) == list(reference.token_ids)
out["kinds"] = sorted({type(i).__name__ for i in items})
out["worker_pid_differs"] = spaces.calls[-1]["pid"] != __import__("os").getpid()

# how long the long reply is when nobody stops it (target-only, here)
long_message = "List the numbers from 1 to 300, one per line, with no other text."
long_config = GenerationConfig(num_speculative_tokens=4, max_new_tokens=300)
out["uncancelled_tokens"] = len(done_of(list(service.stream_chat([], long_message, drafter="none", config=long_config))).token_ids)

# 2. Stop after three tokens: the worker stops at that round's end
cancel = threading.Event()
seen, items = 0, []
for item in stream([], long_message, "ngram", long_config, cancel):
    items.append(item)
    if isinstance(item, TokenEvent):
        seen += 1
        if seen == 3:
            cancel.set()
done = done_of(items)
out["stop_reason"] = done.stop_reason.value
out["stopped_tokens"] = len(done.token_ids)
out["stopped_sent"] = spaces.calls[-1]["sent"]

# 3. the reader goes away after two tokens (a closed tab): the worker is told to stop too
gen = stream([], long_message, "ngram", long_config, threading.Event())
seen = 0
for item in gen:
    if isinstance(item, TokenEvent):
        seen += 1
        if seen == 2:
            break
gen.close()
out["closed_sent"] = spaces.calls[-1]["sent"]
print("RESULT " + json.dumps(out))
print(out, file=sys.stderr)
'''


@pytest.mark.subprocess
@pytest.mark.real_model
def test_app_on_a_stand_in_zerogpu_is_exact_plain_and_stoppable(tmp_path):
    (tmp_path / "spaces.py").write_text(STAND_IN, encoding="utf-8")
    env = {**os.environ, "SPACES_ZERO_GPU": "1", "SYSTEM": "spaces", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["identical"] and out["worker_pid_differs"]
    assert {"TokenEvent", "RoundEvent", "DoneEvent"} <= set(out["kinds"])
    assert out["uncancelled_tokens"] >= 100, out  # the precondition: unstopped, the reply is long
    assert out["stop_reason"] == "cancelled"
    # The worker does not wait for the reader, so it may be a round or two ahead when the Stop
    # reaches it (more on a loaded machine); unstopped, it would run to 100+ tokens (and as many
    # items again for the rounds' ends).
    assert 3 <= out["stopped_tokens"] <= 40, out
    assert out["stopped_sent"] <= 80, out  # items the worker produced (tokens and round ends)
    assert out["closed_sent"] is not None and 0 < out["closed_sent"] <= 80, out
