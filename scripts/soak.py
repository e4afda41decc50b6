"""Soak run: many chat turns on one loaded model; does memory level off, does latency drift?

    python scripts/soak.py [--turns 100] [--target smollm2-135m-instruct|DIR] [--drafter ngram,none,int4]
                           [--max-new-tokens 32] [--context-length 512] [--threads 1] [--json OUT.json]

A thin command line over :mod:`specchat.commands.soak` (the tests run the same code): one line per
turn, then the summary table; ``--json`` writes settings, per-turn records and summary.
Exit status 1 when a turn broke the engine's contract (no DoneEvent, or a KV cache kept after
the turn): the numbers are reported, not judged, since they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from specchat.commands import soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=100)
    p.add_argument("--target", default="smollm2-135m-instruct", help="models.yaml name or a local model directory")
    p.add_argument("--drafter", default="ngram,none,int4", help="drafter kinds, comma-separated, rotated per turn")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--gamma", type=int, default=4, help="num_speculative_tokens (γ_max on adaptive turns)")
    p.add_argument(
        "--context-length",
        type=int,
        default=512,
        help="context window used for the chat (0: the model's own); small, so the history is trimmed and "
        "the prompt length levels off (default 512)",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--cancel-every", type=int, default=5, help="press Stop on every n-th turn (0: never)")
    p.add_argument("--abandon-every", type=int, default=7, help="close the stream early on every n-th turn (0: never)")
    p.add_argument("--warmup", type=int, default=None, help="turns of warm-up (default: a tenth)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write settings, per-turn records and summary here")
    p.add_argument("--quiet", action="store_true", help="no line per turn")
    args = p.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    service = soak.make_service(
        args.target, dtype=args.dtype, device=args.device, context_length=args.context_length or None
    )
    drafters = [d.strip() for d in args.drafter.split(",") if d.strip()]
    result = soak.run_soak(
        service,
        args.turns,
        drafters=drafters,
        max_new_tokens=args.max_new_tokens,
        num_speculative_tokens=args.gamma,
        cancel_every=args.cancel_every,
        abandon_every=args.abandon_every,
        warmup=args.warmup,
        seed=args.seed,
        log=None if args.quiet else lambda line: print(line, flush=True),
    )
    result["settings"]["wall_s_with_loading"] = time.perf_counter() - t0
    print()
    print(soak.format_summary(result))
    print(f"wall time with loading: {result['settings']['wall_s_with_loading']:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    s = result["summary"]
    ok = s["every_unabandoned_turn_done"] and s["engine_idle_every_turn"] and s["text_consistent"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
