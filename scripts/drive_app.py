"""Drive a running specchat app in headless Chromium, as a user would, and screenshot it.

    python scripts/drive_app.py URL OUT.png [--drafter KIND] [--message TEXT]
                                [--stop-after SECONDS] [--timeout SECONDS]

Picks the drafter, sends the message, waits for the reply to finish (or clicks Stop after
--stop-after seconds), prints what the page shows (token counts per kind, their colors, the
stats line) as JSON, and saves a full-page screenshot. Needs Debian's chromium and
chromium-driver and `pip install selenium`. Only for pages on this machine (127.0.0.1).
The helpers live in :mod:`specchat.commands.browser` (the browser tests import them from here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specchat.commands.browser import (  # noqa: E402,F401 (the tests' names)
    PAGE_STATE,
    button,
    driver,
    pick_drafter,
    screenshot,
    send,
    set_checkbox,
    set_number,
    shown_speedup,
    wait_done,
    wait_ready,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--drafter")
    ap.add_argument("--message", default="Write a Python function that merges two sorted lists, with a docstring.")
    ap.add_argument("--stop-after", type=float, default=None)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    d = driver()
    try:
        d.get(args.url)
        time.sleep(4)
        if args.drafter:
            pick_drafter(d, args.drafter, args.timeout)
        send(d, args.message)
        extra = {}
        if args.stop_after is not None:
            time.sleep(args.stop_after)
            button(d, "Stop").click()
            time.sleep(2)
            before = d.execute_script(PAGE_STATE)["tokens"]
            time.sleep(3)
            extra["tokens_after_stop_then_3s"] = [before, d.execute_script(PAGE_STATE)["tokens"]]
        else:
            wait_done(d, args.timeout)
        screenshot(d, args.out)
        print(json.dumps(d.execute_script(PAGE_STATE) | extra, indent=1))
    finally:
        d.quit()


if __name__ == "__main__":
    main()
