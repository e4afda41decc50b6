"""The speed benchmark's report: what is made of the runs of :mod:`specchat.commands.bench.runner`.

Results are medians over prompts and repeats (:func:`summarize`), per configuration, overall
and per group, with the ratio to transformers' matching call, specchat's best against
transformers' best (:func:`best_vs_best`) and, when measured, what the timing rounds cost
(:func:`timing_cost`: per drafter the median over prompts, and repeats, of (decode tokens/s
with timing rounds ÷ without) − 1, in percent: negative when the timing rounds slow decoding
down); the multi-turn scenario's time to first token per turn (:func:`summarize_multi_turn`);
the issues' goals (:func:`check_goals`). Output (``python -m specchat bench --out DIR``,
default ``bench-results/``): a table on the terminal (:func:`format_table`), ``bench.json``,
an optional ``bench.csv`` (:func:`write_outputs`), and a plotly chart (``bench.html``, and
``bench.png`` when kaleido can start a Chrome/Chromium; :func:`chart_summary` is what it draws).
"""

from __future__ import annotations

import csv
import json
import platform
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.commands.bench.runner import GROUPS, LLAMACPP, NO_TIMING_SUFFIX, SPECCHAT, TRANSFORMERS, RunResult
from specchat.runtimes.select import cpu_name, describe_service

if TYPE_CHECKING:
    from specchat.service import ChatService

# Where ``python -m specchat bench`` writes (relative to the current directory) unless --out says
# otherwise; the committed results in assets/ are written only with an explicit ``--out assets``.
DEFAULT_OUT = "bench-results"
OUTPUT_NAMES = {"json": "bench.json", "csv": "bench.csv", "html": "bench.html", "png": "bench.png"}


def _median(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize_multi_turn(rows: list[dict]) -> dict:
    """Per drafter: the median over repeats of each turn's time to first token (ms), prefilled
    tokens and prompt tokens, and ``last_over_first`` = last turn's median TTFT ÷ the first's."""
    out = {}
    for drafter in dict.fromkeys(r["drafter"] for r in rows):
        mine = [r for r in rows if r["drafter"] == drafter]
        turns = sorted({r["turn"] for r in mine})
        per = {f: [_median(r[f] for r in mine if r["turn"] == t) for t in turns]
               for f in ("ttft_ms", "prefill_tokens", "num_prompt_tokens", "decode_tokens_per_s")}
        first, last = per["ttft_ms"][0], per["ttft_ms"][-1]
        out[drafter] = per | {"turns": turns, "last_over_first": last / first if first and last else None}
    return out


SUMMARY_FIELDS = (
    "decode_tokens_per_s", "e2e_tokens_per_s", "prefill_s", "speedup", "speedup_same_run", "speedup_predicted_same_run",
    "alpha", "tokens_per_round",
    "cost_ratio", "measured_over_predicted", "textbook_speedup", "measured_over_textbook", "ttft_s", "peak_mem_mb", "mean_gamma",
    "num_timing_rounds", "target_step_ms",
)


def summarize(results: list[RunResult]) -> dict:
    """Medians per configuration, overall and per group, and specchat ÷ transformers ratios.

    Returns ``{"configs": {name: {"overall": {...}, "groups": {group: {...}}, ...}},
    "vs_transformers": {drafter: {"overall": r, "groups": {...}}}, "timing_cost": {...}}``
    where each ratio is the median over runs of specchat adaptive decode tokens/s (with timing
    rounds, as the app runs) ÷ transformers' on the same prompt and repeat, and
    ``timing_cost`` is :func:`timing_cost` (empty unless configurations without timing rounds ran).
    """
    names = list(dict.fromkeys(r.config for r in results))
    configs = {}
    for name in names:
        runs = [r for r in results if r.config == name]
        entry = {"engine": runs[0].engine, "drafter": runs[0].drafter, "gamma": runs[0].gamma,
                 "measure_speedup": runs[0].measure_speedup,
                 "runs": len(runs), "identical": sum(bool(r.identical) for r in runs),
                 "contradictions": [c for r in runs for c in getattr(r, "contradictions", [])]}
        entry["overall"] = {f: _median(getattr(r, f) for r in runs) for f in SUMMARY_FIELDS}
        entry["groups"] = {
            g: {f: _median(getattr(r, f) for r in runs if r.group == g) for f in SUMMARY_FIELDS}
            for g in GROUPS if any(r.group == g for r in runs)
        }
        # the noise: min / median / max over the runs (prompts and repeats) of the two headline rates
        entry["spread"] = {f: _spread(getattr(r, f) for r in runs) for f in ("decode_tokens_per_s", "speedup")}
        configs[name] = entry
    # adaptive γ against fixed γ on the same prompts (the fixed settings may run on fewer)
    for name, entry in configs.items():
        fixed = {(r.prompt, r.repeat) for r in results
                 if r.engine == SPECCHAT and r.drafter == entry["drafter"] and r.gamma.isdigit()}
        if entry["gamma"] == "adaptive" and fixed:
            entry["speedup_on_fixed_gamma_prompts"] = _median(
                r.speedup for r in results if r.config == name and (r.prompt, r.repeat) in fixed
            )
    ratios = {}
    hf = {(r.drafter, r.prompt, r.repeat): r for r in results if r.engine == TRANSFORMERS and r.gamma in ("auto", "-")}
    for r in results:
        if r.engine != SPECCHAT or r.gamma not in ("adaptive", "-") or r.measure_speedup is False:
            continue
        other = hf.get((r.drafter, r.prompt, r.repeat))
        if other is None or not r.decode_tokens_per_s or not other.decode_tokens_per_s:
            continue
        ratios.setdefault(r.drafter, []).append((r.group, r.decode_tokens_per_s / other.decode_tokens_per_s))
    vs = {
        d: {"overall": _median(v for _, v in pairs),
            "groups": {g: _median(v for gg, v in pairs if gg == g) for g in GROUPS if any(gg == g for gg, _ in pairs)}}
        for d, pairs in ratios.items()
    }
    return {"configs": configs, "vs_transformers": vs, "best_vs_best": best_vs_best(configs),
            "vs_llamacpp": vs_llamacpp(configs), "timing_cost": timing_cost(results)}


def _fastest(configs: dict, group: str, engine: str, *, speculative: bool = True) -> tuple[float, str] | None:
    """``(median decode tokens/s, name)`` of ``engine``'s fastest configuration on ``group`` (or
    "all"): among its drafters (``speculative``) or its target-only row; runs without timing
    rounds left out. None when it has none with a rate."""
    rows = []
    for name, entry in configs.items():
        block = entry["overall"] if group == "all" else entry["groups"].get(group, {})
        rate = block.get("decode_tokens_per_s")
        if (entry["engine"] == engine and rate and (entry["drafter"] != "none") == speculative
                and entry.get("measure_speedup") is not False):
            rows.append((rate, name))
    return max(rows) if rows else None


def vs_llamacpp(configs: dict) -> dict:
    """Per group (and over all prompts): specchat's fastest drafter configuration on the
    llama.cpp runtime against llama.cpp's own plain decode and its own speculation (prompt
    lookup), by median decode tokens/s over the same prompts and repeats; {} without llama.cpp rows.

    Returns ``{group or "all": {"specchat": name, "specchat_tokens_per_s": x, "plain_tokens_per_s": y,
    "over_plain": x / y, "speculative": name, "speculative_tokens_per_s": z, "over_speculative": x / z}}``."""
    out = {}
    for group in ("all", *GROUPS):
        ours, theirs = _fastest(configs, group, SPECCHAT), _fastest(configs, group, LLAMACPP)
        plain = _fastest(configs, group, LLAMACPP, speculative=False)
        if ours and plain:
            out[group] = {"specchat": ours[1], "specchat_tokens_per_s": ours[0], "plain_tokens_per_s": plain[0],
                          "over_plain": ours[0] / plain[0]}
            if theirs:
                out[group] |= {"speculative": theirs[1], "speculative_tokens_per_s": theirs[0],
                               "over_speculative": ours[0] / theirs[0]}
    return out


def _spread(values: Iterable[float | None]) -> list[float] | None:
    """``[min, median, max]`` of the values that are not None, or None."""
    present = [v for v in values if v is not None]
    return [min(present), statistics.median(present), max(present)] if present else None


def best_vs_best(configs: dict) -> dict:
    """Per group (and over all prompts): specchat's fastest drafter configuration against
    transformers' fastest assisted configuration (its assistant model or prompt lookup; plain
    greedy left out), by median decode tokens/s over the same prompts and repeats.

    Returns ``{group or "all": {"specchat": name, "specchat_tokens_per_s": x, "transformers": name,
    "transformers_tokens_per_s": y, "ratio": x / y}}`` for the groups where both ran."""
    out = {}
    for group in ("all", *GROUPS):
        ours, theirs = _fastest(configs, group, SPECCHAT), _fastest(configs, group, TRANSFORMERS)
        if ours and theirs:
            out[group] = {"specchat": ours[1], "specchat_tokens_per_s": ours[0], "transformers": theirs[1],
                          "transformers_tokens_per_s": theirs[0], "ratio": ours[0] / theirs[0]}
    return out


def timing_cost(results: list[RunResult]) -> dict:
    """What the timing rounds cost in throughput, per drafter (and γ setting).

    Each specchat run without timing rounds is paired with the run of the same drafter, γ
    setting, prompt and repeat with them. Returns ``{key: {"config", "baseline", "gamma",
    "pairs", "percent", "groups": {group: percent}}}`` where ``percent`` = 100 × (median over
    the pairs of decode tokens/s with timing rounds ÷ without − 1): negative when the timing
    rounds slow decoding down. ``key`` is the drafter, or "drafter γ" when it ran without timing
    rounds at several γ settings. Empty when no run went without timing rounds.
    """
    with_timing = {(r.drafter, r.gamma, r.prompt, r.repeat): r for r in results
                   if r.engine == SPECCHAT and r.drafter != "none" and r.measure_speedup}
    pairs: dict[tuple[str, str], list[tuple[RunResult, RunResult]]] = {}
    for r in results:
        if r.engine != SPECCHAT or r.measure_speedup is not False:
            continue
        other = with_timing.get((r.drafter, r.gamma, r.prompt, r.repeat))
        pairs.setdefault((r.drafter, r.gamma), [])
        if other is not None and other.decode_tokens_per_s and r.decode_tokens_per_s:
            pairs[(r.drafter, r.gamma)].append((other, r))
    gammas_per_drafter: dict[str, int] = {}
    for drafter, _ in pairs:
        gammas_per_drafter[drafter] = gammas_per_drafter.get(drafter, 0) + 1

    def percent(ps: list[tuple[RunResult, RunResult]]) -> float | None:
        ratio = _median(w.decode_tokens_per_s / wo.decode_tokens_per_s for w, wo in ps)
        return None if ratio is None else 100.0 * (ratio - 1.0)

    out = {}
    for (drafter, gamma), ps in pairs.items():
        key = drafter if gammas_per_drafter[drafter] == 1 else f"{drafter} {gamma}"
        without = next(r.config for r in results if r.engine == SPECCHAT and r.drafter == drafter
                       and r.gamma == gamma and r.measure_speedup is False)
        out[key] = {
            "config": without.removesuffix(NO_TIMING_SUFFIX), "baseline": without, "gamma": gamma,
            "pairs": len(ps), "percent": percent(ps),
            "groups": {g: percent([(w, wo) for w, wo in ps if w.group == g])
                       for g in GROUPS if any(w.group == g for w, _ in ps)},
        }
    return out


def chart_summary(summary: dict) -> dict:
    """The summary that :func:`specchat.ui.charts.figures.bench_figure` draws: without the configurations
    that ran without timing rounds (they would be drawn as a second bar of the same drafter)."""
    configs = {n: e for n, e in summary["configs"].items() if e.get("measure_speedup") is not False}
    return summary | {"configs": configs}


def check_goals(summary: dict) -> list[tuple[str, float | None, bool | None]]:
    """The issues' goals (4, 14, 24, 25) on the default pair: (goal, measured value, met). None = not
    measured. ``summary["hybrid_part"]`` names the hybrid's model drafter (set by the CLI)."""
    configs = summary["configs"]

    def speedup(name: str, group: str | None = None) -> float | None:
        entry = configs.get(name)
        if entry is None:
            return None
        return (entry["overall"] if group is None else entry["groups"].get(group, {})).get("speedup")

    goals: list[tuple[str, float | None, bool | None]] = []

    def goal(text: str, value: float | None, ok: Callable[[float], bool]) -> None:
        goals.append((text, value, None if value is None else ok(value)))

    # what is printed about a reply must not contradict its own figures (every prompt, every drafter)
    printed = [entry.get("contradictions", []) for entry in configs.values() if entry["engine"] == SPECCHAT]
    goal("no printed sentence contradicts its reply's figures (count)", float(sum(map(len, printed))), lambda v: v == 0)

    for group in ("code", "edit"):
        goal(f"int4 >= 2.0x target-only on {group}", speedup("specchat int4 adaptive", group), lambda v: v >= 2.0)
    goal("sibling >= 1.5x target-only", speedup("specchat sibling adaptive"), lambda v: v >= 1.5)
    for group in ("edit", "passage"):
        goal(f"ngram >= 2.0x on {group}", speedup("specchat ngram adaptive", group), lambda v: v >= 2.0)
    ngram = configs.get("specchat ngram adaptive")
    if ngram is not None:
        worst = min((g["speedup"] for g in ngram["groups"].values() if g["speedup"] is not None), default=None)
        goal("ngram never below 0.95x on any group", worst, lambda v: v >= 0.95)
    for drafter, entry in summary["vs_transformers"].items():
        if drafter != "none":
            goal(f"{drafter} >= 1.2x transformers' call", entry["overall"], lambda v: v >= 1.2)
    for entry in configs.values():  # the page's prediction must hold, drafter by drafter and group by group
        if entry["engine"] == SPECCHAT and entry["gamma"] == "adaptive" and entry.get("measure_speedup") is not False:
            for group, block in entry["groups"].items():
                goal(f"{entry['drafter']} on {group}: measured ÷ predicted (measured costs) in 0.9–1.1",
                     block.get("measured_over_predicted"), lambda v: 0.9 <= v <= 1.1)
    # adaptive γ must make a losing drafter cheap (at most 3 %) and, where speculation wins, keep
    # within 3 % of the best fixed γ (same prompts: the sweep's)
    for entry in configs.values():
        if entry["engine"] != SPECCHAT or entry["gamma"] != "adaptive" or entry.get("measure_speedup") is False:
            continue
        fixed = [e for e in configs.values() if e["engine"] == SPECCHAT and e["drafter"] == entry["drafter"]
                 and e["gamma"].isdigit() and e.get("measure_speedup") is not False]
        for group, block in entry["groups"].items():
            goal(f"{entry['drafter']} adaptive on {group} >= 0.97x target-only", block.get("speedup"),
                 lambda v: v >= 0.97)
            best = max((e["groups"].get(group, {}).get("speedup") or 0.0 for e in fixed), default=0.0)
            if best > 1.0 and block.get("speedup") is not None:
                goal(f"{entry['drafter']} adaptive on {group} >= 0.97x its best fixed γ", block["speedup"] / best,
                     lambda v: v >= 0.97)
    # specchat's best must beat transformers' best on every group
    for group, entry in summary.get("best_vs_best", {}).items():
        if group != "all":
            goal(f"best specchat >= 1.2x best transformers on {group}", entry["ratio"], lambda v: v >= 1.2)
    # on the llama.cpp runtime, speculation must pay against llama.cpp's plain decode and its own speculation
    for group, entry in summary.get("vs_llamacpp", {}).items():
        if group == "all":
            continue
        need = 1.5 if group in ("edit", "passage") else 1.0
        goal(f"best specchat >= {need}x llama.cpp plain on {group}", entry["over_plain"], lambda v, n=need: v >= n)
        goal(f"best specchat >= 1.2x llama.cpp speculative on {group}", entry.get("over_speculative"),
             lambda v: v >= 1.2)
    # the hybrid must beat its parts where its lookup half pays, and not lose to its model half on code
    part = summary.get("hybrid_part")

    def ratio(group: str, other: str) -> float | None:
        a, b = speedup("specchat hybrid adaptive", group), speedup(f"specchat {other} adaptive", group)
        return a / b if a and b else None

    for group in ("edit", "passage"):
        for other in ("ngram", part):
            if other:
                goal(f"hybrid >= 1.2x {other} on {group}", ratio(group, other), lambda v: v >= 1.2)
    if part:
        goal(f"hybrid >= 0.97x {part} on code", ratio("code", part), lambda v: v >= 0.97)
    for drafter, entry in summary.get("multi_turn", {}).items():
        last = entry["turns"][-1] if entry["turns"] else "?"
        goal(f"{drafter}: TTFT turn {last} <= 1.3x turn 1", entry["last_over_first"], lambda v: v <= 1.3)
    return goals


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def format_table(summary: dict) -> str:
    """The terminal table: one row per configuration (medians), then speedup by group, the
    ratio to transformers and, when measured, what the timing rounds cost."""
    w = max([30] + [len(name) for name in summary["configs"]])
    head = (f"{'configuration':<{w}} {'tok/s':>6} {'e2e':>6} {'speedup':>7} {'same-run':>8} {'pred':>5} {'α':>5} {'tok/rnd':>7} "
            f"{'meas/pred':>9} {'c':>5} {'textbook S':>10} {'meas/txt':>8} {'timing':>6} {'TTFT s':>6} {'peak MB':>7} {'same':>5}")
    lines = [head, "-" * len(head)]
    for name, e in summary["configs"].items():
        o = e["overall"]
        lines.append(
            f"{name:<{w}} {_fmt(o['decode_tokens_per_s']):>6} {_fmt(o['e2e_tokens_per_s']):>6} {_fmt(o['speedup']):>7} "
            f"{_fmt(o.get('speedup_same_run')):>8} {_fmt(o.get('speedup_predicted_same_run')):>5} {_fmt(o['alpha']):>5} "
            f"{_fmt(o['tokens_per_round']):>7} {_fmt(o.get('measured_over_predicted')):>9} "
            f"{_fmt(o['cost_ratio'], '.3f'):>5} {_fmt(o.get('textbook_speedup')):>10} "
            f"{_fmt(o.get('measured_over_textbook')):>8} {_fmt(o.get('num_timing_rounds'), '.0f'):>6} {_fmt(o['ttft_s']):>6} "
            f"{_fmt(o['peak_mem_mb'], '.0f'):>7} {e['identical']:>2}/{e['runs']:<2}"
        )
    lines.append("tok/s: decode tokens/s (prefill excluded) · e2e: tokens/s from the call (prefill included) · "
                 "speedup: decode tok/s ÷ specchat target-only, same prompt, back to back · same-run: speedup "
                 "measured in the run itself (tokens × t₁ / decode time, t₁ timed by its target-only rounds) · "
                 "pred: the speedup predicted from the run's own α and measured costs (t₁, d, v(n)), as the app "
                 "shows it · "
                 "α, tok/rnd (tokens per round), meas/pred: same-run ÷ pred, both timed in the run (the "
                 "page's two numbers) · c (drafter time per draft ÷ target time per token), textbook S "
                 "(Leviathan's S over the rounds run, a verify pass costing one target step), meas/txt: "
                 "speedup ÷ textbook S; specchat only · timing: timing rounds per run · TTFT: seconds to the first token · "
                 "peak MB: the process's peak memory during the run, all loaded models included · same: greedy "
                 "replies identical to target-only / runs")
    lines += ["", "spread over runs (prompts × repeats): min / median / max",
              f"{'configuration':<{w}} {'decode tok/s':>20} {'speedup':>20}"]
    for name, e in summary["configs"].items():
        cells = [("-" if e.get("spread", {}).get(f) is None else " / ".join(f"{v:.2f}" for v in e["spread"][f]))
                 for f in ("decode_tokens_per_s", "speedup")]
        lines.append(f"{name:<{w}} {cells[0]:>20} {cells[1]:>20}")
    lines += ["", "speedup over specchat target-only, median by group", f"{'configuration':<{w}} "
              + " ".join(f"{g:>8}" for g in GROUPS)]
    for name, e in summary["configs"].items():
        lines.append(f"{name:<{w}} " + " ".join(f"{_fmt(e['groups'].get(g, {}).get('speedup')):>8}" for g in GROUPS))
    if summary["vs_transformers"]:
        lines += ["", "specchat (adaptive γ) ÷ transformers' matching call, decode tokens/s, median",
                  f"{'drafter':<{w}} {'all':>8} " + " ".join(f"{g:>8}" for g in GROUPS)]
        for drafter, e in summary["vs_transformers"].items():
            lines.append(f"{drafter:<{w}} {_fmt(e['overall']):>8} "
                         + " ".join(f"{_fmt(e['groups'].get(g)):>8}" for g in GROUPS))
    if summary.get("best_vs_best"):
        lines += ["", "best specchat drafter ÷ best transformers assisted configuration, median decode tokens/s",
                  f"{'group':<8} {'specchat best':<{w}} {'tok/s':>6}  {'transformers best':<{w}} {'tok/s':>6} {'ratio':>6}"]
        for group, e in summary["best_vs_best"].items():
            lines.append(f"{group:<8} {e['specchat']:<{w}} {e['specchat_tokens_per_s']:>6.2f}  "
                         f"{e['transformers']:<{w}} {e['transformers_tokens_per_s']:>6.2f} {e['ratio']:>6.2f}")
    if summary.get("vs_llamacpp"):
        lines += ["", "best specchat drafter on llama.cpp ÷ llama.cpp itself (same GGUF, same threads), median decode tokens/s",
                  f"{'group':<8} {'specchat best':<{w}} {'tok/s':>6} {'plain':>6} {'ratio':>6}  "
                  f"{'llama.cpp speculative':<{w}} {'tok/s':>6} {'ratio':>6}"]
        for group, e in summary["vs_llamacpp"].items():
            lines.append(f"{group:<8} {e['specchat']:<{w}} {e['specchat_tokens_per_s']:>6.2f} {e['plain_tokens_per_s']:>6.2f} "
                         f"{e['over_plain']:>6.2f}  {e.get('speculative', '-'):<{w}} "
                         f"{_fmt(e.get('speculative_tokens_per_s')):>6} {_fmt(e.get('over_speculative')):>6}")
    if summary.get("multi_turn"):
        lines += ["", "multi-turn: time to first token per turn, s (prompt tokens prefilled / in the prompt), median"]
        for drafter, e in summary["multi_turn"].items():
            cells = [f"{(ms or 0) / 1000:.2f} ({p}/{n})" for ms, p, n in
                     zip(e["ttft_ms"], e["prefill_tokens"], e["num_prompt_tokens"])]
            lines.append(f"{drafter:<13} " + "  ".join(cells) + f"   last ÷ first {_fmt(e['last_over_first'])}")
    if summary.get("timing_cost"):
        lines += ["", "timing rounds: decode tokens/s with ÷ without − 1, median over prompts, % "
                  "(negative: the timing rounds cost throughput)",
                  f"{'drafter':<{w}} {'all':>8} " + " ".join(f"{g:>8}" for g in GROUPS) + f" {'pairs':>6}"]
        for key, e in summary["timing_cost"].items():
            lines.append(f"{key:<{w}} {_fmt(e['percent'], '+.1f'):>8} "
                         + " ".join(f"{_fmt(e['groups'].get(g), '+.1f'):>8}" for g in GROUPS) + f" {e['pairs']:>6}")
    return "\n".join(lines)


def machine_description(service: ChatService) -> dict:
    """What the numbers came from: CPU / GPU, threads, versions, models and dtype."""
    import torch
    import transformers

    info = {
        "platform": platform.platform(),
        "processor": cpu_name(),
        "cpu_count": __import__("os").cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(service.device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "target": service.target_name,
        "dtype": str(service.dtype).replace("torch.", ""),
        "runtime": describe_service(service) if service.engine is not None else None,
    }
    if service.runtime == "llamacpp":
        from specchat.runtimes.llama_api import library_version

        info["llama_cpp_library"] = library_version()  # the one in use: xllamacpp or llama-cpp-python
    if service.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(service.device)
    return info


def write_outputs(results: list[RunResult], summary: dict, meta: dict, *, json_path: Path | None,
                  csv_path: Path | None) -> None:
    """JSON (meta, summary, goals, every run) and an optional CSV of the runs."""
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "meta": meta, "summary": summary,
            "goals": [{"goal": g, "value": v, "met": m} for g, v, m in check_goals(summary)],
            "runs": [asdict(r) for r in results],
        }
        json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        rows = [asdict(r) for r in results]
        for row in rows:
            row["token_ids"] = " ".join(map(str, row["token_ids"]))
            row["gammas"] = " ".join(map(str, row["gammas"]))
        with csv_path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
