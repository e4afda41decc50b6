"""``specchat calibrate``: time each model drafter against target-only on this machine, keep the
record in specchat's cache (the app reads it to pick its default drafter) and print it, or the
record as JSON with ``--json``. The measuring is :mod:`specchat.analysis.calibrate`'s."""

from __future__ import annotations

import argparse
import json
import sys

from specchat.commands.common import fail, load_service
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, add_models_argument, add_runtime_argument, device


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
    cal.add_argument("--all-kinds", action="store_true",
                     help="time every model drafter, the int4 kinds on llama.cpp included (their lower-bit copy is "
                          "made first: a minute or more); implies --again. The app's drafter menu then shows what "
                          "each costs here")
    cal.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(cal, threads=True)
    cal.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    cal.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    cal.add_argument("--runtimes", action="store_true",
                     help="instead: time the target alone on each runtime (transformers, llama.cpp) and a verify "
                          "pass over k = 1..13 tokens on each; --runtime auto then takes the faster (minutes: the "
                          "transformers runtime converts a GGUF target once)")
    add_models_argument(cal)
    return cal


def run(args: argparse.Namespace) -> int:
    from specchat.analysis import calibrate
    from specchat.errors import SpecchatError

    args.drafter = "none"
    if args.runtimes:
        return _runtimes(args)
    try:
        service, status = load_service(args)
        if service is None:
            return status
        kinds = service.model_drafter_kinds() if args.all_kinds else None
        kind, reason = service.pick_drafter(recalibrate=args.again or args.all_kinds, kinds=kinds)
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    record = service.calibration
    if args.json:
        print(json.dumps(record.to_json() | {"picked": kind, "reason": reason}, ensure_ascii=False))
        return 0
    base = ", ".join(f"{r:.2f}" for r in record.target_tokens_per_s)
    print(f"target only: {base} tokens/s (before the first drafter and after each)")
    for d in sorted(record.drafters, key=lambda d: -d.speedup):
        alpha = "-" if d.alpha is None else f"{d.alpha:.2f}"
        ms = "-" if d.draft_ms_per_token is None else f"{d.draft_ms_per_token:.0f} ms"
        c = record.cost_ratio(d.kind)
        cost = "" if c is None else f"  c={c:.2f}" + ("  (a drafted token costs a target step or more: cannot pay)"
                                                     if c >= 1 else "")
        print(f"  {d.kind:<13} {d.tokens_per_s:6.2f} tokens/s  {d.speedup:5.2f}×  α={alpha}  draft {ms}/token{cost}")
    print(f"default drafter: {kind} ({reason})")
    print(f"record: {calibrate.default_path()}")
    return 0




def _runtimes(args: argparse.Namespace) -> int:
    """``--runtimes``: measure, keep the record, print it (or the record as JSON)."""
    import torch

    from specchat.analysis import runtimes
    from specchat.errors import RegistryError, SpecchatError
    from specchat.runtimes import loading, select
    from specchat.runtimes.registry import load_registry
    from specchat.service import ChatService

    try:
        registry = load_registry()  # with --models FILE's entries (the CLI passes it on through the environment)
        entry = registry.resolve(args.target or registry.default_target)
        if not entry.has_gguf:
            return fail(f"{entry.name} has no GGUF file: only transformers can run it, nothing to compare")

        def make(name: str) -> ChatService:
            return ChatService(target=args.target, dtype=args.dtype, device=args.device, registry=registry,
                               runtime=name, threads=args.threads)

        say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
        record = runtimes.measure(make, entry, args.threads, progress=say)
    except (RegistryError, SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    path = select.save_measurement(record)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))  # as ChatService picks it
    choice = select.choose_runtime(entry, "auto", device, args.threads)
    if args.json:
        print(json.dumps(record | {"auto": choice.name}, ensure_ascii=False))
        return 0
    ks = record["ks"]
    print(f"target alone ({record['num_tokens']} tokens, greedy), and T(k)/T(1): one forward over k tokens "
          f"after {runtimes.PREFIX_LEN} cached, all k logits rows")
    print(f"{'runtime':<60} {'tok/s':>6}  {'T(1) ms':>7}  " + " ".join(f"{k:>5}" for k in ks[1:]))
    for name, rate in record["tokens_per_s"].items():
        ms = record["verify_ms"][name]
        print(f"{record['described'][name]:<60} {rate:6.2f}  {ms[0]:7.1f}  " + " ".join(f"{t / ms[0]:5.2f}" for t in ms[1:]))
    print(f"--runtime auto: {choice.name} ({choice.reason})")
    print(f"record: {path} (cache: {loading.cache_root()})")
    return 0
