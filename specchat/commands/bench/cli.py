"""``specchat bench``: the command line of the speed benchmark. Reads the options (``--quick``
fills in what the user did not spell out), loads the models, runs the configurations with
:mod:`specchat.commands.bench.runner`, prints the tables and goals of :mod:`specchat.commands.bench.report`
and writes the results (JSON, optional CSV, the chart as HTML and PNG) to ``--out``."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from specchat.commands.common import add_compile_argument, compile_target, fail
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE
from specchat.drafters.kinds import SPECULATIVE_KIND_NAMES
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, PROG, add_models_argument, add_runtime_argument, auto_or, device, ranged


def add_parser(subparsers) -> argparse.ArgumentParser:
    ben = subparsers.add_parser(
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
    ben.add_argument("--no-transformers", "--no-peers", dest="transformers", action="store_false",
                     help="skip the peers: transformers' generate(assistant_model=…/prompt_lookup_num_tokens=…) "
                          "counterparts, or on --runtime llamacpp llama.cpp's own plain decode and prompt lookup")
    ben.add_argument("--hf-assistant-tokens", nargs="*", type=ranged(int, 1, 64, "1..64"), default=[4, 8], metavar="K",
                     help="transformers tuned: also run each model drafter's assistant with K tokens per round "
                          "(schedule 'constant'), for each K (default 4 8; none: --hf-assistant-tokens)")
    ben.add_argument("--prompts", help="prompt set YAML (default: the shipped specchat/commands/bench/bench_prompts.yaml)")
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
    ben.add_argument("--threads", type=ranged(int, 1, 1024, "an integer >= 1"),
                     help="CPU threads for torch and llama.cpp (default: torch's; llama.cpp: every CPU)")
    ben.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(ben)
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
    add_compile_argument(ben)
    add_models_argument(ben)
    return ben


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """``specchat bench``; ``argv`` is the command line as given (what ``--quick`` must not override,
    and the ``command`` recorded in the results); the exit status: 2 for a bad argument or input
    (before any timing), 1 for a run that failed, 0 once the results are written."""
    from specchat.commands.bench import runner
    from specchat.errors import SpecchatError

    prompts, chat_messages, status = _read_inputs(args, argv)
    if status:
        return status
    service, status = _make_service(args)
    if status:
        return status
    try:
        drafters, status = _load_models(args, service)
        if status:
            return status
        plan = _plan(args, service, drafters, prompts)
        out, status = _output_folder(args)
        if status:
            return status
        results, multi_turn = _run_plan(args, service, plan, drafters, chat_messages)
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    finally:
        runner.close_peers(service)  # llama-server's process, llama-cpp-python's contexts
    summary, meta = _summary(args, argv, service, drafters, prompts, results, multi_turn)
    _print_report(summary, meta)
    _write_results(args, out, results, summary, meta)
    return 0


@dataclass
class _Plan:
    """What runs: the ``main`` configurations on every prompt, and the fixed-γ ``sweep`` too on
    the ``sweep_prompts`` (the first ``--sweep-per-group`` prompts of each group)."""

    prompts: list
    main: list
    sweep: list
    sweep_prompts: list

    @property
    def sweeping(self) -> bool:
        return bool(self.sweep and self.sweep_prompts)

    @property
    def rest(self) -> list:
        """The prompts that run the main configurations only."""
        return [p for p in self.prompts if p not in self.sweep_prompts] if self.sweeping else self.prompts


def _read_inputs(args: argparse.Namespace, argv: list[str]) -> tuple[list, list, int]:
    """(the prompts to run, the multi-turn script's messages, 0), or an exit status (2) for an
    unreadable prompt set or script or no prompt left; fills in ``--quick``'s settings."""
    from specchat.commands.bench import runner

    try:
        prompts = runner.load_prompts(args.prompts)
    except ValueError as exc:
        return [], [], fail(str(exc))
    if args.quick:  # a quick look; what the user spelled out still wins
        given = {a.split("=", 1)[0] for a in argv}
        for option, attr, value in (("--per-group", "per_group", 1), ("--max-new-tokens", "max_new_tokens", 48),
                                    ("--repeats", "repeats", 1), ("--gammas", "gammas", ["adaptive"])):
            if option not in given:
                setattr(args, attr, value)
    try:
        chat_messages = runner.load_chat_script(args.multi_turn or None) if args.multi_turn is not None else []
    except ValueError as exc:
        return [], [], fail(str(exc))
    if args.groups:
        prompts = [p for p in prompts if p.group in args.groups]
    if args.per_group:
        prompts = _first_per_group(prompts, args.per_group)
    if not prompts:
        return [], [], fail("no prompts left after --groups/--per-group")
    return prompts, chat_messages, 0


def _make_service(args: argparse.Namespace):
    """(an unloaded ChatService with torch's threads set, 0), or (None, 2) for an unknown target
    or a runtime it cannot run on."""
    from specchat.errors import RegistryError
    from specchat.service import ChatService

    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        return ChatService(target=args.target, dtype=args.dtype, device=args.device, drafter_model=args.drafter_model,
                           runtime=args.runtime, threads=args.threads), 0
    except (RegistryError, ValueError) as exc:
        return None, fail(str(exc))


def _load_models(args: argparse.Namespace, service) -> tuple[list[str], int]:
    """Load the target and the drafters to time (compiled with ``--compile``): (their names, 0),
    or an exit status (2) for a drafter the target does not offer."""
    service.load()
    available = [d for d in service.drafter_kinds() if d != "none"]
    drafters = args.drafters or available
    if args.drafter_model and not {"sibling", "sibling-int4"} & set(drafters):
        return drafters, fail("--drafter-model names a sibling, but --drafters has neither sibling nor sibling-int4")
    missing = [d for d in drafters if d not in available]
    if missing:
        return drafters, fail(f"drafter(s) {', '.join(missing)} not available for "
                              f"{service.target_name}; allowed: {', '.join(available)}")
    for drafter in drafters:
        print(f"loading drafter {drafter} …", file=sys.stderr)
        service.prepare_drafter(drafter)
    if args.compile:  # before any timing: specchat's rows (target-only too) run compiled, transformers' eagerly
        compile_target(service)
    return drafters, 0


def _plan(args: argparse.Namespace, service, drafters: list[str], prompts: list) -> _Plan:
    """The configurations: adaptive γ (or the first γ given) on every prompt, with the peers; the
    other γ settings on the sweep prompts only."""
    from specchat.commands.bench import runner

    gammas = [None if g == "adaptive" else g for g in dict.fromkeys(args.gammas)]
    main_gammas = [g for g in gammas if g is None] or gammas[:1]
    sweep_gammas = [g for g in gammas if g not in main_gammas]
    on_llama = service.runtime == "llamacpp"  # the peer is llama.cpp itself; transformers' rows need torch models
    main = runner.build_configs(drafters, transformers=args.transformers and not on_llama, gammas=main_gammas,
                                max_gamma=args.max_gamma, timing_cost=args.timing_cost,
                                hf_assistant_tokens=args.hf_assistant_tokens if not on_llama else (),
                                llamacpp=on_llama and args.transformers)
    sweep = [c for c in runner.build_configs(drafters, transformers=False, gammas=sweep_gammas, max_gamma=args.max_gamma)
             if c.drafter != "none"]
    sweep_prompts = prompts if args.sweep_per_group == 0 else _first_per_group(prompts, args.sweep_per_group)
    return _Plan(prompts, main, sweep, sweep_prompts)


def _output_folder(args: argparse.Namespace) -> tuple[Path, int]:
    """(``--out``, made, 0), or an exit status (2) when it cannot be written: checked before the
    long part, so that it fails now and not after the run."""
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK):
            raise PermissionError(f"[Errno 13] Permission denied: {str(out)!r}")
    except OSError as exc:
        return out, fail(f"--out {args.out}: cannot write there ({exc})")
    return out, 0


def _run_plan(args: argparse.Namespace, service, plan: _Plan, drafters: list[str], chat_messages: list) -> tuple[list, list]:
    """Time every configuration (one interleaved run: the sweep prompts run every configuration,
    the others the main ones), then the multi-turn conversation when asked: (runs, multi-turn runs)."""
    from specchat.commands.bench import runner

    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say(f"bench: {len(plan.prompts)} prompts × {len(plan.main)} configurations"
        + (f" + {len(plan.sweep_prompts)} prompts × {len(plan.sweep)} fixed-γ settings" if plan.sweeping else "")
        + f", {args.repeats} repeat(s), {args.max_new_tokens} new tokens, "
        + ("greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature:g} (seed = repeat)"))
    timing = {"max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "progress": say,
              "temperature": args.temperature}
    results = runner.run_bench(service, plan.sweep_prompts, plan.main + plan.sweep, **timing) if plan.sweeping else []
    if plan.rest:
        results += runner.run_bench(service, plan.rest, plan.main, **timing)
    multi_turn = []
    if args.multi_turn is not None:
        multi_turn = runner.run_multi_turn(service, chat_messages, drafters, max_new_tokens=args.max_new_tokens,
                                           repeats=args.repeats, temperature=args.temperature, progress=say)
    return results, multi_turn


def _summary(args: argparse.Namespace, argv: list[str], service, drafters: list[str], prompts: list,
             results: list, multi_turn: list) -> tuple[dict, dict]:
    """(the summary of the runs, the run's description: machine, settings, command)."""
    from specchat.commands.bench import report

    summary = report.summarize(results)
    if multi_turn:
        summary["multi_turn"] = report.summarize_multi_turn(multi_turn)
        summary["multi_turn_runs"] = multi_turn
    if "hybrid" in drafters:
        summary["hybrid_part"] = service.hybrid_part()
    meta = report.machine_description(service) | {
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "num_prompts": len(prompts),
        "max_gamma": args.max_gamma, "temperature": args.temperature, "command": PROG + " " + " ".join(argv),
        "compiled": ({"pass_lengths": list(service.compiled.buckets),
                      "compile_s": {str(k): round(v, 1) for k, v in service.compiled.compile_s.items()}}
                     if service.compiled is not None else None),
    }
    return summary, meta


def _print_report(summary: dict, meta: dict) -> None:
    """The tables, the machine and the goals, on stdout."""
    from specchat.commands.bench import report

    print(report.format_table(summary))
    print(f"\nmachine: {meta['processor']}, {meta['cpu_count']} CPUs, {meta['torch_threads']} torch threads, "
          f"{meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}")
    print(f"runtime: {meta['runtime']}")
    goals = report.check_goals(summary)
    if goals:
        print("\ngoals:")
        for text, value, met in goals:
            mark = "not measured" if met is None else ("met" if met else "NOT met")
            print(f"  {text:<48} {report._fmt(value):>6}  {mark}")


def _write_results(args: argparse.Namespace, out: Path, results: list, summary: dict, meta: dict) -> None:
    """bench.json, bench.csv (``--csv``), the chart as HTML and, where kaleido can start a browser,
    PNG; says which files in ``out`` are left from an earlier run."""
    from specchat.commands.bench import report
    from specchat.ui.charts import figures as charts

    names = report.OUTPUT_NAMES
    written = ["json"] + (["csv"] if args.csv else [])
    report.write_outputs(results, summary, meta, json_path=out / names["json"],
                         csv_path=out / names["csv"] if args.csv else None)
    print(f"\nresults in {out.resolve()}:")
    print(f"wrote {out / names['json']}")
    if args.csv:
        print(f"wrote {out / names['csv']}")
    fig = charts.bench_figure(report.chart_summary(summary), meta)
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


def _first_per_group(prompts: list, n: int) -> list:
    """The first ``n`` prompts of each group, in their original order."""
    seen: dict[str, int] = {}
    kept = []
    for p in prompts:
        seen[p.group] = seen.get(p.group, 0) + 1
        if seen[p.group] <= n:
            kept.append(p)
    return kept

