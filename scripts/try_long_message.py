"""Send a long message to a running app in headless Chromium, as a user pasting a document would,
print what the page says while the prompt is read (the toast, the prefill bar once a second),
click Stop after a while, and print how the reply ends.

    python scripts/try_long_message.py URL [--file docs/ARCHITECTURE.md] [--chars 9000]
                                           [--stop-after 13] [--screenshot OUT.png]

Needs Debian's chromium and chromium-driver and `pip install selenium`; only for pages on this
machine (127.0.0.1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive_app import button, driver, screenshot, wait_ready  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

TOASTS = "return [...document.querySelectorAll('.toast-body, [data-testid=toast-body]')].map(e => e.innerText).join(' | ')"
BAR = "const p = document.querySelector('#spec-chat .spec-prefill'); return p ? p.innerText : '';"
BOTS = "return [...document.querySelectorAll('#spec-chat [data-testid=bot]')].map(b => b.innerText)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--file", default="docs/ARCHITECTURE.md", help="the document pasted (default: %(default)s)")
    ap.add_argument("--chars", type=int, default=9000, help="its first N characters (default: %(default)s)")
    ap.add_argument("--stop-after", type=float, default=13.0, help="click Stop after this many seconds (0: never)")
    ap.add_argument("--screenshot", help="save the page just before Stop")
    args = ap.parse_args()
    d = driver(1280, 1000)
    try:
        d.get(args.url)
        wait_ready(d, 120)
        message = "Summarise this document in three bullet points.\n\n" + Path(args.file).read_text()[: args.chars]
        box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
        d.execute_script("arguments[0].value = arguments[1];"
                         "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", box, message)
        start, toast, stopped = time.time(), "", None
        button(d, "Send").click()
        while time.time() - start < 600:
            time.sleep(1)
            bar, shown = d.execute_script(BAR), d.execute_script(TOASTS)
            if shown and not toast:
                toast = shown
                print(f"{time.time() - start:5.1f} s  toast: {' '.join(shown.split())}", flush=True)
            print(f"{time.time() - start:5.1f} s  bar: {' '.join(bar.split()) or '(none)'}", flush=True)
            if stopped is None and args.stop_after and time.time() - start >= args.stop_after:
                if args.screenshot:
                    screenshot(d, args.screenshot, width=1280)
                stopped = time.time()
                button(d, "Stop").click()
                print(f"{stopped - start:5.1f} s  Stop clicked", flush=True)
            elif not bar and (stopped is not None or time.time() - start > 3):
                print(f"{time.time() - start:5.1f} s  the bar is gone" +
                      (f", {time.time() - stopped:.1f} s after Stop" if stopped else ""), flush=True)
                break
        time.sleep(2)
        print("reply:", " / ".join(" ".join(b.split()) for b in d.execute_script(BOTS)))
    finally:
        d.quit()


if __name__ == "__main__":
    main()
