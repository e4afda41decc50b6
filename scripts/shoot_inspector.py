"""Screenshots of the inside-the-round views on a running app (issue 12's evidence).

    python scripts/shoot_inspector.py http://127.0.0.1:7860 OUT_DIR

Sends short replies (greedy, then T = 0.8) with the app's current drafter, clicks an accepted,
a resampled and a bonus token in each, shoots the inspector, the timeline, the rejected drafts
inline, an n-gram copy (drafter ngram), and a race on the default drafter.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive_app import button, driver, pick_drafter, send, set_number, wait_done, wait_ready  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def shot(d, css: str, out: Path) -> None:
    el = d.find_element(By.CSS_SELECTOR, css)
    d.execute_script("arguments[0].scrollIntoView({block: 'start'})", el)
    time.sleep(1.0)
    el.screenshot(str(out))
    print("wrote", out, flush=True)


def click_kind(d, reply: int, kind: str) -> bool:
    toks = [t for t in d.find_elements(By.CSS_SELECTOR, f"#spec-chat .tok-{kind}")
            if f"tref-{reply}-" in (t.get_attribute("class") or "")]
    if not toks:
        print(f"no {kind} token in reply {reply}", flush=True)
        return False
    t = toks[len(toks) // 2]
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", t)
    time.sleep(0.3)
    d.execute_script("arguments[0].click()", t)
    time.sleep(2.0)
    return True


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    d = driver(1440, 1100)
    d.get(url)
    wait_ready(d, 900)
    set_number(d, "max new tokens", 64)
    reply = 0
    for temperature in (0.0, 0.8):
        set_number(d, "temperature", temperature)
        send(d, "Write a Python function that returns the squares of a list of numbers.")
        reply += 1
        wait_done(d, 600)
        for kind in ("accepted", "resampled", "bonus"):
            if click_kind(d, reply, kind):
                shot(d, "#spec-inspector", out / f"inspector-T{temperature:g}-{kind}.png")
    shot(d, "#spec-timeline", out / "timeline.png")
    d.find_element(By.CSS_SELECTOR, "#spec-timeline [class*=rref-]").click()
    time.sleep(2)
    # rejected drafts inline
    d.execute_script("[...document.querySelectorAll('label')].find(l => l.textContent.includes('show rejected drafts')).click()")
    time.sleep(2)
    shot(d, "#spec-chat", out / "rejected-inline.png")
    # the race, on the drafter the app started with, greedy
    set_number(d, "temperature", 0.0)
    set_number(d, "max new tokens", 48)
    d.find_element(By.CSS_SELECTOR, "#spec-input textarea").send_keys("Write a Python function that checks whether a number is prime.")
    button(d, "Race: target only vs drafter").click()
    deadline = time.time() + 900
    while time.time() < deadline:
        text = d.find_element(By.CSS_SELECTOR, "#spec-race").text
        if "faster" in text or "slower" in text or "failed" in text or "stopped" in text:
            break
        time.sleep(2)
    shot(d, "#spec-race", out / "race.png")
    d.find_element(By.CSS_SELECTOR, "#spec-input textarea").clear()
    # an n-gram copy: ask for a rename in code the prompt contains
    pick_drafter(d, "ngram", 300)
    send(d, "Add type hints to this function and return it unchanged otherwise:\n\ndef tally(items):\n    count = 0\n"
            "    for item in items:\n        if item:\n            count += 1\n    return count")
    reply += 1
    wait_done(d, 600)
    toks = [t for t in d.find_elements(By.CSS_SELECTOR, "#spec-chat .tok-accepted") if f"tref-{reply}-" in t.get_attribute("class")]
    if toks:
        t = toks[min(len(toks) - 1, 6)]
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", t)
        d.execute_script("arguments[0].click()", t)
        time.sleep(2)
        shot(d, "#spec-inspector", out / "ngram-source.png")
        shot(d, "#spec-chat", out / "ngram-chat.png")
    d.quit()


if __name__ == "__main__":
    main()
