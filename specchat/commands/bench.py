"""The speed benchmark: specchat's drafters side by side with transformers' assisted generation.

``python -m specchat bench`` runs every configuration on a fixed prompt set
(``bench_prompts.yaml``: code from scratch, code edits, passage questions, open chat) in one
process, interleaved (prompt by prompt, the configurations in a rotating order), so machine
drift hits all of them alike. It is a benchmark, not a test: the numbers depend on the machine.

What is measured per run (one configuration, one prompt, one repeat), all wall-clock:

- ``ttft_s``: from the call to the first streamed token (prefill plus the first round);
- ``e2e_tokens_per_s``: new tokens / time from the call to the last token (prefill included);
- ``prefill_s``: specchat's prefill of the prompt (target and drafter), which speculation does
  not speed up. transformers prefills inside its first round, so its prefill is taken to be
  specchat's for the same prompt, models and drafter (same forward passes over the same tokens);
- ``decode_tokens_per_s``: new tokens / (total time − prefill_s), the rate the app shows;
- ``speedup``: decode tokens/s ÷ specchat target-only decode tokens/s on the same prompt and
  repeat (back to back: the target-only run is a separate run a moment earlier or later);
- ``speedup_same_run`` (specchat runs): the speedup the reply measured itself, as the app and
  the CLI show it: committed tokens × t₁ / decode time, where t₁ is the target-only step timed
  in the same run (:attr:`SpeculationMetrics.measured_speedup`). specchat's runs use
  ``GenerationConfig.measure_speedup``, so the engine makes some rounds target-only to time t₁
  (``num_timing_rounds``; :func:`specchat.core.costs.timing_rounds_due`); None when no round of the
  run drafted nothing (too short to reach a timing round, or run without them);
- ``speedup_predicted_same_run`` (specchat runs): the speedup predicted from the same run's α
  and measured costs (t₁, drafting time d, verify time v(n)), as the app and the CLI show it
  (:attr:`SpeculationMetrics.predicted_speedup`); None without a drafted round and t₁;
- α, tokens per round, c and the predicted S(γ) (specchat runs only; transformers exposes no
  per-round acceptance). The prediction is Leviathan et al. 2023, Theorem 3.8, summed over the
  rounds actually run: S = Σ_r E[N](α, γ_r) / Σ_r (γ_r·c + 1), which for a fixed γ is S(γ);
  c = drafter time per drafted token ÷ target-only time per token (same prompt and repeat);
- ``peak_mem_mb``: the process's peak resident memory during the run on CPU (all loaded models
  included, sampled every 10 ms), or the peak CUDA memory allocated on a GPU;
- ``identical``: greedy output equals specchat target-only output token for token (sampled
  runs, ``--temperature`` > 0, differ by design: the sampled replies follow the same distribution,
  which ``python -m specchat audit`` and the tests check, not the same tokens).

What the timing rounds cost (``timing_cost=True`` in :func:`build_configs`, ``--timing-cost``):
each drafter also runs without them (``measure_speedup=False``, "… (no timing rounds)"),
interleaved with the rest; :func:`summarize` reports per drafter the median over prompts (and
repeats) of (decode tokens/s with timing rounds ÷ without) − 1, in percent: negative when the
timing rounds slow decoding down.

Results are medians over prompts and repeats. Output (``python -m specchat bench --out DIR``,
default ``bench-results/``): a table on the terminal, ``bench.json``, an optional ``bench.csv``,
and a plotly chart (``bench.html``, and ``bench.png`` when kaleido can start a Chrome/Chromium).
"""

from __future__ import annotations

import csv
import json
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from specchat.analysis.calibrate import cpu_name
from specchat.core import theory
from specchat.core.config import GenerationConfig
from specchat.core.events import TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds

GROUPS = ("code", "edit", "passage", "chat")
SPECCHAT, TRANSFORMERS = "specchat", "transformers"
# Where ``python -m specchat bench`` writes (relative to the current directory) unless --out says
# otherwise; the committed results in assets/ are written only with an explicit ``--out assets``.
DEFAULT_OUT = "bench-results"
OUTPUT_NAMES = {"json": "bench.json", "csv": "bench.csv", "html": "bench.html", "png": "bench.png"}
NO_TIMING_SUFFIX = " (no timing rounds)"
# The n-gram drafter's transformers counterpart: prompt lookup decoding with its documented
# example setting (transformers' docs and MODELS.md use 10).
PROMPT_LOOKUP_NUM_TOKENS = 10


# ---- prompts ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchPrompt:
    """One chat message of the prompt set; ``group`` is one of :data:`GROUPS`."""

    id: str
    group: str
    message: str


def load_prompts(path: str | Path | None = None) -> list[BenchPrompt]:
    """Read a prompt set (default: the shipped ``bench_prompts.yaml``).

    Format: ``groups: {code: [{id, message}, …], edit: …, passage: …, chat: …}``.

    Raises:
        ValueError: unreadable YAML, an unknown group, a prompt without an id or a message,
            or a duplicate id (the message names the place).
    """
    if path is None:
        text = resources.files("specchat.commands").joinpath("bench_prompts.yaml").read_text(encoding="utf-8")
        source = "bench_prompts.yaml"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the prompt set {path}: {exc}") from exc
        source = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML: {exc}") from exc
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"{source}: needs a top-level 'groups:' mapping of {', '.join(GROUPS)}")
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for group, items in groups.items():
        if group not in GROUPS:
            raise ValueError(f"{source}: groups.{group}: unknown group; allowed: {', '.join(GROUPS)}")
        if items is not None and not isinstance(items, list):
            raise ValueError(f"{source}: groups.{group}: needs a list of prompts")
        for i, item in enumerate(items or []):
            where = f"{source}: groups.{group}[{i}]"
            ident = item.get("id") if isinstance(item, dict) else None
            message = item.get("message") if isinstance(item, dict) else None
            if isinstance(ident, bool) or not isinstance(ident, (str, int)) or not str(ident).strip():
                raise ValueError(f"{where}: each prompt needs an 'id' (text or a number)")
            if not isinstance(message, str) or not message.strip():
                raise ValueError(f"{where}: each prompt needs a non-empty text 'message'")
            ident = str(ident).strip()
            if ident in seen:
                raise ValueError(f"{where}: duplicate id {ident!r}")
            seen.add(ident)
            prompts.append(BenchPrompt(ident, group, message))
    if not prompts:
        raise ValueError(f"{source}: the prompt set is empty")
    return prompts


# ---- configurations and runs --------------------------------------------------------------
@dataclass(frozen=True)
class BenchConfig:
    """One thing to time: an engine, a drafter kind and, for specchat, γ.

    ``num_speculative_tokens`` is a fixed γ, or None for adaptive γ (up to ``max_gamma``).
    ``measure_speedup`` (specchat only) is ``GenerationConfig.measure_speedup``: timing rounds
    that measure t₁ in the same run, as the app and the CLI do; False only to measure what they
    cost (the name then ends in " (no timing rounds)").
    """

    engine: str
    drafter: str
    num_speculative_tokens: int | None = None
    max_gamma: int = 8
    measure_speedup: bool = True

    @property
    def name(self) -> str:
        if self.engine == TRANSFORMERS:
            tuned = "" if self.num_speculative_tokens is None else f" k={self.num_speculative_tokens}"
            return f"transformers {self.drafter}{tuned}"
        if self.drafter == "none":
            return "specchat none"
        gamma = "adaptive" if self.num_speculative_tokens is None else f"γ={self.num_speculative_tokens}"
        return f"specchat {self.drafter} {gamma}" + ("" if self.measure_speedup else NO_TIMING_SUFFIX)


@dataclass
class RunResult:
    """One timed run (see the module docstring for each measure)."""

    config: str
    engine: str
    drafter: str
    gamma: str
    prompt: str
    group: str
    repeat: int
    num_prompt_tokens: int
    num_tokens: int
    ttft_s: float
    total_s: float
    e2e_tokens_per_s: float
    prefill_s: float | None
    decode_tokens_per_s: float | None
    num_rounds: int
    tokens_per_round: float
    peak_mem_mb: float
    token_ids: list[int] = field(repr=False)
    alpha: float | None = None
    mean_gamma: float | None = None
    draft_ms_per_token: float | None = None
    gammas: list[int] = field(default_factory=list, repr=False)
    # specchat only: timing rounds on (GenerationConfig.measure_speedup), how many ran, the t₁
    # they timed (ms) and the speedup measured in the same run (tokens × t₁ / decode time)
    measure_speedup: bool | None = None
    num_timing_rounds: int | None = None
    target_step_ms: float | None = None
    speedup_same_run: float | None = None
    # and the speedup predicted from the same run's α and measured costs (t₁, d, v(n)), as the
    # app and the CLI show it (SpeculationMetrics.predicted_speedup)
    speedup_predicted_same_run: float | None = None
    # filled in against the target-only run of the same prompt and repeat
    speedup: float | None = None
    cost_ratio: float | None = None
    predicted_speedup: float | None = None
    measured_over_predicted: float | None = None
    identical: bool | None = None


class _PeakMemory:
    """Peak memory during a block: CUDA allocated (GPU) or process RSS sampled every 10 ms."""

    def __init__(self, device):
        self.device = device
        self.peak_mb = 0.0
        self._stop = threading.Event()

    def __enter__(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        import psutil

        process = psutil.Process()
        self.peak_mb = process.memory_info().rss / 2**20

        def sample():
            while not self._stop.wait(0.01):
                self.peak_mb = max(self.peak_mb, process.memory_info().rss / 2**20)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import torch

        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self._stop.set()
            self._thread.join()
        return False


def run_specchat(service, prompt_ids: list[int], config: BenchConfig, max_new_tokens: int,
                 temperature: float = 0.0, seed: int = 0) -> dict:
    """One generation with specchat's engine (greedy, or sampled at ``temperature`` with
    ``seed``); raw measures for a :class:`RunResult`.

    With ``config.measure_speedup`` (the default, as in the app and the CLI) the engine inserts
    timing rounds and the run measures its own speedup (``speedup_same_run``)."""
    gamma = config.num_speculative_tokens or config.max_gamma
    gen_config = GenerationConfig(
        num_speculative_tokens=gamma, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
        adaptive_gamma=config.num_speculative_tokens is None, measure_speedup=config.measure_speedup,
    )
    metrics = SpeculationMetrics()  # α, tokens per round, mean γ: the numbers the app shows
    first_s = None
    with _PeakMemory(service.device) as memory:
        t0 = time.perf_counter()
        for event in service.generate(prompt_ids, drafter=config.drafter, config=gen_config):
            metrics.update(event)
            if first_s is None and isinstance(event, TokenEvent):
                first_s = time.perf_counter() - t0
        total_s = time.perf_counter() - t0
    done, rounds = metrics.done, metrics.rounds
    tokens, prefill_s = list(done.token_ids), done.prefill_ms / 1000
    drafted = metrics.num_drafted
    return dict(
        num_tokens=len(tokens), token_ids=tokens, ttft_s=first_s or total_s, total_s=total_s,
        e2e_tokens_per_s=len(tokens) / total_s, prefill_s=prefill_s,
        decode_tokens_per_s=len(tokens) / (total_s - prefill_s) if total_s > prefill_s else None,
        num_rounds=metrics.num_rounds, tokens_per_round=metrics.mean_tokens_per_round or 0.0,
        peak_mem_mb=memory.peak_mb,
        alpha=metrics.acceptance_rate,
        mean_gamma=metrics.mean_num_speculative_tokens,
        draft_ms_per_token=sum(r.draft_ms for r in rounds) / drafted if drafted else None,
        gammas=[r.num_drafted for r in rounds],
        measure_speedup=config.measure_speedup,
        num_timing_rounds=metrics.num_timing_rounds,
        target_step_ms=metrics.target_step_ms,
        speedup_same_run=metrics.measured_speedup,
        speedup_predicted_same_run=metrics.predicted_speedup,
    )


class _ChunkClock:
    """A transformers streamer that only records when each chunk of new tokens arrives."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.times: list[float] = []
        self.sizes: list[int] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate() first puts the prompt
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter() - self.t0)
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


def transformers_kwargs(service, drafter: str) -> dict:
    """The ``generate`` arguments of transformers' counterpart of a specchat drafter.

    none → plain greedy; sibling / int4 / sibling-int4 → ``assistant_model=`` the same loaded
    drafter model (transformers' defaults: 20 assistant tokens with its confidence threshold);
    ngram → ``prompt_lookup_num_tokens=10``.
    """
    if drafter == "none":
        return {}
    if drafter == "ngram":
        return {"prompt_lookup_num_tokens": PROMPT_LOOKUP_NUM_TOKENS}
    return {"assistant_model": service.prepare_drafter(drafter).model}


def run_transformers(service, prompt_ids: list[int], config: BenchConfig, max_new_tokens: int,
                     temperature: float = 0.0, seed: int = 0) -> dict:
    """One ``target_model.generate(...)`` call on the same loaded models (greedy, or sampled at
    ``temperature`` with torch's seed set to ``seed``)."""
    import torch
    from transformers import GenerationConfig as HFGenerationConfig

    engine = service.engine
    eos = sorted(engine.eos_token_ids)
    # an explicit config: greedy, no repetition penalty or sampling defaults from the model files
    kwargs = transformers_kwargs(service, config.drafter)
    sampled = temperature > 0
    gen_config = HFGenerationConfig(
        do_sample=sampled, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos[0],
        prompt_lookup_num_tokens=kwargs.pop("prompt_lookup_num_tokens", None),
        **({"temperature": temperature, "top_k": 0, "top_p": 1.0} if sampled else {}),
    )
    if sampled:
        torch.manual_seed(seed)
    if config.num_speculative_tokens is not None and "assistant_model" in kwargs:
        # tuned: a fixed number of assistant tokens per round (transformers' default is 20 with
        # its "heuristic" schedule, carried over between calls, and a confidence threshold of 0.4)
        gen_config.num_assistant_tokens = config.num_speculative_tokens
        gen_config.num_assistant_tokens_schedule = "constant"
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=engine.device)
    with _PeakMemory(service.device) as memory:
        clock = _ChunkClock()
        with torch.inference_mode():
            out = engine.target_model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_config,
                streamer=clock, **kwargs,
            )
        total_s = time.perf_counter() - clock.t0
    tokens = out[0, len(prompt_ids):].tolist()
    # generate() stops after an EOS but may pad nothing; cut at the first EOS like specchat
    for i, token in enumerate(tokens):
        if token in engine.eos_token_ids:
            tokens = tokens[: i + 1]
            break
    return dict(
        num_tokens=len(tokens), token_ids=tokens, ttft_s=clock.times[0] if clock.times else total_s,
        total_s=total_s, e2e_tokens_per_s=len(tokens) / total_s,
        prefill_s=None, decode_tokens_per_s=None,  # set from the paired specchat run (_fill_relative)
        num_rounds=len(clock.sizes), tokens_per_round=len(tokens) / max(len(clock.sizes), 1),
        peak_mem_mb=memory.peak_mb,
    )


def _fill_relative(results: list[RunResult]) -> None:
    """Speedup, c, predicted S and identical, against the target-only run of the same prompt;
    transformers' prefill and decode rate from the specchat run with the same drafter."""
    base = {(r.prompt, r.repeat): r for r in results if r.engine == SPECCHAT and r.drafter == "none"}
    ours = {(r.drafter, r.prompt, r.repeat): r for r in results if r.engine == SPECCHAT}
    for r in results:
        pair = ours.get((r.drafter, r.prompt, r.repeat))
        if r.engine == TRANSFORMERS and pair is not None and r.total_s > pair.prefill_s:
            r.prefill_s = pair.prefill_s
            r.decode_tokens_per_s = r.num_tokens / (r.total_s - r.prefill_s)
    for r in results:
        b = base.get((r.prompt, r.repeat))
        if b is None:
            continue
        r.identical = r.token_ids == b.token_ids
        if r.decode_tokens_per_s and b.decode_tokens_per_s:
            r.speedup = r.decode_tokens_per_s / b.decode_tokens_per_s
        if r.engine != SPECCHAT or r.drafter == "none" or not b.decode_tokens_per_s:
            continue
        target_ms = 1000.0 / b.decode_tokens_per_s
        r.cost_ratio = (r.draft_ms_per_token or 0.0) / target_ms
        if r.alpha is not None and r.gammas:
            tokens = sum(theory.expected_tokens_per_round(r.alpha, g) for g in r.gammas)
            steps = sum(g * r.cost_ratio + 1.0 for g in r.gammas)
            r.predicted_speedup = tokens / steps
            if r.speedup is not None:
                r.measured_over_predicted = r.speedup / r.predicted_speedup


# ---- the multi-turn scenario ----------------------------------------------------------------
def load_chat_script(path: str | Path | None = None) -> list[str]:
    """The multi-turn scenario's messages (default: the shipped 6-turn coding conversation,
    ``bench_chat.json``).

    Raises:
        ValueError: as :func:`specchat.commands.script.load_script`.
    """
    from specchat.commands.script import load_script

    if path is None:
        with resources.as_file(resources.files("specchat.commands").joinpath("bench_chat.json")) as shipped:
            return load_script(str(shipped))
    return load_script(str(path))


def run_multi_turn(
    service, messages: list[str], drafters: Iterable[str], *, max_new_tokens: int, repeats: int = 1,
    temperature: float = 0.0, progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Play the conversation with target-only and each drafter (adaptive γ ≤ 12, as the app),
    ``repeats`` times, each play starting with no kept cache; one row per turn.

    Row: ``drafter``, ``repeat``, ``turn``, ``ttft_ms`` (message sent to first token),
    ``prefill_tokens`` (prompt tokens this turn prefilled; the rest came from the conversation's
    kept cache), ``num_prompt_tokens``, ``prefill_ms``, ``num_tokens``, ``decode_tokens_per_s``.
    """
    from specchat.commands.script import play_script

    say = progress or (lambda _: None)
    rows = []
    for repeat in range(repeats):
        for drafter in dict.fromkeys(["none", *drafters]):
            service.forget_prefix()  # every play starts cold: turn 1 prefills the whole prompt
            config = GenerationConfig(num_speculative_tokens=12, adaptive_gamma=True, max_new_tokens=max_new_tokens,
                                      temperature=temperature, seed=repeat, measure_speedup=True)
            for t in play_script(service, messages, drafter=drafter, config_for_turn=lambda turn, config=config: config):
                r, done = t.record, t.done
                rows.append({
                    "drafter": drafter, "repeat": repeat, "turn": r["turn"], "ttft_ms": r["ttft_ms"],
                    "prefill_tokens": r["prefill_tokens"], "num_prompt_tokens": r["num_prompt_tokens"],
                    "prefill_ms": r["prefill_ms"], "num_tokens": len(done.token_ids),
                    "decode_tokens_per_s": len(done.token_ids) / (done.decode_ms / 1000) if done.decode_ms > 0 else None,
                })
                say(f"[multi-turn] {drafter:<13} repeat {repeat + 1} turn {r['turn']}: time to first token "
                    f"{(r['ttft_ms'] or 0) / 1000:.2f} s, prefilled {r['prefill_tokens']} of {r['num_prompt_tokens']} tokens")
    return rows


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


# ---- the whole benchmark ------------------------------------------------------------------
def build_configs(
    drafters: Iterable[str], *, transformers: bool, gammas: Iterable[int | None], max_gamma: int,
    timing_cost: bool = False, hf_assistant_tokens: Iterable[int] = (),
) -> list[BenchConfig]:
    """specchat none + each drafter at each γ (None = adaptive) + transformers' counterparts
    (with ``hf_assistant_tokens``, each model drafter's assistant also with that many tokens per
    round, schedule "constant": transformers tuned).

    With ``timing_cost`` each drafter and γ also runs without timing rounds
    (``measure_speedup=False``), right after its configuration with them."""
    configs = [BenchConfig(SPECCHAT, "none")]
    drafters = [d for d in drafters if d != "none"]
    for drafter in drafters:
        for gamma in gammas:
            configs.append(BenchConfig(SPECCHAT, drafter, gamma, max_gamma))
            if timing_cost:
                configs.append(BenchConfig(SPECCHAT, drafter, gamma, max_gamma, measure_speedup=False))
    if transformers:
        configs.append(BenchConfig(TRANSFORMERS, "none"))
        # the hybrid has no transformers counterpart: its model part's row is the comparison
        configs += [BenchConfig(TRANSFORMERS, d) for d in drafters if d != "hybrid"]
        configs += [BenchConfig(TRANSFORMERS, d, k) for d in drafters for k in hf_assistant_tokens
                    if drafter_kinds.get(d).own_model]
    return configs


def run_bench(
    service,
    prompts: list[BenchPrompt],
    configs: list[BenchConfig],
    *,
    max_new_tokens: int,
    repeats: int,
    warmup_tokens: int = 8,
    progress: Callable[[str], None] | None = None,
    temperature: float = 0.0,
) -> list[RunResult]:
    """Run every configuration on every prompt ``repeats`` times, interleaved; return the runs.

    One untimed warm-up generation per configuration comes first (the first forward passes
    of a process are slower). The order of the configurations rotates from prompt to prompt.
    """
    encoded = {p.id: service.encode_chat([], p.message, max_new_tokens)[0] for p in prompts}
    runners = {SPECCHAT: run_specchat, TRANSFORMERS: run_transformers}
    say = progress or (lambda _: None)
    for config in configs:
        say(f"warm-up: {config.name}")
        runners[config.engine](service, encoded[prompts[0].id], config, warmup_tokens)
    results: list[RunResult] = []
    total, done = repeats * len(prompts) * len(configs), 0
    for repeat in range(repeats):
        for i, prompt in enumerate(prompts):
            shift = (i + repeat) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                raw = runners[config.engine](service, encoded[prompt.id], config, max_new_tokens,
                                             temperature=temperature, seed=repeat)
                gamma = "-" if config.drafter == "none" else (
                    ("auto" if config.num_speculative_tokens is None else f"k={config.num_speculative_tokens}")
                    if config.engine == TRANSFORMERS
                    else "adaptive" if config.num_speculative_tokens is None else str(config.num_speculative_tokens)
                )
                results.append(RunResult(
                    config=config.name, engine=config.engine, drafter=config.drafter, gamma=gamma,
                    prompt=prompt.id, group=prompt.group, repeat=repeat,
                    num_prompt_tokens=len(encoded[prompt.id]), **raw,
                ))
                done += 1
                say(f"[{done}/{total}] {prompt.id:<22} {config.name:<30} {raw['num_tokens']:4d} tokens, "
                    f"{raw['e2e_tokens_per_s']:6.2f} tokens/s from the call")
    _fill_relative(results)
    return results


# ---- summaries ----------------------------------------------------------------------------
def _median(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


SUMMARY_FIELDS = (
    "decode_tokens_per_s", "e2e_tokens_per_s", "prefill_s", "speedup", "speedup_same_run", "speedup_predicted_same_run",
    "alpha", "tokens_per_round",
    "cost_ratio", "predicted_speedup", "measured_over_predicted", "ttft_s", "peak_mem_mb", "mean_gamma",
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
                 "runs": len(runs), "identical": sum(bool(r.identical) for r in runs)}
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
            "timing_cost": timing_cost(results)}


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
        def rate(entry, group=group):
            block = entry["overall"] if group == "all" else entry["groups"].get(group, {})
            return block.get("decode_tokens_per_s")

        def best(engine):
            rows = [(rate(e), n) for n, e in configs.items()
                    if e["engine"] == engine and e["drafter"] != "none" and e.get("measure_speedup") is not False
                    and rate(e)]
            return max(rows) if rows else None

        ours, theirs = best(SPECCHAT), best(TRANSFORMERS)
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
    """The summary that :func:`specchat.ui.charts.bench_figure` draws: without the configurations
    that ran without timing rounds (they would be drawn as a second bar of the same drafter)."""
    configs = {n: e for n, e in summary["configs"].items() if e.get("measure_speedup") is not False}
    return summary | {"configs": configs}


def check_goals(summary: dict) -> list[tuple[str, float | None, bool | None]]:
    """Issue 4's and issue 14's goals on the default pair: (goal, measured value, met). None = not
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
    for entry in configs.values():
        if entry["engine"] == SPECCHAT and entry["gamma"] == "adaptive" and entry.get("measure_speedup") is not False:
            goal(f"{entry['drafter']}: measured >= 0.9 of predicted S", entry["overall"]["measured_over_predicted"],
                 lambda v: v >= 0.9)
    # issue 14: ahead of transformers' best, and the hybrid ahead of its parts
    for group, entry in summary.get("best_vs_best", {}).items():
        if group != "all":
            goal(f"best specchat >= 1.2x best transformers on {group}", entry["ratio"], lambda v: v >= 1.2)
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
            f"{'c':>5} {'pred S':>6} {'meas/pred':>9} {'timing':>6} {'TTFT s':>6} {'peak MB':>7} {'same':>5}")
    lines = [head, "-" * len(head)]
    for name, e in summary["configs"].items():
        o = e["overall"]
        lines.append(
            f"{name:<{w}} {_fmt(o['decode_tokens_per_s']):>6} {_fmt(o['e2e_tokens_per_s']):>6} {_fmt(o['speedup']):>7} "
            f"{_fmt(o.get('speedup_same_run')):>8} {_fmt(o.get('speedup_predicted_same_run')):>5} {_fmt(o['alpha']):>5} "
            f"{_fmt(o['tokens_per_round']):>7} {_fmt(o['cost_ratio'], '.3f'):>5} {_fmt(o['predicted_speedup']):>6} "
            f"{_fmt(o['measured_over_predicted']):>9} {_fmt(o.get('num_timing_rounds'), '.0f'):>6} {_fmt(o['ttft_s']):>6} "
            f"{_fmt(o['peak_mem_mb'], '.0f'):>7} {e['identical']:>2}/{e['runs']:<2}"
        )
    lines.append("tok/s: decode tokens/s (prefill excluded) · e2e: tokens/s from the call (prefill included) · "
                 "speedup: decode tok/s ÷ specchat target-only, same prompt, back to back · same-run: speedup "
                 "measured in the run itself (tokens × t₁ / decode time, t₁ timed by its target-only rounds) · "
                 "pred: the speedup predicted from the run's own α and measured costs (t₁, d, v(n)), as the app "
                 "shows it · "
                 "α, tok/rnd (tokens per round), "
                 "c (drafter time per draft ÷ target time per token), pred S (Leviathan S over the rounds run), "
                 "meas/pred: specchat only · timing: timing rounds per run · TTFT: seconds to the first token · "
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


def machine_description(service) -> dict:
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
    }
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
