"""``specchat generate``: one prompt, headless. The reply streams to stdout (coloured by how each
token was produced when stdout is a terminal), then a summary line and the ledger on stderr;
with ``--json`` one JSON object per sample; with ``--trace`` every round to a JSON-lines file.
Also :func:`summary_line`, the line after a reply that ``specchat chat`` prints too."""

from __future__ import annotations

import argparse
import json
import os
import sys

from specchat.analysis.ledger import count_ledger
from specchat.commands.common import (
    TOKEN_STYLES,
    StopOnCtrlC,
    add_compile_argument,
    add_speculation_arguments,
    fail,
    keys_not_echoed,
    load_service,
)
from specchat.core import evidence
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_TEMPERATURE, GenerationConfig
from specchat.core.events import DoneEvent, TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, PROG, add_models_argument, add_runtime_argument, device, ranged
from specchat.runtimes.select import describe_service


def add_parser(subparsers) -> argparse.ArgumentParser:
    gen = subparsers.add_parser("generate", help="generate text from a prompt (headless)")
    gen.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    add_speculation_arguments(gen)
    gen.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory (default: the target's sibling)")
    gen.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0..{MAX_TEMPERATURE} (0 = greedy)"), default=0.0)
    gen.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    gen.add_argument("--top-k", type=ranged(int, 0, None, "an integer >= 0 (0 = off)"), default=0)
    gen.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0)
    gen.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=128)
    gen.add_argument("--stop", nargs="+", default=[], metavar="TEXT", help="stop strings")
    gen.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(gen, threads=True)
    gen.add_argument("--num-samples", type=ranged(int, 1, 100000, "an integer >= 1"), default=1,
                     help="independent samples, seeds S, S+1, …")
    gen.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                     help="wrap the prompt in the model's chat template as a user message (the default for a model "
                          "that has one); --no-chat (or --raw) continues the prompt as plain text")
    gen.add_argument("--raw", dest="chat", action="store_false", help="the same as --no-chat")
    gen.add_argument("--prompt", required=True, help="the prompt text")
    gen.add_argument("--json", action="store_true", help="one JSON object per sample per line")
    gen.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    gen.add_argument("--trace", metavar="FILE",
                     help="record every round (drafts, p, q, u, top-10 lists, residuals, times) to FILE as "
                          "JSON lines (docs/TRACE.md); open it in the app with `python app.py --trace FILE`")
    add_compile_argument(gen)
    add_models_argument(gen)
    return gen


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        return fail("--prompt is empty")
    if args.trace and args.num_samples > 1:
        return fail("--trace records one generation; use it with --num-samples 1")
    if args.trace:  # a bad path fails now, not after the models have loaded
        try:
            open(args.trace, "a", encoding="utf-8").close()
        except OSError as exc:
            return fail(f"cannot write the trace to {args.trace}: {exc.strerror or exc}")
    try:
        return _run(args)
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _token_console():
    """stdout through rich (imported here: ``specchat --help`` stays light)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _run(args: argparse.Namespace) -> int:
    from rich.text import Text

    from specchat.errors import SpecchatError
    from specchat.runtimes.chat import PLAIN_PROMPT_NOTE, has_chat_template

    try:
        service, status = load_service(args)
        if service is None:
            return status
        if args.chat is None:
            args.chat = has_chat_template(service.tokenizer)
        elif args.chat and not has_chat_template(service.tokenizer):
            print(f"{PROG}: note: {PLAIN_PROMPT_NOTE}", file=sys.stderr)
        if args.chat:
            ids, notice = service.encode_chat([], args.prompt, args.max_new_tokens)
        else:
            ids = service.encode_plain(args.prompt)
        for i in range(args.num_samples):
            config = GenerationConfig(
                num_speculative_tokens=args.num_speculative_tokens,
                adaptive_gamma=not args.fixed_gamma,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                seed=args.seed + i,
                max_new_tokens=args.max_new_tokens,
                stop_strings=tuple(args.stop),
                measure_speedup=True,  # t₁ timed in the same run: stats.speedup is like for like
                trace=bool(args.trace),
            )
            metrics = SpeculationMetrics()
            console = _token_console() if sys.stdout.isatty() and not args.json else None
            sample = f"sample {i + 1}/{args.num_samples}" if args.num_samples > 1 else None
            if sample and not args.json:  # where one sample ends and the next begins
                sys.stdout.write(f"--- {sample} (seed {config.seed}) ---\n")
            events = []
            # Ctrl-C ends the reply at the next round, with its summary; the terminal draws no ^C into it
            with StopOnCtrlC() as stop, keys_not_echoed():
                for event in service.generate(ids, drafter=args.drafter, config=config, cancel=stop.cancel):
                    if args.trace:
                        events.append(event)
                    metrics.update(event)
                    if isinstance(event, TokenEvent) and not args.json:
                        if console is not None:  # rich: colour, unless NO_COLOR or TERM=dumb says not to
                            console.print(Text(event.text, style=TOKEN_STYLES[event.kind.value]), end="")
                        else:
                            sys.stdout.write(event.text)
                            sys.stdout.flush()
            done = metrics.done
            assert isinstance(done, DoneEvent)
            sizes = service.model_sizes(args.drafter)
            ledger = count_ledger(metrics.rounds, sizes=sizes, alpha=metrics.acceptance_rate, prefill_ms=done.prefill_ms,
                                  num_prefilled=done.num_prefilled, num_prompt_tokens=done.num_prompt_tokens,
                                  drafter_prefill_ms=done.drafter_prefill_ms)
            if args.json:
                print(json.dumps({**_sample_json(done, metrics, args, config.seed), "ledger": ledger.summary(),
                                  "runtime": service.runtime}, ensure_ascii=False))
            else:
                sys.stdout.write(done.final_text + "\n")  # the reply ends with a newline
                sys.stdout.flush()
                if i == 0:  # what ran it, once, before the reply's summary and ledger (the last two lines)
                    print(f"runtime: {describe_service(service, args.drafter)}", file=sys.stderr)
                print(summary_line(args.drafter, metrics, done, sample), file=sys.stderr)
                print(ledger.line(), file=sys.stderr)
            if args.trace:
                from specchat.analysis.trace import trace_records, write_trace

                write_trace(args.trace, trace_records(
                    events, target=service.target_name, drafter=args.drafter, config=config, prompt_ids=ids,
                    message=args.prompt, **({} if sizes is None else {"model_sizes": sizes.to_json()}),
                ))
                print(f"trace: {metrics.num_rounds} rounds written to {args.trace}", file=sys.stderr)
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    return 0


def summary_line(drafter: str, metrics: SpeculationMetrics, done: DoneEvent, sample: str | None = None) -> str:
    """One line after a reply: tokens, speed, α, tokens per round and the speedup against the
    target-only steps timed during this reply, with its interval, or held back while too few were
    timed (:func:`specchat.core.evidence.speedup_phrase`); ``sample`` (e.g.
    "sample 2/3") names the sample when there are several."""
    s = metrics.summary()

    def fmt(value, spec: str, suffix: str = "") -> str:
        return "n/a" if value is None else f"{value:{spec}}{suffix}"

    return (
        f"[{drafter}{', ' + sample if sample else ''}] {s['num_tokens']} tokens, {fmt(s['tokens_per_s'], '.2f', ' tokens/s')}, "
        f"α={fmt(s['acceptance_rate'], '.2f')}, {fmt(s['mean_tokens_per_round'], '.2f')} tokens/round, "
        f"{_speedup(evidence.speedup_phrase(metrics))}, "
        + (f"{metrics.pause_note()}, " if s["num_paused_rounds"] else "")
        + f"stop={done.stop_reason.value}"
    )


def _speedup(phrase: str) -> str:
    """``speedup 1.21× …``, or the phrase as it is when it names the speedup itself ("speedup held back …")."""
    return phrase if phrase.startswith("speedup") else f"speedup {phrase}"


def _sample_json(done: DoneEvent, metrics: SpeculationMetrics, args: argparse.Namespace, seed: int | None) -> dict:
    return {
        "text": done.text,
        "token_ids": list(done.token_ids),
        "kinds": [k.value for k in done.kinds],
        "stop_reason": done.stop_reason.value,
        "seed": seed,
        "drafter": args.drafter,
        "num_prompt_tokens": done.num_prompt_tokens,
        "stats": metrics.summary(),
    }

