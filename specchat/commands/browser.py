"""Drive the real page in headless Chromium, as a user would: the helpers the browser tests, the
page benchmark (``specchat bench-page``) and ``scripts/drive_app.py`` share.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium chromium-driver``)
and ``pip install selenium``; :func:`driver` raises :class:`BrowserMissing` without them. Only for
pages on this machine (127.0.0.1): the flags keep Chromium from calling home.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # driver() says what is missing
    By = Keys = None

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class BrowserMissing(RuntimeError):
    """selenium, chromium or chromedriver is not installed (the message says which and how)."""


def missing() -> list[str]:
    """What the browser helpers need and do not find (empty when all is there)."""
    out = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        out.append("selenium (pip install selenium)")
    return out


FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
)

PAGE_STATE = """
const toks = document.querySelectorAll('#spec-chat .tok');
const kinds = {}; const colors = {}; const seen = new Set();
toks.forEach((t, i) => {
  const k = [...t.classList].find(c => c.startsWith('tok-') && c !== 'tok-ws');
  const ref = [...t.classList].find(c => c.startsWith('tref-')) || ('piece-' + i);  // a token may span pieces
  if (!seen.has(ref)) { seen.add(ref); kinds[k] = (kinds[k] || 0) + 1; }
  // a kind's colour from a token with text (blank ones are tinted only when resampled or bonus)
  if (!t.classList.contains('tok-ws') || !(k in colors)) colors[k] = getComputedStyle(t).backgroundColor;
});
return {tokens: seen.size, kinds, colors,
        stats: (document.querySelector('#spec-stats') || {}).innerText || '',
        plots: document.querySelectorAll('.spec-plot .js-plotly-plot').length,
        status: (document.querySelector('#spec-drafter-status') || {}).innerText || ''};
"""

def driver(width: int = 1440, height: int = 1000, *, performance_log: bool = False):
    """A new headless Chromium (a fresh profile) driven by selenium. ``performance_log`` turns on
    Chrome's DevTools network events (read with ``d.get_log("performance")``).

    Raises:
        BrowserMissing: selenium, chromium or chromedriver is not installed.
    """
    lacking = missing()
    if lacking:
        raise BrowserMissing(f"the browser is missing: {', '.join(lacking)} "
                             "(apt-get install chromium chromium-driver; pip install selenium)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    if performance_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def button(d, label: str):
    return next(b for b in d.find_elements(By.TAG_NAME, "button") if b.text.strip() == label)


def pick_drafter(d, kind: str, timeout: float) -> None:
    # the drafter menu's input (#spec-drafter: the model menu is a dropdown too)
    boxes = d.find_elements(By.CSS_SELECTOR, "#spec-drafter input")
    boxes[0].click()
    time.sleep(0.5)
    # the selected option reads "✓\nsibling": match on the last line
    next(o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text.strip().split()[-1] == kind).click()
    deadline = time.time() + timeout
    while time.time() < deadline:  # loading a drafter (int4 quantizes) can take a minute
        status = d.execute_script(PAGE_STATE)["status"]
        if f"'{kind}' ready" in status or "failed" in status:
            return
        time.sleep(1)


def wait_ready(d, timeout: float) -> None:
    """Wait until the drafter status says the models are ready (or ``timeout`` seconds pass)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = d.find_elements(By.CSS_SELECTOR, "#spec-drafter-status")
        if status and "ready" in status[0].text:
            return
        time.sleep(2)


def set_number(d, label: str, value: float) -> None:
    """Type a value into the number box of the slider whose label starts with ``label``."""
    box = d.execute_script(
        """const lab = [...document.querySelectorAll('label, span')].find(e => e.textContent.trim().startsWith(arguments[0]));
           const block = lab && lab.closest('.block'); return block && block.querySelector('input[type=number]');""",
        label,
    )
    box.clear()
    box.send_keys(str(value))
    box.send_keys("\t")


def set_checkbox(d, label: str, checked: bool) -> None:
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


def send(d, message: str) -> None:
    """Type ``message`` into the chat box (Shift+Enter between lines) and click Send."""
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    for i, line in enumerate(message.split("\n")):  # Enter sends; Shift+Enter is a newline
        if i:
            box.send_keys(Keys.SHIFT, Keys.ENTER)
        box.send_keys(line)
    button(d, "Send").click()


def wait_done(d, timeout: float, *, min_tokens: int = 1) -> dict:
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


def screenshot(d, out: str, width: int = 1440) -> None:
    """A full-page PNG: the window is grown to the page's height first."""
    height = d.execute_script("return document.body.scrollHeight")
    d.set_window_size(width, height + 40)
    time.sleep(1.5)
    d.save_screenshot(out)
