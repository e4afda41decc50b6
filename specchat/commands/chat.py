"""``specchat chat``: a chat in the terminal (:mod:`specchat.commands.repl`), or with ``--script``
a scripted multi-turn conversation played as the app does (chat template, history trimmed to the
context window, the conversation's KV cache kept between turns); each reply on stdout and a line
per turn on stderr, or one JSON object per turn with ``--json``."""

from __future__ import annotations

import argparse
import json
import sys

from specchat.commands.common import add_compile_argument, add_speculation_arguments, fail, load_service
from specchat.commands.generate import summary_line
from specchat.conversation import ReplySettings
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_TEMPERATURE
from specchat.core.events import TokenEvent
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, add_models_argument, add_runtime_argument, device, ranged


def add_parser(subparsers) -> argparse.ArgumentParser:
    cht = subparsers.add_parser(
        "chat", help="chat in the terminal (tokens coloured by how they were made), or play a --script",
        description="Without --script: a chat in the terminal. Each reply's tokens are coloured by how they were "
                    "produced (green accepted draft, red resampled, blue bonus, plain target), then a summary line; "
                    "/help lists the commands (switch the drafter, γ, temperature; clear); Ctrl-C stops a reply. "
                    "With --script: each message of the script is sent in turn with the conversation so far (chat "
                    "template, history trimmed to the context window as in the app); the KV cache of the "
                    "conversation is reused between turns, so a turn prefills only its new tokens (prefill_tokens).",
    )
    cht.add_argument("--script", metavar="FILE", help="a JSON list of user messages to play instead of chatting; "
                                                      "'-': one JSON string per line of stdin, each played as it comes")
    cht.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    add_speculation_arguments(cht)
    cht.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    cht.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0..{MAX_TEMPERATURE} (0 = greedy)"), default=0.0)
    cht.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    cht.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0,
                     help="turn i uses seed S + i")
    cht.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=None,
                     help="the longest reply, in tokens (default 512 in the terminal chat, 256 with --script)")
    cht.add_argument("--no-prefix-cache", action="store_true",
                     help="prefill the whole conversation every turn (for comparison)")
    cht.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(cht, threads=True)
    cht.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    cht.add_argument("--json", action="store_true", help="one JSON object per turn on stdout (no reply text)")
    add_compile_argument(cht)
    add_models_argument(cht)
    return cht


def run(args: argparse.Namespace) -> int:
    from specchat.commands.script import load_script, play_script, read_messages
    from specchat.errors import SpecchatError

    if args.script is None:
        return _chat(args)
    args.max_new_tokens = args.max_new_tokens or 256
    try:  # "-": one JSON string per line of stdin, each played when it comes
        messages = read_messages(sys.stdin) if args.script == "-" else load_script(args.script)
    except ValueError as exc:
        return fail(str(exc))


    def show(event: TokenEvent) -> None:
        sys.stdout.write(event.text)
        sys.stdout.flush()

    try:
        service, status = load_service(args)
        if service is None:
            return status
        service.engine.prefix_cache = not args.no_prefix_cache
        settings = ReplySettings(args.drafter, args.num_speculative_tokens, not args.fixed_gamma, args.temperature,
                                 args.top_p, args.max_new_tokens)  # the drafter as load_service resolved it
        for t in play_script(service, messages, settings=settings, seed=args.seed,
                             on_token=None if args.json else show):
            record, done = t.record, t.done
            if args.json:
                print(json.dumps(record, ensure_ascii=False), flush=True)
            else:
                sys.stdout.write(done.final_text + "\n")
                ttft = "n/a" if record["ttft_ms"] is None else f"{record['ttft_ms']:.0f} ms"
                print(f"[turn {record['turn']}] time to first token {ttft}, prefilled {done.num_prefilled} of "
                      f"{done.num_prompt_tokens} prompt tokens in {done.prefill_ms / 1000:.2f} s; "
                      + summary_line(args.drafter, t.metrics, done), file=sys.stderr)
                for text in t.notices:
                    print(f"[turn {record['turn']}] note: {text}", file=sys.stderr)
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    return 0


def _chat(args: argparse.Namespace) -> int:
    """The terminal chat (:func:`specchat.commands.repl.run_repl`) on the loaded service."""
    from specchat.commands.repl import ReplState, run_repl
    from specchat.errors import SpecchatError
    from specchat.runtimes.select import describe_service

    if args.json:
        return fail("--json is for --script (one object per turn)")
    try:
        service, status = load_service(args)
        if service is None:
            return status
        service.engine.prefix_cache = not args.no_prefix_cache
        print(f"{service.target_name}: {describe_service(service, args.drafter)}; drafter {args.drafter}",
              file=sys.stderr)
        state = ReplState(drafter=args.drafter, num_speculative_tokens=args.num_speculative_tokens,
                          adaptive_gamma=not args.fixed_gamma, temperature=args.temperature, top_p=args.top_p,
                          max_new_tokens=args.max_new_tokens or 512, seed=args.seed)
        return run_repl(service, state)
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
