"""Every llama.cpp forward pass of the process on one long-lived thread.

llama.cpp's CPU backend (xllamacpp's prebuilt library and llama-cpp-python's both) runs a forward
pass as OpenMP parallel regions, with a barrier after each of its few hundred operations. GNU
libgomp gives every thread that starts a parallel region a pool of worker threads of its own,
kept as long as that thread lives, and counts the threads of all pools: while they outnumber the
CPUs, a thread that reaches a barrier early spins only 100 turns and then sleeps in the kernel
(``futex``), where it would otherwise spin ~300,000 turns (about a millisecond) and catch its
partner. On a 2-core machine two pools are enough: one thread that ever decoded (the main thread,
a web server's worker) and the one decoding now. The engine of the app runs each reply in a
thread of its own (:class:`~specchat.ui.session.prefetch.Prefetched`), so its replies could pay it.

Measured here (2-core AMD EPYC, the default target qwen2.5-coder-1.5b on xllamacpp, drafter none,
256 tokens; ``getrusage`` context switches): a reply decoded in a new thread ran at 33.4 and 31.6
tok/s with 11 and 4 voluntary context switches while no other thread had decoded, and at 24.9 and
26.8 tok/s with ~125,000 each once the main thread had decoded one reply (its pool stays with it).

So :func:`on_compute_thread` makes every ``llama_decode`` (and every load) on one daemon thread,
started on first use: one pool for the whole process, whichever thread asks. The caller waits for
the result (holding no GIL while it waits); the hand-over costs two thread wake-ups per call.

PyTorch shares that libgomp (the first ``libgomp.so.1`` loaded serves both), and the engine's own
tensor work (softmax, top-k and sampling over the vocabulary, in the thread that runs the
engine) opens parallel regions of its own: a pool in every thread that sampled. So while the
target runs on llama.cpp, PyTorch runs single-threaded (:func:`torch_beside_llamacpp`; those
operations take well under a millisecond a token). The same reply, measured as above with every
decode on the compute thread: 24.9–25.3 tok/s and ~130,000 voluntary context switches with
PyTorch on 2 threads, 28–31 tok/s and ~1,000 (the hand-overs) with PyTorch on 1.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

THREAD_NAME = "specchat-llama.cpp"


class _ComputeThread:
    """One daemon thread that runs the calls handed to it, one at a time, in the order given."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def call(self, function: Callable[..., T], *args: Any) -> T:
        if threading.current_thread() is self._thread:  # a call from inside a call
            return function(*args)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
                self._thread.start()
        done = threading.Event()
        outcome: list[Any] = [None, None]  # result, exception
        self._jobs.put((function, args, outcome, done))
        try:
            done.wait()
        except BaseException:  # a Ctrl-C while waiting: the call goes on in C; return once it is over
            done.wait()
            raise
        if outcome[1] is not None:
            raise outcome[1]
        return outcome[0]

    def _serve(self) -> None:
        while True:
            function, args, outcome, done = self._jobs.get()
            try:
                outcome[0] = function(*args)
            except BaseException as exc:  # handed to the caller, which raises it
                outcome[1] = exc
            finally:
                done.set()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread


_COMPUTE = _ComputeThread()


def on_compute_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` run on the process's one llama.cpp compute thread; its result, or its
    exception raised here. Calls from several threads run one after another, in the order made.

    Used for every ``llama_decode`` (:class:`specchat.runtimes.llamacpp.LlamaCppRuntime`): see the
    module docstring for why one thread (libgomp's throttled spinning when the OpenMP pools of
    several threads outnumber the CPUs)."""
    return _COMPUTE.call(function, *args)


def compute_thread() -> threading.Thread | None:
    """The compute thread, or None before the first call."""
    return _COMPUTE.thread


_torch_threads: list[int] = []  # PyTorch's thread count before torch_beside_llamacpp, while it holds


def torch_beside_llamacpp() -> None:
    """PyTorch single-threaded, for a target on llama.cpp (the module docstring says why); undone
    by :func:`torch_for_models` (a target on PyTorch needs its threads)."""
    import torch

    if not _torch_threads:
        _torch_threads.append(torch.get_num_threads())
    torch.set_num_threads(1)


def torch_for_models() -> None:
    """PyTorch's thread count back to what it was before :func:`torch_beside_llamacpp` (nothing
    if that was not called)."""
    import torch

    if _torch_threads:
        torch.set_num_threads(_torch_threads.pop())
