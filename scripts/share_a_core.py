"""Take a share of one CPU core in short bursts, as a browser drawing a streamed reply does, to see
what such a load costs llama.cpp's threads (they meet at a barrier after every operation: one of
them preempted holds the other up).

    python scripts/share_a_core.py 0.15 20 &   # 15 % of one core: 3 ms busy every 20 ms
    python -m specchat chat --script FILE --json --drafter none --runtime llamacpp
    kill %1

Arguments: the share of one core (0..1) and the period in milliseconds. Runs until killed.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    share, period = float(argv[0]), float(argv[1]) / 1000
    if not 0 <= share <= 1 or period <= 0:
        print("share_a_core.py: the share must be in 0..1 and the period above 0 ms", file=sys.stderr)
        return 2
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < share * period:
            pass
        time.sleep(period * (1 - share))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
