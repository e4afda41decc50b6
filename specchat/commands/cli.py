"""Command line: ``python -m specchat generate ...`` (headless, JSON lines with --json)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specchat.analysis.ledger import count_ledger
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE, GenerationConfig
from specchat.core.events import DoneEvent, TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters.kinds import KIND_NAMES, SPECULATIVE_KIND_NAMES
from specchat.options import (
    DEVICE_HELP,
    DTYPE_CHOICES,
    PROG,
    Parser,
    add_app_arguments,
    add_models_argument,
    auto_or,
    device,
    ranged,
    use_model_sources,
)

_gamma = ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}")
_ANSI = {"accepted": "\033[32m", "resampled": "\033[31m", "bonus": "\033[34m", "target": ""}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="specchat: speculative decoding you can see.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    gen = sub.add_parser("generate", help="generate text from a prompt (headless)")
    gen.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    gen.add_argument("--drafter", choices=KIND_NAMES, default="none")
    gen.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory (default: the target's sibling)")
    gen.add_argument(
        "--num-speculative-tokens", "-k", type=ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}"),
        default=4, help="γ: draft tokens per round (default 4); with --adaptive-gamma the most per round",
    )
    gen.add_argument("--adaptive-gamma", action="store_true",
                     help="choose γ each round (up to -k) to maximise the predicted speedup, as the app does by "
                          "default. γ then depends on measured timings, so with temperature > 0 a --seed no longer "
                          "fixes the reply (the distribution is unchanged)")
    gen.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0..{MAX_TEMPERATURE} (0 = greedy)"), default=0.0)
    gen.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    gen.add_argument("--top-k", type=ranged(int, 0, None, "an integer >= 0 (0 = off)"), default=0)
    gen.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0)
    gen.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=128)
    gen.add_argument("--stop", nargs="+", default=[], metavar="TEXT", help="stop strings")
    gen.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    gen.add_argument("--num-samples", type=ranged(int, 1, 100000, "an integer >= 1"), default=1,
                     help="independent samples, seeds S, S+1, …")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    gen.add_argument("--prompt", required=True, help="the prompt text")
    gen.add_argument("--json", action="store_true", help="one JSON object per sample per line")
    gen.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    gen.add_argument("--trace", metavar="FILE",
                     help="record every round (drafts, p, q, u, top-10 lists, residuals, times) to FILE as "
                          "JSON lines (docs/TRACE.md); open it in the app with `python app.py --trace FILE`")
    cht = sub.add_parser(
        "chat", help="play a scripted multi-turn conversation, as the app does (one JSON object per turn)",
        description="Each message of the script is sent in turn with the conversation so far (chat template, "
                    "history trimmed to the context window as in the app); the KV cache of the conversation is "
                    "reused between turns, so a turn prefills only its new tokens (prefill_tokens).",
    )
    cht.add_argument("--script", required=True, metavar="FILE", help="a JSON list of user messages")
    cht.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    cht.add_argument("--drafter", choices=KIND_NAMES, default="none")
    cht.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    cht.add_argument("--num-speculative-tokens", "-k", type=ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}"),
                     default=12, help="γ, the most per round with adaptive γ (default 12, as in the app)")
    cht.add_argument("--fixed-gamma", action="store_true", help="draft exactly -k tokens per round (the app's "
                     "default is adaptive γ)")
    cht.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0..{MAX_TEMPERATURE} (0 = greedy)"), default=0.0)
    cht.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    cht.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0,
                     help="turn i uses seed S + i")
    cht.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=256)
    cht.add_argument("--no-prefix-cache", action="store_true",
                     help="prefill the whole conversation every turn (for comparison)")
    cht.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    cht.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    cht.add_argument("--json", action="store_true", help="one JSON object per turn on stdout (no reply text)")
    cal = sub.add_parser(
        "calibrate", help="time each model drafter against target-only on this machine and pick the default drafter",
        description="One short greedy reply per model drafter, between two target-only replies to the same "
                    "message; the result is kept per machine and model pair in specchat's cache and read by the "
                    "app to pick its default drafter (redone when the machine or a model changes).",
    )
    cal.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    cal.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    cal.add_argument("--again", action="store_true", help="measure again even if a calibration is on record")
    cal.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    cal.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    cal.add_argument("--json", action="store_true", help="print the calibration record as JSON")
    aud = sub.add_parser("audit", help="check on real models that speculation does not change the output")
    aud.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    aud.add_argument("--drafter", choices=SPECULATIVE_KIND_NAMES, required=True)
    aud.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    aud.add_argument("--prompt", default=AUDIT_PROMPT, help="chat message to audit on")
    aud.add_argument("--samples", type=ranged(int, 10, 100000, "an integer in 10..100000"), default=300,
                     help="sampled draws of the next token at the chosen position (default 300)")
    last = MAX_NEW_TOKENS_LIMIT - 1
    aud.add_argument("--position", type=auto_or(ranged(int, 0, last, f"'auto' or an integer in 0..{last}")),
                     default="auto",
                     help="reply position of the sampled check: 0 = the first reply token, or 'auto' (default): "
                          "the greedy reply's most uncertain position where the drafter proposes a token")
    aud.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=64,
                     help="length of the greedy comparison (default 64)")
    aud.add_argument("--num-speculative-tokens", "-k", type=_gamma, default=4)
    aud.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0 < T <= {MAX_TEMPERATURE}", lo_open=True), default=1.0,
                     help="temperature of the sampled check (default 1.0)")
    aud.add_argument("--top-k", type=ranged(int, 0, None, "an integer >= 0 (0 = off)"), default=0)
    aud.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    aud.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0)
    aud.add_argument("--significance", type=ranged(float, 0.0, 0.5, "0 < A <= 0.5", lo_open=True), default=1e-3,
                     help="the sampled check fails when p < this (default 0.001: a correct engine fails 0.1%% of audits)")
    aud.add_argument("--tie-tolerance", type=auto_or(ranged(float, 0.0, None, "'auto' or a number >= 0")), default="auto",
                     help="a greedy divergence passes only where the target's top-2 logit gap is at most this "
                          "(default auto: 2 machine epsilons of the model's dtype at the top logit, at least 0.001)")
    aud.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    aud.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    ben = sub.add_parser(
        "bench", help="time the drafters against target-only and against transformers' assisted generation",
        description="Greedy (or, with --temperature, sampled) decoding of a fixed prompt set (code, code edits, passage "
                    "questions, open chat), "
                    "every configuration interleaved in one process; medians per configuration and group.",
    )
    ben.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    ben.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    ben.add_argument("--drafters", nargs="+", choices=SPECULATIVE_KIND_NAMES,
                     help="drafters to time (default: all the target offers); target-only is always timed")
    ben.add_argument("--gammas", nargs="+", metavar="G",
                     type=auto_or(ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"'adaptive' or 1..{MAX_NUM_SPECULATIVE_TOKENS}"),
                                   word="adaptive"),
                     default=["adaptive", 1, 2, 4, 8],
                     help="γ settings per drafter: 'adaptive' and/or fixed values (default: adaptive 1 2 4 8)")
    ben.add_argument("--max-gamma", type=ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}"), default=12,
                     help="largest γ adaptive γ may choose (default 12)")
    ben.add_argument("--sweep-per-group", type=ranged(int, 0, None, "an integer >= 0"), default=1,
                     help="prompts per group that also run the fixed-γ settings (default 1; 0 = all)")
    ben.add_argument("--no-transformers", dest="transformers", action="store_false",
                     help="skip transformers' generate(assistant_model=…/prompt_lookup_num_tokens=…) counterparts")
    ben.add_argument("--hf-assistant-tokens", nargs="*", type=ranged(int, 1, 64, "1..64"), default=[4, 8], metavar="K",
                     help="transformers tuned: also run each model drafter's assistant with K tokens per round "
                          "(schedule 'constant'), for each K (default 4 8; none: --hf-assistant-tokens)")
    ben.add_argument("--prompts", help="prompt set YAML (default: the shipped specchat/bench_prompts.yaml)")
    ben.add_argument("--groups", nargs="+", choices=["code", "edit", "passage", "chat"], help="only these groups")
    ben.add_argument("--per-group", type=ranged(int, 1, None, "an integer >= 1"), help="first N prompts of each group")
    ben.add_argument("--max-new-tokens", type=ranged(int, 2, MAX_NEW_TOKENS_LIMIT, f"2..{MAX_NEW_TOKENS_LIMIT}"), default=128)
    ben.add_argument("--multi-turn", nargs="?", const="", default=None, metavar="SCRIPT",
                     help="also play a multi-turn conversation (default: the shipped 6-turn coding chat; SCRIPT: a "
                          "JSON list of messages) with target-only and each drafter, and report the time to first "
                          "token per turn")
    ben.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0..{MAX_TEMPERATURE} (0 = greedy)"),
                     default=0.0, help="0 = greedy (default); above 0 every engine samples (top-k and top-p off), "
                                       "repeat r with seed r")
    ben.add_argument("--repeats", type=ranged(int, 1, 1000, "1..1000"), default=3,
                     help="runs of every configuration on every prompt (default 3: the table gives min / median / max)")
    ben.add_argument("--quick", action="store_true",
                     help="a look in a few minutes: one prompt per group, 48 new tokens, 1 repeat, adaptive γ only "
                          "(the other options still apply where given)")
    ben.add_argument("--threads", type=ranged(int, 1, 1024, "an integer >= 1"), help="torch CPU threads (default: torch's)")
    ben.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    ben.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    ben.add_argument("--out", default="bench-results", metavar="DIR",
                     help="folder for the results: bench.json, bench.csv (with --csv), bench.html and bench.png "
                          "(default: bench-results in the current directory; '--out assets' replaces the "
                          "committed results)")
    ben.add_argument("--csv", action="store_true", help="also write every run to DIR/bench.csv")
    ben.add_argument("--timing-cost", action="store_true",
                     help="also run each drafter without timing rounds (the target-only rounds that measure the "
                          "speedup in the same run) and report what they cost: median over prompts of decode "
                          "tokens/s with ÷ without − 1, in percent")
    for command in (gen, cht, ben):
        _add_compile(command)
    app = sub.add_parser("app", help="open the chat in the browser (the same as `python app.py`)",
                         description="specchat: a local chat that shows speculative decoding at work.")
    add_app_arguments(app)
    for command in (gen, cht, cal, aud, ben):
        add_models_argument(command)
    return parser


def _add_compile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile", action="store_true",
                        help="compile the target's decode and verify passes (torch.compile with freezing over a static "
                             "cache; one graph, a few minutes on 2 CPU cores, several GB more memory) before generating; "
                             "target-only runs compiled too")


def _compile(service) -> None:
    """--compile: build the compiled target's graphs, with progress on stderr."""
    compiled = service.compile_target(lambda text: print(text + " …", file=sys.stderr, flush=True))
    print(f"compiled the target in {sum(compiled.compile_s.values()):.0f} s "
          f"(pass lengths {', '.join(map(str, compiled.buckets))})", file=sys.stderr, flush=True)


AUDIT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def main(argv: list[str] | None = None) -> int:
    """``specchat COMMAND …`` / ``python -m specchat COMMAND …``; the exit status."""
    args = build_parser().parse_args(argv)
    problem = use_model_sources(args)
    if problem is not None:
        print(f"{PROG} {args.command}: error: {problem}", file=sys.stderr)
        return 2
    if args.command == "app":
        from specchat.ui.app import run

        return run(args)
    if args.command == "generate":
        return _generate(args)
    if args.command == "audit":
        return _audit(args)
    if args.command == "chat":
        return _chat(args)
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "bench":
        return _bench(args, sys.argv[1:] if argv is None else argv)
    return 2


def _bench(args: argparse.Namespace, argv: list[str]) -> int:

    from specchat.commands import bench
    from specchat.errors import RegistryError, SpecchatError
    from specchat.service import ChatService

    try:
        prompts = bench.load_prompts(args.prompts)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.quick:  # a quick look; what the user spelled out still wins
        given = {a.split("=", 1)[0] for a in argv}
        for option, attr, value in (("--per-group", "per_group", 1), ("--max-new-tokens", "max_new_tokens", 48),
                                    ("--repeats", "repeats", 1), ("--gammas", "gammas", ["adaptive"])):
            if option not in given:
                setattr(args, attr, value)
    try:
        chat_messages = bench.load_chat_script(args.multi_turn or None) if args.multi_turn is not None else []
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.groups:
        prompts = [p for p in prompts if p.group in args.groups]
    if args.per_group:
        prompts = _first_per_group(prompts, args.per_group)
    if not prompts:
        print(f"{PROG}: error: no prompts left after --groups/--per-group", file=sys.stderr)
        return 2
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        service = ChatService(target=args.target, dtype=args.dtype, device=args.device, drafter_model=args.drafter_model)
    except RegistryError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        service.load()
        available = [d for d in service.drafter_kinds() if d != "none"]
        drafters = args.drafters or available
        if args.drafter_model and not {"sibling", "sibling-int4"} & set(drafters):
            print(f"{PROG}: error: --drafter-model names a sibling, but --drafters has neither "
                  "sibling nor sibling-int4", file=sys.stderr)
            return 2
        missing = [d for d in drafters if d not in available]
        if missing:
            print(f"{PROG}: error: drafter(s) {', '.join(missing)} not available for "
                  f"{service.target_name}; allowed: {', '.join(available)}", file=sys.stderr)
            return 2
        for drafter in drafters:
            print(f"loading drafter {drafter} …", file=sys.stderr)
            service.prepare_drafter(drafter)
        if args.compile:  # before any timing: specchat's rows (target-only too) run compiled, transformers' eagerly
            _compile(service)
        gammas = [None if g == "adaptive" else g for g in dict.fromkeys(args.gammas)]
        main_gammas = [g for g in gammas if g is None] or gammas[:1]
        sweep_gammas = [g for g in gammas if g not in main_gammas]
        main = bench.build_configs(drafters, transformers=args.transformers, gammas=main_gammas, max_gamma=args.max_gamma,
                                   timing_cost=args.timing_cost, hf_assistant_tokens=args.hf_assistant_tokens)
        sweep = [c for c in bench.build_configs(drafters, transformers=False, gammas=sweep_gammas, max_gamma=args.max_gamma)
                 if c.drafter != "none"]
        sweep_prompts = prompts if args.sweep_per_group == 0 else _first_per_group(prompts, args.sweep_per_group)
        out = Path(args.out)
        try:  # before the long part: a folder that cannot be written fails now, not after the run
            out.mkdir(parents=True, exist_ok=True)
            if not os.access(out, os.W_OK):
                raise PermissionError(f"[Errno 13] Permission denied: {str(out)!r}")
        except OSError as exc:
            print(f"{PROG}: error: --out {args.out}: cannot write there ({exc})", file=sys.stderr)
            return 2
        say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
        say(f"bench: {len(prompts)} prompts × {len(main)} configurations"
            + (f" + {len(sweep_prompts)} prompts × {len(sweep)} fixed-γ settings" if sweep and sweep_prompts else "")
            + f", {args.repeats} repeat(s), {args.max_new_tokens} new tokens, "
            + ("greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature:g} (seed = repeat)"))
        # one interleaved run: the sweep prompts run every configuration, the others the main ones
        results = bench.run_bench(service, sweep_prompts, main + sweep, max_new_tokens=args.max_new_tokens,
                                  repeats=args.repeats, progress=say, temperature=args.temperature) if sweep and sweep_prompts else []
        rest = [p for p in prompts if p not in sweep_prompts] if sweep and sweep_prompts else prompts
        if rest:
            results += bench.run_bench(service, rest, main, max_new_tokens=args.max_new_tokens,
                                       repeats=args.repeats, progress=say, temperature=args.temperature)
        multi_turn = []
        if args.multi_turn is not None:
            multi_turn = bench.run_multi_turn(service, chat_messages, drafters, max_new_tokens=args.max_new_tokens,
                                              repeats=args.repeats, temperature=args.temperature, progress=say)
    except (SpecchatError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    summary = bench.summarize(results)
    if multi_turn:
        summary["multi_turn"] = bench.summarize_multi_turn(multi_turn)
        summary["multi_turn_runs"] = multi_turn
    if "hybrid" in drafters:
        summary["hybrid_part"] = service.hybrid_part()
    meta = bench.machine_description(service) | {
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "num_prompts": len(prompts),
        "max_gamma": args.max_gamma, "temperature": args.temperature, "command": PROG + " " + " ".join(argv),
        "compiled": ({"pass_lengths": list(service.engine.compiled.buckets),
                      "compile_s": {str(k): round(v, 1) for k, v in service.engine.compiled.compile_s.items()}}
                     if service.engine.compiled is not None else None),
    }
    print(bench.format_table(summary))
    print(f"\nmachine: {meta['processor']}, {meta['cpu_count']} CPUs, {meta['torch_threads']} torch threads, "
          f"{meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}")
    goals = bench.check_goals(summary)
    if goals:
        print("\ngoals (issues 4 and 14):")
        for text, value, met in goals:
            mark = "not measured" if met is None else ("met" if met else "NOT met")
            print(f"  {text:<48} {bench._fmt(value):>6}  {mark}")
    names = bench.OUTPUT_NAMES
    written = ["json"] + (["csv"] if args.csv else [])
    bench.write_outputs(results, summary, meta, json_path=out / names["json"],
                        csv_path=out / names["csv"] if args.csv else None)
    print(f"\nresults in {out.resolve()}:")
    print(f"wrote {out / names['json']}")
    if args.csv:
        print(f"wrote {out / names['csv']}")
    from specchat.ui import charts

    fig = charts.bench_figure(bench.chart_summary(summary), meta)
    fig.write_html(str(out / names["html"]), include_plotlyjs="cdn")
    written.append("html")
    print(f"wrote {out / names['html']}")
    try:
        fig.write_image(str(out / names["png"]), scale=1)
        written.append("png")
        print(f"wrote {out / names['png']}")
    except Exception as exc:  # kaleido needs a Chrome/Chromium; the HTML is still written
        print(f"note: no PNG ({type(exc).__name__}: {exc}); install Chromium and kaleido for one", file=sys.stderr)
    for key, name in names.items():  # same names every run: say which files this run did not write
        if key not in written and (out / name).exists():
            print(f"note: {out / name} is left from an earlier run (not written by this one)")
    return 0


def _first_per_group(prompts: list, n: int) -> list:
    """The first ``n`` prompts of each group, in their original order."""
    seen: dict[str, int] = {}
    kept = []
    for p in prompts:
        seen[p.group] = seen.get(p.group, 0) + 1
        if seen[p.group] <= n:
            kept.append(p)
    return kept



def _load_service(args: argparse.Namespace):
    """A loaded ChatService with the drafter ready, or an exit status for a bad argument."""
    from specchat.errors import RegistryError
    from specchat.service import ChatService

    try:
        service = ChatService(target=args.target, dtype=args.dtype, device=args.device, drafter_model=args.drafter_model)
    except RegistryError as exc:  # an unknown --target: a bad argument, before any loading
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return None, 2
    if args.drafter not in service.drafter_kinds():
        print(
            f"{PROG}: error: drafter {args.drafter!r} is not available for {service.target_name}; "
            f"allowed: {', '.join(service.drafter_kinds())}",
            file=sys.stderr,
        )
        return None, 2
    service.load()
    service.prepare_drafter(args.drafter)
    if getattr(args, "compile", False):
        _compile(service)
    return service, 0


def _calibrate(args: argparse.Namespace) -> int:
    from specchat.analysis import calibrate
    from specchat.errors import SpecchatError

    args.drafter = "none"
    try:
        service, status = _load_service(args)
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


def _audit(args: argparse.Namespace) -> int:
    from specchat.analysis import audit
    from specchat.errors import SpecchatError

    try:
        service, status = _load_service(args)
        if service is None:
            return status
        ids, _ = service.encode_chat([], args.prompt, args.max_new_tokens)
        tok = service.tokenizer
        print(f"audit: target {service.target_name} ({service.dtype}), drafter {args.drafter}, γ={args.num_speculative_tokens}")

        reference, other, div = audit.greedy_check(service, ids, args.drafter, args.max_new_tokens, args.num_speculative_tokens)
        if div is None:
            greedy_ok = True
            print(f"[1/2] greedy, {len(reference)} tokens: identical to target-only  PASS")
        else:
            tolerance = args.tie_tolerance
            if tolerance == "auto":
                tolerance = audit.tie_tolerance(service.dtype, div.top_logits[0])
            greedy_ok = div.is_near_tie(tolerance)
            print(
                f"[1/2] greedy, {len(reference)} tokens: first divergence at generated token {div.index}: "
                f"target-only {tok.decode([div.target_only_token])!r} ({div.target_only_token}) vs speculative "
                f"{tok.decode([div.speculative_token])!r} ({div.speculative_token}); target's top-2 logits there "
                f"{div.top_logits[0]:.4f} / {div.top_logits[1]:.4f}, gap {div.gap:.4f} "
                + ("<= " if greedy_ok else "> ")
                + f"tie tolerance {tolerance:.4g}  {'PASS (near-tie)' if greedy_ok else 'FAIL'}"
            )

        config = GenerationConfig(
            num_speculative_tokens=args.num_speculative_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        )
        if args.position == "auto":
            position = audit.choose_position(service, ids, reference, args.drafter, config)
        elif args.position < len(reference):
            position = args.position
        else:
            print(f"{PROG}: error: --position {args.position} is past the greedy reply's "
                  f"{len(reference)} tokens; allowed: 0..{len(reference) - 1} or auto", file=sys.stderr)
            return 2
        context = tok.decode(reference[max(0, position - 8) : position])
        check = audit.sampled_check(service, ids + reference[:position], args.drafter, args.samples, config, progress=True)
        sampled_ok = check.p_value >= args.significance and check.outside_support == 0
        print(
            f"[2/2] sampled, {check.num_samples} draws of reply token {position} (after …{context!r}; "
            f"T={args.temperature}, top-k={args.top_k}, top-p={args.top_p}): chi-square {check.statistic:.2f}, "
            f"dof {check.dof}, p-value {check.p_value:.4f}, drafted in {check.num_drafted} of {check.num_samples} "
            f"draws ({check.num_accepted} accepted, {check.num_drafted - check.num_accepted} resampled), "
            f"outside the target's support {check.outside_support}  "
            f"{'PASS' if sampled_ok else 'FAIL'} (fails when p < {args.significance})"
        )
        if check.num_drafted == 0:
            print("      note: the drafter proposed nothing at this position, so only target-only sampling was "
                  "checked; try --position or a prompt the drafter can match")
        print(f"      {'token':>24}  {'exact p':>8}  {'observed':>8}  {'expected':>8}")
        for token, prob, count in check.rows:
            print(f"      {tok.decode([token])!r:>24}  {prob:8.4f}  {count:8d}  {prob * check.num_samples:8.1f}")
    except (SpecchatError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0 if greedy_ok and sampled_ok else 1


def _generate(args: argparse.Namespace) -> int:
    from specchat.errors import SpecchatError

    if not args.prompt.strip():
        print(f"{PROG}: error: --prompt is empty", file=sys.stderr)
        return 2
    if args.trace and args.num_samples > 1:
        print(f"{PROG}: error: --trace records one generation; use it with --num-samples 1", file=sys.stderr)
        return 2
    if args.trace:  # a bad path fails now, not after the models have loaded
        try:
            open(args.trace, "a", encoding="utf-8").close()
        except OSError as exc:
            print(f"{PROG}: error: cannot write the trace to {args.trace}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    try:
        service, status = _load_service(args)
        if service is None:
            return status
        if args.chat:
            ids, notice = service.encode_chat([], args.prompt, args.max_new_tokens)
        else:
            ids = service.encode_plain(args.prompt)
        for i in range(args.num_samples):
            config = GenerationConfig(
                num_speculative_tokens=args.num_speculative_tokens,
                adaptive_gamma=args.adaptive_gamma,
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
            color = sys.stdout.isatty() and not args.json
            sample = f"sample {i + 1}/{args.num_samples}" if args.num_samples > 1 else None
            if sample and not args.json:  # where one sample ends and the next begins
                sys.stdout.write(f"--- {sample} (seed {config.seed}) ---\n")
            events = []
            for event in service.generate(ids, drafter=args.drafter, config=config):
                if args.trace:
                    events.append(event)
                metrics.update(event)
                if isinstance(event, TokenEvent) and not args.json:
                    kind = event.kind.value if event.num_drafted else "target"
                    sys.stdout.write(f"{_ANSI[kind]}{event.text}\033[0m" if color else event.text)
                    sys.stdout.flush()
            done = metrics.done
            assert isinstance(done, DoneEvent)
            sizes = service.model_sizes(args.drafter)
            ledger = count_ledger(metrics.rounds, sizes=sizes, alpha=metrics.acceptance_rate, prefill_ms=done.prefill_ms,
                                  num_prefilled=done.num_prefilled, num_prompt_tokens=done.num_prompt_tokens)
            if args.json:
                print(json.dumps({**_sample_json(done, metrics, args, config.seed), "ledger": ledger.summary()},
                                 ensure_ascii=False))
            else:
                sys.stdout.write(done.final_text + "\n")  # the reply ends with a newline
                sys.stdout.flush()
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
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _chat(args: argparse.Namespace) -> int:
    from specchat.commands.script import load_script, play_script
    from specchat.errors import SpecchatError

    try:
        messages = load_script(args.script)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2

    def config_for_turn(turn: int) -> GenerationConfig:
        return GenerationConfig(
            num_speculative_tokens=args.num_speculative_tokens, adaptive_gamma=not args.fixed_gamma,
            temperature=args.temperature, top_p=args.top_p, seed=args.seed + turn - 1,
            max_new_tokens=args.max_new_tokens, measure_speedup=True,
        )

    def show(event: TokenEvent) -> None:
        sys.stdout.write(event.text)
        sys.stdout.flush()

    try:
        service, status = _load_service(args)
        if service is None:
            return status
        service.engine.prefix_cache = not args.no_prefix_cache
        for t in play_script(service, messages, drafter=args.drafter, config_for_turn=config_for_turn,
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
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def summary_line(drafter: str, metrics: SpeculationMetrics, done: DoneEvent, sample: str | None = None) -> str:
    """One line after a reply: tokens, speed, α, tokens per round and the speedup against the
    target-only steps timed during this reply (``n/a`` where not measurable); ``sample`` (e.g.
    "sample 2/3") names the sample when there are several."""
    s = metrics.summary()

    def fmt(value, spec: str, suffix: str = "") -> str:
        return "n/a" if value is None else f"{value:{spec}}{suffix}"

    return (
        f"[{drafter}{', ' + sample if sample else ''}] {s['num_tokens']} tokens, {fmt(s['tokens_per_s'], '.2f', ' tokens/s')}, "
        f"α={fmt(s['acceptance_rate'], '.2f')}, {fmt(s['mean_tokens_per_round'], '.2f')} tokens/round, "
        f"speedup {fmt(s['speedup'], '.2f', '×')} vs target-only steps timed during this reply "
        f"(predicted {fmt(s['speedup_predicted'], '.2f', '×')}), stop={done.stop_reason.value}"
    )


def _sample_json(done: DoneEvent, metrics: SpeculationMetrics, args: argparse.Namespace, seed: int) -> dict:
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
