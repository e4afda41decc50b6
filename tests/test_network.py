"""No outgoing connection: a socket audit hook watches the real app serve a chat and the CLI.

The check runs in a fresh Python process (an audit hook cannot be removed once added): it
installs the hook before anything is imported, loads SmolLM2-135M through ChatService, serves
the Gradio app on 127.0.0.1, sends a message with gradio_client, and runs the CLI. Every
``socket.connect`` / ``socket.getaddrinfo`` whose host is not loopback is recorded; the test
fails if there is one, and also if no loopback connection was seen (then the hook saw nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, sys
outside, loopback = [], []
LOCAL = ("127.0.0.1", "localhost", "::1", "0.0.0.0", None, "")

def hook(event, args):
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else str(address)
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    host = host.decode() if isinstance(host, bytes) else host
    (loopback if host in LOCAL or str(host).startswith("/") else outside).append(f"{event} {host!r}")

sys.addaudithook(hook)
sys.path.insert(0, sys.argv[2])
target = sys.argv[1]

from specchat.ui.page import app  # sets the offline environment before gradio is imported
from gradio_client import Client
from specchat.ui.html.transcript import feed_messages
from specchat.service import ChatService
from specchat.commands.cli import main as cli_main

service = ChatService(target=target, dtype="float32")
service.start("ngram").join()
assert service.startup_error is None, service.startup_error
demo = app.build_ui(service)
demo.queue(default_concurrency_limit=1)
_, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False,
                        share=False, css=app.CSS)
try:
    client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
    job = client.submit("Say hello.", "ngram", 4, 0.0, 1.0, 16, True, api_name="/chat")
    final = job.result(timeout=120)
    reply = [m["content"] for m in feed_messages(final[1])][-1]
finally:
    demo.close()
status = cli_main(["generate", "--target", target, "--drafter", "ngram", "--prompt", "Hi", "--max-new-tokens", "4",
                   "--dtype", "float32", "--json"])
print("RESULT " + json.dumps({"outside": outside, "loopback": len(loopback), "cli": status, "reply": str(reply)[:200]}))
'''


@pytest.mark.subprocess
def test_no_outgoing_connection_while_serving_a_chat_and_running_the_cli(smollm2_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADIO_", "HF_"))}
    env.update(SPECCHAT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(smollm2_dir), str(ROOT)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["cli"] == 0
    assert result["loopback"] > 0, "the audit hook saw no connection at all: it is not watching"
    assert result["outside"] == [], result["outside"]


OFFLINE_SCRIPT = r'''
import json, os, sys
outside = []

def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        host = args[1][0] if event == "socket.connect" and isinstance(args[1], tuple) else args[0]
        host = host.decode() if isinstance(host, bytes) else str(host)
        if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("/"):
            outside.append(f"{event} {host!r}")

sys.addaudithook(hook)
sys.path.insert(0, sys.argv[1])
import specchat  # must switch huggingface_hub off before anything imports it
from huggingface_hub import constants
from huggingface_hub.utils import build_hf_headers

if sys.argv[2] == "headers":
    build_hf_headers()  # what gradio_client.Client does first: it fetched an agent registry from huggingface.co
env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "GRADIO_ANALYTICS_ENABLED")}
offline_before = constants.HF_HUB_OFFLINE
from specchat.offline import allow_hub
allow_hub()  # --allow-download
print("RESULT " + json.dumps({"outside": outside, "env": env, "offline_before": offline_before,
                              "offline_after": constants.HF_HUB_OFFLINE, "env_after": os.environ.get("HF_HUB_OFFLINE")}))
'''


def _offline_run(tmp_path, headers=True, **extra_env) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADIO_", "HF_", "SPECCHAT_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), **extra_env)  # no cached copy of the registry either
    proc = subprocess.run([sys.executable, "-c", OFFLINE_SCRIPT, str(ROOT), "headers" if headers else "-"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.subprocess
def test_importing_specchat_keeps_huggingface_hub_offline_with_nothing_exported(tmp_path):
    """The README's test command is typed with nothing exported: importing specchat alone must
    keep huggingface_hub from reaching huggingface.co (its agent registry, fetched by
    build_hf_headers, made the tests fail in a fresh clone), and --allow-download lifts the
    switch specchat set."""
    result = _offline_run(tmp_path)
    assert result["outside"] == []
    assert result["env"] == {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    assert result["offline_before"] is True
    assert result["offline_after"] is False and result["env_after"] is None


@pytest.mark.subprocess
def test_a_users_own_offline_switch_and_allowed_downloads_are_respected(tmp_path):
    mine = _offline_run(tmp_path, HF_HUB_OFFLINE="1")
    assert mine["offline_after"] is True and mine["env_after"] == "1"  # the user's own switch stays on
    allowed = _offline_run(tmp_path, headers=False, SPECCHAT_ALLOW_DOWNLOAD="1")  # (no headers: they would go online)
    assert allowed["env"]["HF_HUB_OFFLINE"] is None and allowed["offline_before"] is False
