"""Drive a running specchat app in headless Chromium, as a user would, and screenshot it.

    python scripts/drive_app.py URL OUT.png [--drafter KIND] [--message TEXT]
                                [--stop-after SECONDS] [--timeout SECONDS]

Picks the drafter, sends the message, waits for the reply to finish (or clicks Stop after
--stop-after seconds), prints what the page shows (token counts per kind, their colors, the
stats line) as JSON, and saves a full-page screenshot. Needs Debian's chromium and
chromium-driver and `pip install selenium`. Only for pages on this machine (127.0.0.1).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    raise SystemExit(
        "scripts/drive_app.py needs selenium and a Chromium: pip install selenium; "
        "apt-get install chromium chromium-driver"
    ) from None

FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
)

PAGE_STATE = """
const toks = document.querySelectorAll('#spec-chat .tok');
const kinds = {}; const colors = {};
toks.forEach(t => { const k = [...t.classList].find(c => c.startsWith('tok-')); kinds[k] = (kinds[k] || 0) + 1;
                    colors[k] = getComputedStyle(t).backgroundColor; });
return {tokens: toks.length, kinds, colors,
        stats: (document.querySelector('#spec-stats') || {}).innerText || '',
        plots: document.querySelectorAll('.spec-plot .js-plotly-plot').length,
        status: (document.querySelector('#spec-drafter-status') || {}).innerText || ''};
"""


def driver(width: int = 1440, height: int = 1000) -> webdriver.Chrome:
    options = Options()
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def button(d: webdriver.Chrome, label: str):
    return next(b for b in d.find_elements(By.TAG_NAME, "button") if b.text.strip() == label)


def pick_drafter(d: webdriver.Chrome, kind: str, timeout: float) -> None:
    d.find_element(By.CSS_SELECTOR, "input[role=listbox], .wrap input").click()
    time.sleep(0.5)
    # the selected option reads "✓\nsibling": match on the last line
    next(o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text.strip().split()[-1] == kind).click()
    deadline = time.time() + timeout
    while time.time() < deadline:  # loading a drafter (int4 quantizes) can take a minute
        status = d.execute_script(PAGE_STATE)["status"]
        if f"'{kind}' ready" in status or "failed" in status:
            return
        time.sleep(1)


def wait_ready(d: webdriver.Chrome, timeout: float) -> None:
    """Wait until the drafter status says the models are ready (or ``timeout`` seconds pass)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = d.find_elements(By.CSS_SELECTOR, "#spec-drafter-status")
        if status and "ready" in status[0].text:
            return
        time.sleep(2)


def set_number(d: webdriver.Chrome, label: str, value: float) -> None:
    """Type a value into the number box of the slider whose label starts with ``label``."""
    box = d.execute_script(
        """const lab = [...document.querySelectorAll('label, span')].find(e => e.textContent.trim().startsWith(arguments[0]));
           const block = lab && lab.closest('.block'); return block && block.querySelector('input[type=number]');""",
        label,
    )
    box.clear()
    box.send_keys(str(value))
    box.send_keys("\t")


def set_checkbox(d: webdriver.Chrome, label: str, checked: bool) -> None:
    """Tick or untick the checkbox whose label starts with ``label`` (e.g. "adaptive γ")."""
    box = d.execute_script(
        """const lab = [...document.querySelectorAll('label, span')].find(e => e.textContent.trim().startsWith(arguments[0])
                       && e.closest('label') && e.closest('label').querySelector('input[type=checkbox]'));
           return lab && lab.closest('label').querySelector('input[type=checkbox]');""",
        label,
    )
    if box.is_selected() != checked:
        d.execute_script("arguments[0].click();", box)  # it may sit in a closed accordion: a DOM click toggles it
    deadline = time.time() + 5
    while box.is_selected() != checked and time.time() < deadline:
        time.sleep(0.1)


def shown_speedup(stats: str) -> float | None:
    """The measured speedup in the page's stats line (``speedup 1.23×``); None if not measured."""
    import re

    match = re.search(r"speedup\s+([0-9.]+)×", stats)
    return float(match.group(1)) if match else None


def send(d: webdriver.Chrome, message: str) -> None:
    """Type ``message`` into the chat box (Shift+Enter between lines) and click Send."""
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    for i, line in enumerate(message.split("\n")):  # Enter sends; Shift+Enter is a newline
        if i:
            box.send_keys(Keys.SHIFT, Keys.ENTER)
        box.send_keys(line)
    button(d, "Send").click()


def wait_done(d: webdriver.Chrome, timeout: float, *, min_tokens: int = 1) -> dict:
    """Poll the page until the reply has stopped streaming; return PAGE_STATE.

    Done = the stats line no longer ends in "…" (it does while a reply streams) and the token
    count has not changed for two polls. Raises TimeoutError with the last state otherwise.
    """
    start, last, stable = time.time(), -1, 0
    while time.time() - start < timeout:
        time.sleep(1)
        state = d.execute_script(PAGE_STATE)
        streaming = state["stats"].rstrip().endswith("…")
        stable = stable + 1 if state["tokens"] == last and not streaming else 0
        last = state["tokens"]
        if stable >= 2 and state["tokens"] >= min_tokens:
            return state
    raise TimeoutError(f"the reply did not finish in {timeout:.0f} s: {state}")


def screenshot(d: webdriver.Chrome, out: str, width: int = 1440) -> None:
    """A full-page PNG: the window is grown to the page's height first."""
    height = d.execute_script("return document.body.scrollHeight")
    d.set_window_size(width, height + 40)
    time.sleep(1.5)
    d.save_screenshot(out)


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
