"""Soak run: many chat turns on one loaded model; does memory level off, does latency drift?

    python scripts/soak.py [--turns 100] [--target smollm2-135m-instruct|DIR] [--drafter ngram,none,int4] …

The same as ``python -m specchat soak …`` (:mod:`specchat.commands.bench.soak_cli`, which
``--help`` describes), kept for the commands written down before the subcommand existed. Exit
status 1 when a turn broke the engine's contract (no DoneEvent, or a KV cache kept after the
turn): the numbers are reported, not judged, since they depend on the machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from specchat.commands.cli import main as specchat_main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return specchat_main(["soak", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
