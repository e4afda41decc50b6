"""--runtime auto|transformers|llamacpp: which runtime a model gets, and the messages when it
cannot have the one asked for (these run with or without llama-cpp-python: its presence is
patched)."""

from __future__ import annotations

from pathlib import Path

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


def test_auto_takes_the_runtime_measured_faster_on_this_machine(installed, tmp_path, monkeypatch):
    """specchat calibrate --runtimes keeps one record per machine, model and thread count;
    auto follows it (either way), a record for other threads or another file does not apply."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    entry = ModelEntry(name="m", gguf=GGUF)
    assert "not measured on this machine yet" in select.choose_runtime(entry, "auto", CPU).reason
    record = {"key": select.measurement_key(entry, None), "tokens_per_s": {"transformers": 9.5, "llamacpp": 4.25},
              "verify_ms": {}, "measured_at": "2026-12-03T06:00:00Z"}
    path = select.save_measurement(record)
    assert path == tmp_path / select.RECORD_FILE
    choice = select.choose_runtime(entry, "auto", CPU)
    assert choice.name == "transformers"
    assert choice.reason == "auto: the faster here, measured 2026-12-03 (target alone, tokens/s: transformers 9.5, llama.cpp 4.2)"
    assert select.choose_runtime(entry, "auto", CPU, threads=1).name == "llamacpp"  # not measured with 1 thread
    assert select.choose_runtime(ModelEntry(name="m", gguf=GGUF | {"sha256": "b" * 64}), "auto", CPU).name == "llamacpp"
    assert select.choose_runtime(entry, "llamacpp", CPU).name == "llamacpp"  # asked for: no record overrides it
    select.save_measurement(record | {"tokens_per_s": {"transformers": 3.0, "llamacpp": 15.0}})  # replaces, not appends
    assert select.choose_runtime(entry, "auto", CPU).name == "llamacpp"
    assert len(__import__("json").loads(path.read_text())) == 1
    path.write_text("not json")
    assert select.load_measurement(record["key"]) is None and select.choose_runtime(entry, "auto", CPU).name == "llamacpp"


class _CountingRuntime:
    """Records the seam calls verify_costs makes."""

    vocab_size, device = 100, CPU

    def __init__(self):
        self.calls, self.cached = [], 0

    def start(self, ids, *, max_positions, reuse):
        self.calls.append(("start", len(ids), max_positions, reuse))

    def forward(self, ids, *, num_logits):
        assert all(0 <= i < self.vocab_size for i in ids)
        self.cached += len(ids)
        self.calls.append(("forward", len(ids), num_logits))

    def truncate(self, n):
        self.cached = n
        self.calls.append(("truncate", n))

    def release(self):
        self.calls.append(("release",))


def test_verify_costs_time_k_token_passes_after_the_same_cached_prefix():
    from specchat.analysis.runtimes import verify_costs

    runtime = _CountingRuntime()
    costs = verify_costs(runtime, [1, 3], prefix_len=10, repeats=2)
    assert len(costs) == 2 and all(c >= 0 for c in costs)
    # the prefix once (its last logits row only), then per k one untimed and two timed passes with
    # all k logits rows (a verify pass), each rolled back to the prefix
    assert runtime.calls == [("start", 10, 13, False), ("forward", 10, 1)] + [
        call for k in (1, 3) for _ in range(3) for call in (("forward", k, k), ("truncate", 10))] + [("release",)]


def test_auto_picks_llamacpp_for_the_default_target_with_the_default_install(tmp_path, monkeypatch):
    """Nothing patched: requirements.txt installs a llama.cpp library (xllamacpp's prebuilt one),
    so with no measurement on record `auto` runs the default target, a GGUF, on llama.cpp on a CPU."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))  # no runtimes.json
    assert llamacpp.unavailable_reason() is None
    entry = load_registry().resolve(load_registry().default_target)
    choice = select.choose_runtime(entry, "auto", CPU)
    assert choice.name == "llamacpp" and "not measured on this machine yet" in choice.reason, choice.reason
    assert "xllamacpp==" in (Path(__file__).parents[1] / "requirements-base.txt").read_text()
