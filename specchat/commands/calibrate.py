"""``specchat calibrate``: time each model drafter against target-only on this machine, keep the
record in specchat's cache (the app reads it to pick its default drafter) and print it, or the
record as JSON with ``--json``. The measuring is :mod:`specchat.analysis.calibrate`'s."""

from __future__ import annotations

import argparse
import json
import sys

from specchat.commands.common import load_service
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, PROG, add_models_argument, add_runtime_argument, device


def add_parser(subparsers) -> argparse.ArgumentParser:
    cal = subparsers.add_parser(
        "calibrate", help="time each model drafter against target-only on this machine and pick the default drafter",
        description="One short greedy reply per model drafter, between two target-only replies to the same "
                    "message; the result is kept per machine and model pair in specchat's cache and read by the "
                    "app to pick its default drafter (redone when the machine or a model changes).",
    )
    cal.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    cal.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    cal.add_argument("--again", action="store_true", help="measure again even if a calibration is on record")
    cal.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(cal, threads=True)
    cal.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    cal.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    add_models_argument(cal)
    return cal


def run(args: argparse.Namespace) -> int:
    from specchat.analysis import calibrate
    from specchat.errors import SpecchatError

    args.drafter = "none"
    try:
        service, status = load_service(args)
        if service is None:
            return status
        kind, reason = service.pick_drafter(recalibrate=args.again)
    except (SpecchatError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    record = service.calibration
    if args.json:
        print(json.dumps(record.to_json() | {"picked": kind, "reason": reason}, ensure_ascii=False))
        return 0
    base = ", ".join(f"{r:.2f}" for r in record.target_tokens_per_s)
    print(f"target only: {base} tokens/s (before the first drafter and after each)")
    for d in sorted(record.drafters, key=lambda d: -d.speedup):
        alpha = "-" if d.alpha is None else f"{d.alpha:.2f}"
        ms = "-" if d.draft_ms_per_token is None else f"{d.draft_ms_per_token:.0f} ms"
        print(f"  {d.kind:<13} {d.tokens_per_s:6.2f} tokens/s  {d.speedup:5.2f}×  α={alpha}  draft {ms}/token")
    print(f"default drafter: {kind} ({reason})")
    print(f"record: {calibrate.default_path()}")
    return 0


