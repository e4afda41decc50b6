"""``specchat soak``: many chat turns on one loaded model; does memory level off, does latency drift?

The command line over :mod:`specchat.commands.bench.soak` (the tests run the same code): one line
per turn, then the summary table; ``--json`` writes settings, per-turn records and summary. Exit
status 1 when a turn broke the engine's contract (no DoneEvent, or a KV cache kept after the
turn): the numbers are reported, not judged, since they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specchat.commands.common import fail
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, add_models_argument, device, ranged


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "soak", help="many chat turns on one loaded model: does memory level off, does latency drift?",
        description="A long chat session without a page: the history grows (and is trimmed), drafters rotate, "
                    "greedy and sampled turns alternate, Stop is pressed and streams are abandoned; after each turn "
                    "resident memory, latency and whether the engine is idle are recorded.",
    )
    p.add_argument("--turns", type=ranged(int, 2, None, "an integer >= 2"), default=100, help="chat turns (default 100)")
    p.add_argument("--target", default="smollm2-135m-instruct",
                   help="models.yaml name or a local model directory (default: smollm2-135m-instruct)")
    p.add_argument("--drafter", default="ngram,none,int4",
                   help="drafter kinds, comma-separated, rotated per turn (default: ngram,none,int4)")
    p.add_argument("--max-new-tokens", type=ranged(int, 1, None, "an integer >= 1"), default=32,
                   help="tokens per reply at most (default 32)")
    p.add_argument("--gamma", type=ranged(int, 1, None, "an integer >= 1"), default=4,
                   help="num_speculative_tokens (γ_max on adaptive turns; default 4)")
    p.add_argument("--context-length", type=ranged(int, 0, None, "an integer >= 0"), default=512,
                   help="context window used for the chat (0: the model's own); small, so the history is trimmed and "
                        "the prompt length levels off (default 512)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", help="(default float32)")
    p.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    p.add_argument("--threads", type=ranged(int, 0, 1024, "0..1024"), default=1,
                   help="torch threads (0: torch's default; default 1)")
    p.add_argument("--cancel-every", type=ranged(int, 0, None, "an integer >= 0"), default=5,
                   help="press Stop on every n-th turn (0: never; default 5)")
    p.add_argument("--abandon-every", type=ranged(int, 0, None, "an integer >= 0"), default=7,
                   help="close the stream early on every n-th turn (0: never; default 7)")
    p.add_argument("--warmup", type=ranged(int, 0, None, "an integer >= 0"), default=None,
                   help="turns of warm-up (default: a tenth)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, metavar="OUT.json", help="write settings, per-turn records and summary here")
    p.add_argument("--quiet", action="store_true", help="no line per turn")
    add_models_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    """``specchat soak``; the exit status: 0 when every turn kept the engine's contract, 1 when one
    broke it or the run failed, 2 for an unknown target or drafter."""
    import torch

    from specchat.commands.bench import soak
    from specchat.errors import RegistryError, SpecchatError
    from specchat.service import ChatService

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    drafters = [d.strip() for d in args.drafter.split(",") if d.strip()]
    try:  # the target and the drafters checked before anything loads (a ChatService loads nothing until asked)
        unloaded = ChatService(target=args.target, dtype=args.dtype, device=args.device)
        unknown = [d for d in drafters if d not in unloaded.drafter_kinds()]
        if unknown or not drafters:
            return fail(f"--drafter {args.drafter!r}: {', '.join(unknown) or 'no drafter'} not available for "
                        f"{unloaded.target_name}; allowed: {', '.join(unloaded.drafter_kinds())}")
        service = soak.make_service(args.target, dtype=args.dtype, device=args.device,
                                    context_length=args.context_length or None)
    except (RegistryError, ValueError) as exc:
        return fail(str(exc))
    try:
        result = soak.run_soak(
            service, args.turns, drafters=drafters, max_new_tokens=args.max_new_tokens,
            num_speculative_tokens=args.gamma, cancel_every=args.cancel_every, abandon_every=args.abandon_every,
            warmup=args.warmup, seed=args.seed, log=None if args.quiet else lambda line: print(line, flush=True),
        )
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    result["settings"]["wall_s_with_loading"] = time.perf_counter() - t0
    print()
    print(soak.format_summary(result))
    print(f"wall time with loading: {result['settings']['wall_s_with_loading']:.1f} s")
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        except OSError as exc:
            return fail(f"--json {args.json}: cannot write there ({exc})", 1)
        print(f"wrote {args.json}")
    s = result["summary"]
    ok = s["every_unabandoned_turn_done"] and s["engine_idle_every_turn"] and s["text_consistent"]
    if not ok:
        print("soak: a turn broke the engine's contract (see the summary)", file=sys.stderr)
    return 0 if ok else 1
