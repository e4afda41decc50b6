"""The speed benchmark's runner: specchat's drafters side by side with transformers' assisted generation.

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
- ``measured_over_predicted`` (specchat runs): ``speedup_same_run`` ÷ ``speedup_predicted_same_run``,
  the measured-cost S(γ) the page shows against what the same run measured: both use the same
  t₁, so the ratio checks the model (E[N] at the measured α, and T(γ) = γ·d + v(γ + 1) against
  the round times), with no timing from another moment in it;
- α, tokens per round, c and the textbook S(γ) (specchat runs only; transformers exposes no
  per-round acceptance): ``textbook_speedup`` is Leviathan et al. 2023, Theorem 3.8, summed over
  the rounds actually run, S = Σ_r E[N](α, γ_r) / Σ_r (γ_r·c + 1), which assumes a verify pass
  costs one target step whatever its length; c = drafter time per drafted token ÷ target-only
  time per token (same prompt and repeat); ``measured_over_textbook`` = ``speedup`` ÷ it;
- ``peak_mem_mb``: the process's peak resident memory during the run on CPU (all loaded models
  included, sampled every 10 ms), or the peak CUDA memory allocated on a GPU;
- ``identical``: greedy output equals specchat target-only output token for token (sampled
  runs, ``--temperature`` > 0, differ by design: the sampled replies follow the same distribution,
  which ``python -m specchat audit`` and the tests check, not the same tokens).

What the timing rounds cost (``timing_cost=True`` in :func:`build_configs`, ``--timing-cost``):
each drafter also runs without them (``measure_speedup=False``, "… (no timing rounds)"),
interleaved with the rest. The multi-turn scenario (:func:`run_multi_turn`) records the time
to first token per turn of a scripted conversation. Medians, tables, goals and the output
files: :mod:`specchat.commands.bench.report`; the command line: :mod:`specchat.commands.bench.cli`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from specchat.commands.bench.peers import (  # noqa: F401 (re-exported: the runners of the peers)
    LLAMACPP,
    PROMPT_LOOKUP_NUM_TOKENS,
    SPECCHAT,
    TRANSFORMERS,
    LlamaServer,
    _PeakMemory,
    close_peers,
    llamacpp_configs,
    run_llamacpp,
    run_transformers,
    transformers_kwargs,
)
from specchat.core import theory
from specchat.core.config import GenerationConfig
from specchat.core.events import TokenEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds

GROUPS = ("code", "edit", "passage", "chat")
NO_TIMING_SUFFIX = " (no timing rounds)"


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
        text = resources.files("specchat.commands.bench").joinpath("bench_prompts.yaml").read_text(encoding="utf-8")
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
        if self.engine == LLAMACPP:
            return {"none": "llama.cpp plain decode", "ngram": f"llama.cpp prompt lookup k={PROMPT_LOOKUP_NUM_TOKENS}",
                    "sibling": f"llama-server draft model n-max={LlamaServer.draft_n_max}"}[self.drafter]
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
    # specchat only: target-only rounds adaptive γ chose because no γ paid (drafting paused)
    num_paused_rounds: int | None = None
    # filled in against the target-only run of the same prompt and repeat
    speedup: float | None = None
    cost_ratio: float | None = None
    textbook_speedup: float | None = None
    measured_over_textbook: float | None = None
    # the same run's measured speedup ÷ its measured-cost prediction (the page's two numbers)
    measured_over_predicted: float | None = None
    identical: bool | None = None
    # specchat only: what the page and the CLI would print about this reply that its own figures
    # contradict (specchat.core.evidence.contradictions; [] when none)
    contradictions: list[str] = field(default_factory=list)


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
        num_timing_rounds=metrics.num_timing_rounds, num_paused_rounds=metrics.num_paused_rounds,
        target_step_ms=metrics.target_step_ms,
        speedup_same_run=metrics.measured_speedup,
        speedup_predicted_same_run=metrics.predicted_speedup,
        measured_over_predicted=(metrics.measured_speedup / metrics.predicted_speedup
                                 if metrics.measured_speedup and metrics.predicted_speedup else None),
        contradictions=printed_contradictions(config.drafter, metrics),
    )


def printed_contradictions(drafter: str, metrics: SpeculationMetrics) -> list[str]:
    """What the CLI's summary line, the page's reply summary and the ledger's words would say
    about this reply that its own figures contradict (:func:`specchat.core.evidence.contradictions`)."""
    from specchat.commands.generate import summary_line
    from specchat.core import evidence
    from specchat.ui.html.ledger import worth_words
    from specchat.ui.html.render import reply_summary

    texts = [summary_line(drafter, metrics, metrics.done), reply_summary(metrics),
             worth_words(drafter, metrics.acceptance_rate, metrics.cost_ratio, metrics)]
    return [claim for text in texts for claim in evidence.contradictions(text, metrics)]


def _fill_relative(results: list[RunResult]) -> None:
    """Speedup, c, the textbook S and identical, against the target-only run of the same prompt;
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
            r.textbook_speedup = tokens / steps
            if r.speedup is not None:
                r.measured_over_textbook = r.speedup / r.textbook_speedup


# ---- the multi-turn scenario ----------------------------------------------------------------
def load_chat_script(path: str | Path | None = None) -> list[str]:
    """The multi-turn scenario's messages (default: the shipped 6-turn coding conversation,
    ``bench_chat.json``).

    Raises:
        ValueError: as :func:`specchat.commands.script.load_script`.
    """
    from specchat.commands.script import load_script

    if path is None:
        with resources.as_file(resources.files("specchat.commands.bench").joinpath("bench_chat.json")) as shipped:
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
    from specchat.conversation import ReplySettings

    say = progress or (lambda _: None)
    rows = []
    for repeat in range(repeats):
        for drafter in dict.fromkeys(["none", *drafters]):
            service.forget_prefix()  # every play starts cold: turn 1 prefills the whole prompt
            settings = ReplySettings(drafter, 12, True, temperature, 1.0, max_new_tokens)
            for t in play_script(service, messages, settings=settings, seed=repeat):
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


# ---- the whole benchmark ------------------------------------------------------------------
def build_configs(
    drafters: Iterable[str], *, transformers: bool, gammas: Iterable[int | None], max_gamma: int,
    timing_cost: bool = False, hf_assistant_tokens: Iterable[int] = (), llamacpp: bool = False,
) -> list[BenchConfig]:
    """specchat none + each drafter at each γ (None = adaptive) + transformers' counterparts
    (with ``hf_assistant_tokens``, each model drafter's assistant also with that many tokens per
    round, schedule "constant": transformers tuned) + with ``llamacpp``, llama.cpp's own plain
    decode and prompt lookup (:func:`specchat.commands.bench.peers.llamacpp_configs`).

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
    if llamacpp:
        configs += [BenchConfig(LLAMACPP, d) for d in llamacpp_configs(drafters)]
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
    runners = {SPECCHAT: run_specchat, TRANSFORMERS: run_transformers, LLAMACPP: run_llamacpp}
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
                    if config.engine != SPECCHAT
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

