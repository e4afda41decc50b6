"""--runtime auto|transformers|llamacpp: which runtime a model gets, and the messages when it
cannot have the one asked for (these run with or without llama-cpp-python: its presence is
patched)."""

from __future__ import annotations

import pytest
import torch

from specchat.drafters import kinds as drafter_kinds
from specchat.errors import RegistryError
from specchat.runtimes import llamacpp, select
from specchat.runtimes.registry import ModelEntry, load_registry

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
GGUF = dict(packages="x-part{i}==1.0", files="x/part{i}.bin", parts=2, bytes=10, sha256="a" * 64)


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(llamacpp, "unavailable_reason", lambda: None)
    monkeypatch.setattr(llamacpp, "gpu_offload", lambda: False)


@pytest.fixture
def missing(monkeypatch):
    monkeypatch.setattr(llamacpp, "unavailable_reason", lambda: "llama-cpp-python is not installed (test)")


def test_auto_picks_llamacpp_for_a_gguf_model_on_the_cpu(installed):
    entry = ModelEntry(name="m", gguf=GGUF)
    assert select.choose_runtime(entry, "auto", CPU).name == "llamacpp"
    assert select.choose_runtime(entry, "transformers", CPU).name == "transformers"
    # a CPU-only llama.cpp build does not run a model meant for the GPU
    choice = select.choose_runtime(entry, "auto", CUDA)
    assert choice.name == "transformers" and "CPU-only" in choice.reason


def test_auto_falls_back_to_transformers_and_says_why(missing):
    choice = select.choose_runtime(ModelEntry(name="m", gguf=GGUF), "auto", CPU)
    assert choice.name == "transformers" and "not installed (test)" in choice.reason
    assert choice.unavailable == "llama-cpp-python is not installed (test)"  # the page's status line says it
    assert select.choose_runtime(ModelEntry(name="m", gguf=GGUF), "transformers", CPU).unavailable == choice.unavailable
    with pytest.raises(ValueError, match="--runtime llamacpp: llama-cpp-python is not installed"):
        select.choose_runtime(ModelEntry(name="m", gguf=GGUF), "llamacpp", CPU)


def test_a_model_without_a_gguf_runs_on_transformers(installed):
    entry = ModelEntry(name="m", hub_id="org/m")
    assert select.choose_runtime(entry, "auto", CPU).name == "transformers"
    with pytest.raises(ValueError, match="has no GGUF file"):
        select.choose_runtime(entry, "llamacpp", CPU)
    with pytest.raises(ValueError, match="unknown runtime 'vllm'"):
        select.choose_runtime(entry, "vllm", CPU)


def test_models_yaml_can_pin_the_runtime(installed):
    assert select.choose_runtime(ModelEntry(name="m", gguf=GGUF, runtime="transformers"), "auto", CPU).name == "transformers"
    with pytest.raises(ValueError, match="runtime: llamacpp needs a GGUF"):
        ModelEntry(name="m", hub_id="org/m", runtime="llamacpp")


def test_a_gguf_path_is_a_target_of_its_own(tmp_path, installed):
    path = tmp_path / "My Model.Q4_K_M.gguf"
    path.write_bytes(b"GGUF")
    entry = load_registry().resolve(str(path))
    assert entry.gguf_file == path.resolve() and entry.runtime == "llamacpp" and entry.name == "My-Model.Q4_K_M"
    assert select.choose_runtime(entry, "auto", CPU).name == "llamacpp"
    with pytest.raises(ValueError, match="is a GGUF file: it runs on llama.cpp"):
        select.choose_runtime(entry, "transformers", CPU)
    with pytest.raises(RegistryError, match="no such GGUF file"):
        load_registry().resolve(str(tmp_path / "missing.gguf"))


def test_the_drafter_kinds_and_their_default_order_per_runtime():
    assert drafter_kinds.kinds_for(has_sibling=False) == ["none", "ngram", "int4", "hybrid"]
    why = select.unavailable_drafters("smol", ["none", "ngram", "int4", "hybrid"])
    assert set(why) == {"sibling", "sibling-int4"} and "no sibling" in why["sibling"]
    # on llama.cpp the int4 kinds (a lower-bit GGUF copy, made on first use) come after ngram and none:
    # never the drafter at start, and the hybrid falls back on them only when there is no sibling
    assert drafter_kinds.default_order("transformers") == ("sibling-int4", "sibling", "int4", "ngram", "none")
    assert drafter_kinds.default_order("llamacpp") == ("sibling", "ngram", "none", "sibling-int4", "int4")


def test_the_options_list_the_runtimes():
    from specchat import options

    assert options.RUNTIME_CHOICES == select.RUNTIME_NAMES
