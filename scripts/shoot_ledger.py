"""Screenshots of the cost analysis on a running app (issue 13's evidence).

    python scripts/shoot_ledger.py http://127.0.0.1:7860 OUT_DIR [DRAFTER_1 DRAFTER_2]

Sends one reply at temperature 0.8 with DRAFTER_1 (default: the app's drafter) and one with
DRAFTER_2 (default ngram), then shoots the ledger (of the latest reply), the α-against-c chart
(both drafters), and the proof view of a resampled token of the first reply (clicked), with the
ledger following it. Prints the text of the ledger and the proof's numbers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive_app import driver, pick_drafter, send, set_number, wait_done, wait_ready  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from shoot_inspector import shot  # noqa: E402

MESSAGE = "Write a Python function that returns the squares of a list of numbers, with a docstring."


def pick_low_beta(d, reply: int, tries: int = 12) -> bool:
    """Click the resampled tokens of ``reply`` (up to ``tries``) and leave the inspector on the one
    whose position had the lowest β (the most even split between the two paths)."""
    import re

    toks = [t for t in d.find_elements(By.CSS_SELECTOR, "#spec-chat .tok-resampled")
            if f"tref-{reply}-" in (t.get_attribute("class") or "")][:tries]
    best = None
    for t in toks:
        d.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click()", t)
        time.sleep(1.5)
        m = re.search(r"min\(p\(x\), q\(x\)\) = ([0-9.]+) is the chance", d.find_element(By.CSS_SELECTOR, "#spec-inspector").text)
        if m and (best is None or float(m.group(1)) < best[0]):
            best = (float(m.group(1)), t)
    if best is None:
        print(f"no resampled token with a proof view in reply {reply}", flush=True)
        return False
    print(f"lowest β among {len(toks)} resampled tokens: {best[0]}", flush=True)
    d.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click()", best[1])
    time.sleep(2)
    return True


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    first = sys.argv[3] if len(sys.argv) > 3 else None
    second = sys.argv[4] if len(sys.argv) > 4 else "ngram"
    out.mkdir(parents=True, exist_ok=True)
    d = driver(1440, 1700)
    d.get(url)
    wait_ready(d, 900)
    set_number(d, "max new tokens", 96)
    set_number(d, "temperature", 0.8)
    if first:
        pick_drafter(d, first, 900)
    send(d, MESSAGE)
    wait_done(d, 900)
    time.sleep(3)
    shot(d, "#spec-ledger", out / "ledger-1.png")
    print(d.find_element(By.CSS_SELECTOR, "#spec-ledger").text, flush=True)
    pick_drafter(d, second, 900)
    send(d, MESSAGE + " Then write it again with a loop.")
    wait_done(d, 900, min_tokens=1)
    time.sleep(3)
    shot(d, "#spec-ledger", out / "ledger-2.png")
    print(d.find_element(By.CSS_SELECTOR, "#spec-ledger").text, flush=True)
    shot(d, "#plot-worth", out / "alpha-vs-c.png")
    if pick_low_beta(d, 1):
        shot(d, "#spec-inspector", out / "proof.png")
        shot(d, "#spec-inspector .spec-proof", out / "proof-only.png")
        proof = d.find_elements(By.CSS_SELECTOR, "#spec-inspector .spec-proof")
        print(proof[0].text if proof else "NO PROOF VIEW", flush=True)
        shot(d, "#spec-ledger", out / "ledger-focus-1.png")
    d.quit()


if __name__ == "__main__":
    main()
