"""The Hugging Face Space: ``python app.py`` in a fresh venv built only from ``requirements.txt``,
with the environment a Space sets, serves a chat.

Slow (it installs the Space's environment, about 3 GB, and loads the default pair; on a fresh
machine it also converts the weights and calibrates the drafter, several minutes), so it is in
the ``slow`` tier: ``python -m pytest -m slow tests/test_space.py``. pip needs the package index
(or a local mirror); when pip cannot reach one the test is skipped and says so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.real_model]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(2400)
def test_space_serves_a_chat_from_a_venv_of_requirements_txt(tmp_path):
    venv = tmp_path / "space-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(ROOT / "requirements.txt")],
                             capture_output=True, text=True, timeout=1800)
    if install.returncode != 0:
        if any(s in install.stderr for s in ("NewConnectionError", "Network is unreachable", "No matching distribution",
                                             "Temporary failure in name resolution")):
            pytest.skip(f"pip cannot reach a package index: {install.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip install -r requirements.txt failed:\n{install.stderr[-3000:]}")

    port = free_port()
    # What a Space sets (a Space listens on 0.0.0.0; the test keeps to this machine).
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": os.environ.get("HOME", str(tmp_path)),
           "SYSTEM": "spaces", "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "PYTHONUNBUFFERED": "1"}
    for key in ("SPECCHAT_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR", "LANG"):
        if key in os.environ:
            env[key] = os.environ[key]
    log = (tmp_path / "app.log").open("w")
    app = subprocess.Popen([str(venv / "bin" / "python"), "app.py"], cwd=ROOT, env=env, stdout=log,
                           stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 1500
        text = ""
        while time.monotonic() < deadline:
            text = (tmp_path / "app.log").read_text(errors="replace")
            if "Ready: " in text or app.poll() is not None:
                break
            time.sleep(2)
        assert "Ready: " in text, f"the app did not get ready (exit {app.poll()}):\n{text[-3000:]}"
        assert "WARNING: listening on" not in text  # no local-run network warning on a Space
        assert f"http://127.0.0.1:{port}" in text

        from gradio_client import Client

        from specchat.ui.html.transcript import feed_messages

        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False, analytics_enabled=False)
        job = client.submit("Write a Python function that adds two numbers.", "ngram", 4, 0.0, 1.0, 24, True,
                            api_name="/chat")
        final = job.result(timeout=600)
        reply = str([m["content"] for m in feed_messages(final[1])][-1])
        assert "def" in reply, reply[:500]  # the reply is the colored tokens' HTML; the code starts with def
    finally:
        app.terminate()
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
        log.close()
