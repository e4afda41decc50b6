"""Peak memory of the app as a Space runs it: at start-up (models loaded, drafter picked, warmed
up) and after chat replies. Starts ``python app.py`` with ``SYSTEM=spaces`` on 127.0.0.1, reads
the process's peak resident memory (``VmHWM`` in ``/proc/PID/status``, Linux), sends messages
through the page's API, reads it again, and stops the app.

    python scripts/measure_memory.py [--drafter KIND] [--messages N] [--port 7871] [-- APP OPTIONS…]

Prints one JSON object: ``startup_peak_gb``, ``chat_peak_gb``, the drafter, the reply lengths.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Now make it ignore case and punctuation, and add three doctests.",
    "Explain in two sentences how your function handles an empty string.",
)


def peak_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB → GiB
    raise RuntimeError("no VmHWM in /proc/PID/status")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default=None, help="drafter for the chat (default: the one the app picked)")
    ap.add_argument("--messages", type=int, default=3, help="chat messages to send (default 3, one conversation)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=7871)
    ap.add_argument("app_args", nargs="*", help="options passed to app.py (after --)")
    args = ap.parse_args()
    env = {**os.environ, "SYSTEM": "spaces", "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(args.port),
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"}
    log_path = Path(f"/tmp/specchat-memory-{args.port}.log")
    with log_path.open("w") as log:
        app = subprocess.Popen([sys.executable, str(ROOT / "app.py"), *args.app_args], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        text = ""
        for _ in range(1800):
            text = log_path.read_text(errors="replace")
            if "Ready: " in text or app.poll() is not None:
                break
            time.sleep(1)
        if "Ready: " not in text:
            print(text[-3000:], file=sys.stderr)
            return 1
        ready_line = next(line for line in text.splitlines() if line.startswith("Ready: "))
        drafter = args.drafter or ready_line.split("with drafter '", 1)[1].split("'", 1)[0]
        startup = peak_gb(app.pid)
        from gradio_client import Client

        client = Client(f"http://127.0.0.1:{args.port}/", verbose=False, download_files=False, analytics_enabled=False)
        lengths = []
        for message in MESSAGES[: args.messages]:
            final = client.submit(message, drafter, 12, 0.0, 1.0, args.max_new_tokens, True, api_name="/chat").result(
                timeout=1800)
            lengths.append(len(str(final[1][-1]["content"])))
        result = {"ready": ready_line, "drafter": drafter, "startup_peak_gb": round(startup, 2),
                  "chat_peak_gb": round(peak_gb(app.pid), 2), "messages": len(lengths), "reply_html_chars": lengths}
        print(json.dumps(result))
        return 0
    finally:
        app.terminate()
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()


if __name__ == "__main__":
    sys.exit(main())
