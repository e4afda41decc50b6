"""Is the speedup the page shows the real one? Compare it with a back-to-back run, on a busy machine.

    python scripts/check_speedup.py [--drafter sibling-int4] [--target NAME] [--max-new-tokens 128]
                                    [--no-hog] [--port 7871] [--out test-output/check_speedup]

1. Starts the app (``app.py``) with the drafter and waits until it is ready.
2. Starts a CPU hog: another process spinning on one core (stopped by its PID at the end),
   unless ``--no-hog``.
3. In headless Chromium, sends one message with the drafter, then the same message with
   ``none``, and reads the speedup each reply shows (measured against target-only steps timed
   during that reply); saves screenshots.
4. Under the same hog, in a separate process, decodes the same chat prompt target-only and with
   the drafter back to back (none, drafter, drafter, none; greedy, adaptive γ ≤ 12 as in the
   app, no timing rounds) and takes the ratio of their decode speeds.
5. Prints both numbers and their relative difference as JSON.

Needs the models installed, Debian's chromium + chromium-driver and selenium. Binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
MESSAGE = "Write a Python function that merges two sorted lists, with a docstring."

BACK_TO_BACK = r"""
import json, sys
from specchat.core.config import GenerationConfig
from specchat.core.metrics import SpeculationMetrics
from specchat.service import ChatService
target, drafter, message, max_new = sys.argv[1] or None, sys.argv[2], sys.argv[3], int(sys.argv[4])
service = ChatService(target=target)
service.load()
service.prepare_drafter(drafter)
service.warm_up(drafter)
ids, _ = service.encode_chat([], message, max_new)
rates = {"none": [], drafter: []}
for kind in ("none", drafter, drafter, "none"):
    config = GenerationConfig(num_speculative_tokens=12, adaptive_gamma=kind != "none", max_new_tokens=max_new)
    m = SpeculationMetrics()
    for event in service.generate(ids, drafter=kind, config=config):
        m.update(event)
    rates[kind].append(m.tokens_per_s)
    print(f"  back to back: {kind}: {m.tokens_per_s:.2f} tokens/s ({m.num_committed} tokens)", file=sys.stderr)
print(json.dumps(rates))
"""


def wait_ready(url: str, log: Path, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if "Ready:" in log.read_text(errors="replace"):
            try:
                urllib.request.urlopen(url, timeout=5)
                return
            except OSError:
                pass
        if "error:" in log.read_text(errors="replace"):
            raise SystemExit(f"the app failed to start; see {log}")
        time.sleep(2)
    raise SystemExit(f"the app was not ready after {timeout:.0f} s; see {log}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="sibling-int4")
    ap.add_argument("--target", default="")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-hog", action="store_true")
    ap.add_argument("--port", type=int, default=7871)
    ap.add_argument("--out", default=str(ROOT / "test-output" / "check_speedup"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{args.port}"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1"}
    log = out / "app.log"
    cmd = [sys.executable, str(ROOT / "app.py"), "--port", str(args.port), "--drafter", args.drafter]
    if args.target:
        cmd += ["--target", args.target]
    app = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    hog = None
    result: dict = {"drafter": args.drafter, "hog": not args.no_hog, "max_new_tokens": args.max_new_tokens}
    try:
        wait_ready(url, log, 900)
        if not args.no_hog:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(2)
        import drive_app

        d = drive_app.driver(1440, 1000)
        try:
            d.get(url)
            time.sleep(4)
            drive_app.set_number(d, "max new tokens", args.max_new_tokens)
            for kind in (args.drafter, "none"):
                drive_app.pick_drafter(d, kind, 300)
                drive_app.send(d, MESSAGE)
                state = drive_app.wait_done(d, 1800)
                result[f"shown_{kind}"] = drive_app.shown_speedup(state["stats"])
                result[f"shown_{kind}_stats"] = state["stats"]
                drive_app.screenshot(d, str(out / f"{kind}.png"))
        finally:
            d.quit()
        b2b = subprocess.run(
            [sys.executable, "-c", BACK_TO_BACK, args.target, args.drafter, MESSAGE, str(args.max_new_tokens)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600,
        )
        if b2b.returncode != 0:
            raise SystemExit(f"the back-to-back run failed:\n{b2b.stderr[-3000:]}")
        rates = json.loads(b2b.stdout.strip().splitlines()[-1])
        mean = {k: sum(v) / len(v) for k, v in rates.items()}
        result["back_to_back_tokens_per_s"] = rates
        result["back_to_back_ratio"] = mean[args.drafter] / mean["none"]
        shown = result[f"shown_{args.drafter}"]
        result["shown_over_back_to_back"] = shown / result["back_to_back_ratio"] if shown is not None else None
    finally:
        if hog is not None:
            hog.terminate()
            hog.wait(10)
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
    print(json.dumps(result, indent=1, ensure_ascii=False))
    (out / "result.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
