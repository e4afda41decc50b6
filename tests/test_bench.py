"""The benchmark runs (on SmolLM2-135M, a few tokens) and its prompt set is well formed.

Speed is not asserted here: that is what `python -m specchat bench` itself is for. What is
asserted is what must hold on any machine: greedy speculative output and transformers' greedy
output equal specchat's target-only output, target-only is 1.0× itself, medians are medians.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from specchat.commands.bench import report as bench_report
from specchat.commands.bench import runner as bench
from specchat.commands.cli import build_parser, main
from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind


def test_shipped_prompt_set_has_four_groups_of_at_least_three():
    prompts = bench.load_prompts()
    assert len(prompts) >= 12
    by_group = {g: [p for p in prompts if p.group == g] for g in bench.GROUPS}
    assert all(len(v) >= 3 for v in by_group.values()), {g: len(v) for g, v in by_group.items()}
    assert len({p.id for p in prompts}) == len(prompts)


@pytest.mark.parametrize(
    "text, message",
    [
        ("groups:\n  poetry:\n    - {id: a, message: hi}\n", "unknown group"),
        ("groups:\n  code:\n    - {id: a, message: hi}\n    - {id: a, message: ho}\n", "duplicate id"),
        ("groups:\n  code:\n    - {id: a}\n", "non-empty text 'message'"),
        ("groups:\n  code:\n    - {id: 1, message: hi}\n  chat:\n    - {id: '1', message: ho}\n", "duplicate id '1'"),
        ("groups:\n  code:\n    - {id: [1], message: hi}\n", "needs an 'id'"),
        ("groups:\n  code:\n    - {id: a, message: [1, 2]}\n", "non-empty text 'message'"),
        ("groups:\n  code: 5\n", "needs a list of prompts"),
        ("- just a list\n", "top-level 'groups:'"),
        ("groups: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_prompt_sets_are_refused_with_the_place(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        bench.load_prompts(path)


ROOT = Path(__file__).resolve().parent.parent


def _assets_bytes() -> dict[str, bytes]:
    """Every committed result file in assets/, to check that a bench run leaves them alone."""
    return {p.name: p.read_bytes() for p in sorted((ROOT / "assets").iterdir()) if p.is_file()}


@pytest.mark.slow
def test_bench_runs_end_to_end_on_a_real_small_model(smollm2_dir, tmp_path, capsys):
    assets_before = _assets_bytes()
    out = tmp_path / "out"
    status = main([
        "bench", "--target", str(smollm2_dir), "--drafters", "ngram", "int4", "--groups", "code", "edit",
        "--per-group", "1", "--max-new-tokens", "8", "--gammas", "adaptive", "2", "--dtype", "float32",
        "--out", str(out), "--csv", "--timing-cost", "--repeats", "1", "--hf-assistant-tokens", "4",
    ])
    printed = capsys.readouterr().out
    assert status == 0
    assert "speedup over specchat target-only" in printed and "\ngoals:\n" in printed and "spread over runs" in printed
    # everything went to --out under the fixed names, and nothing in assets/ changed
    assert {"bench.json", "bench.csv", "bench.html"} <= {p.name for p in out.iterdir()}
    assert f"wrote {out / 'bench.json'}" in printed and f"wrote {out / 'bench.html'}" in printed
    assert _assets_bytes() == assets_before
    data = json.loads((out / "bench.json").read_text())
    runs = data["runs"]
    configs = {r["config"] for r in runs}
    assert configs == {
        "specchat none", "specchat ngram adaptive", "specchat int4 adaptive", "specchat ngram γ=2",
        "specchat int4 γ=2", "transformers none", "transformers ngram", "transformers int4",
        "transformers int4 k=4",  # transformers tuned: 4 assistant tokens a round, constant
        "specchat ngram adaptive (no timing rounds)", "specchat int4 adaptive (no timing rounds)",
    }
    assert {r["prompt"] for r in runs} == {"code-lru", "edit-typehints"}
    for r in runs:
        assert 1 <= r["num_tokens"] <= 8 and r["ttft_s"] > 0 and r["peak_mem_mb"] > 0
        if r["engine"] == "specchat" or r["drafter"] == "none":
            # lossless greedy (specchat), and the same greedy target in transformers
            assert r["identical"], (r["config"], r["prompt"])
        if r["config"] == "specchat none":
            assert r["speedup"] == 1.0 and r["tokens_per_round"] == 1.0 and r["alpha"] is None
            # every round is a target-only step: tokens × mean step / Σ round time is just under 1
            assert 0.9 < r["speedup_same_run"] <= 1.0 + 1e-9
        if r["config"].startswith("specchat") and r["drafter"] != "none":
            # an adaptive lookup may draft nothing in 8 tokens (paused, judged for free): no α then
            assert (r["alpha"] is None and r["gamma"] == "adaptive" and r["drafter"] == "ngram") or 0 <= r["alpha"] <= 1
            assert all(g <= (12 if r["gamma"] == "adaptive" else 2) for g in r["gammas"])
        if r["engine"] == "transformers":
            assert r["speedup_same_run"] is None and r["measure_speedup"] is None
    # specchat's runs measure their own speedup: with timing rounds on, round 2 is target-only
    # unless an earlier round drafted nothing; without them only n-gram misses are.
    specchat = [r for r in runs if r["engine"] == "specchat" and r["drafter"] != "none"]
    for r in specchat:
        zeros = r["gammas"].count(0)
        assert (r["speedup_same_run"] is not None) == (zeros > 0), r
        if r["measure_speedup"]:
            assert r["num_timing_rounds"] <= zeros
            if len(r["gammas"]) >= 3:
                assert 0 in r["gammas"][:3], r
        else:
            assert r["config"].endswith("(no timing rounds)") and r["num_timing_rounds"] == 0
        if r["drafter"] == "int4" and r["measure_speedup"] and len(r["gammas"]) >= 3:
            # a model drafter drafts nothing only in a timing round or while paused (no γ paid at the
            # measured costs): round 2 is the schedule's timing round unless drafting paused before it
            # (a paused round is target-only too; the controllers persist across the bench's prompts,
            # so the second prompt may start paused and probe at round 2)
            assert r["num_timing_rounds"] >= 1 or r["num_paused_rounds"] >= 1, r
            assert r["gammas"][2] == 0 or r["num_paused_rounds"] >= 1, r
            assert r["speedup_same_run"] > 0 and r["target_step_ms"] > 0
    timed = [r for r in specchat if r["num_timing_rounds"]]
    assert timed, "no run was long enough to reach a timing round"  # γ=2, 8 tokens: at least 3 rounds
    # the summary is the median of the runs
    tps = [r["decode_tokens_per_s"] for r in runs if r["config"] == "specchat int4 adaptive" and r["decode_tokens_per_s"]]
    summary = data["summary"]["configs"]["specchat int4 adaptive"]["overall"]["decode_tokens_per_s"]
    assert summary == pytest.approx(statistics.median(tps))
    same = [r["speedup"] for r in runs if r["config"] == "specchat int4 adaptive" and r["speedup"] is not None]
    assert data["summary"]["configs"]["specchat int4 adaptive"]["speedup_on_fixed_gamma_prompts"] == pytest.approx(
        statistics.median(same))  # γ=2 ran on the same two prompts
    same_run = [r["speedup_same_run"] for r in runs if r["config"] == "specchat int4 γ=2" and r["speedup_same_run"]]
    assert data["summary"]["configs"]["specchat int4 γ=2"]["overall"]["speedup_same_run"] == pytest.approx(
        statistics.median(same_run))
    # the timing rounds' cost, by hand from the runs: median over prompts of with ÷ without − 1
    for drafter in ("ngram", "int4"):
        rate = {(r["config"], r["prompt"]): r["decode_tokens_per_s"] for r in runs}
        ratios = [rate[(f"specchat {drafter} adaptive", p)] / rate[(f"specchat {drafter} adaptive (no timing rounds)", p)]
                  for p in ("code-lru", "edit-typehints")]
        cost = data["summary"]["timing_cost"][drafter]
        assert cost["pairs"] == 2 and cost["percent"] == pytest.approx(100 * (statistics.median(ratios) - 1))
        assert cost["groups"]["code"] == pytest.approx(100 * (ratios[0] - 1))
        assert f"{cost['percent']:+.1f}" in printed
    assert "timing rounds: decode tokens/s with ÷ without" in printed
    # the runs without timing rounds are not goals of their own, nor bars in the chart
    # (issue 25: one prediction goal per group the adaptive run with timing rounds covered)
    assert [g["goal"] for g in data["goals"] if g["goal"].startswith("int4 on ")] == [
        "int4 on code: measured ÷ predicted (measured costs) in 0.9–1.1",
        "int4 on edit: measured ÷ predicted (measured costs) in 0.9–1.1"]
    assert data["meta"]["max_new_tokens"] == 8 and data["meta"]["target"]
    assert "specchat bench" in (out / "bench.html").read_text()
    csv_head = (out / "bench.csv").read_text().splitlines()[0].split(",")
    assert csv_head[0] == "config" and {"speedup_same_run", "speedup_predicted_same_run", "num_timing_rounds",
                                        "measure_speedup"} <= set(csv_head)


def test_bench_writes_to_bench_results_in_the_current_directory_by_default(smollm2_dir, tmp_path, monkeypatch, capsys):
    args = build_parser().parse_args(["bench"])
    assert args.out == "bench-results" == bench_report.DEFAULT_OUT and not args.csv and not args.timing_cost
    for old in ("--json", "--chart"):  # the old flags whose defaults wrote into assets/
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", old, "x"])
    assets_before = _assets_bytes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench-results").mkdir()
    (tmp_path / "bench-results" / "bench.csv").write_text("stale")  # from an earlier run with --csv
    status = main([
        "bench", "--target", str(smollm2_dir), "--drafters", "ngram", "--groups", "code", "--per-group", "1",
        "--max-new-tokens", "4", "--gammas", "adaptive", "--no-transformers", "--dtype", "float32",
    ])
    printed = capsys.readouterr().out
    assert status == 0
    written = {p.name for p in (tmp_path / "bench-results").iterdir()}
    assert {"bench.json", "bench.html", "bench.csv"} <= written <= {"bench.json", "bench.html", "bench.png", "bench.csv"}
    assert "wrote bench-results/bench.json" in printed and str(tmp_path / "bench-results") in printed
    assert "wrote bench-results/bench.csv" not in printed and (tmp_path / "bench-results" / "bench.csv").read_text() == "stale"
    assert "note: bench-results/bench.csv is left from an earlier run" in printed
    assert {p.name for p in tmp_path.iterdir()} == {"bench-results"}
    assert _assets_bytes() == assets_before
    data = json.loads((tmp_path / "bench-results" / "bench.json").read_text())
    assert {r["config"] for r in data["runs"]} == {"specchat none", "specchat ngram adaptive"}
    assert {r["repeat"] for r in data["runs"]} == {0, 1, 2}  # 3 repeats by default: min / median / max
    assert data["summary"]["configs"]["specchat ngram adaptive"]["spread"]["speedup"] is not None
    assert data["summary"]["timing_cost"] == {}  # off by default
    assert all(r["measure_speedup"] for r in data["runs"])


def test_bench_quick_is_one_prompt_per_group_one_repeat_and_what_is_given_still_wins(smollm2_dir, tmp_path, capsys):
    status = main(["bench", "--quick", "--target", str(smollm2_dir), "--drafters", "ngram", "--groups", "code", "edit",
                   "--max-new-tokens", "4", "--no-transformers", "--dtype", "float32", "--out", str(tmp_path)])
    assert status == 0
    runs = json.loads((tmp_path / "bench.json").read_text())["runs"]
    assert {r["prompt"] for r in runs} == {"code-lru", "edit-typehints"}  # one per group
    assert {r["repeat"] for r in runs} == {0} and {r["gamma"] for r in runs} == {"-", "adaptive"}
    assert max(r["num_tokens"] for r in runs) <= 4  # --max-new-tokens given: not the quick 48
    assert "1 repeat(s), 4 new tokens" in capsys.readouterr().err
    # sampled: both engines sample (transformers' prompt lookup too), and it says so
    status = main(["bench", "--quick", "--target", str(smollm2_dir), "--drafters", "ngram", "--groups", "code",
                   "--max-new-tokens", "4", "--temperature", "0.8", "--dtype", "float32", "--out", str(tmp_path)])
    assert status == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["meta"]["temperature"] == 0.8
    assert {r["config"] for r in data["runs"]} == {"specchat none", "specchat ngram adaptive", "transformers none",
                                                   "transformers ngram"}
    assert "sampled at temperature 0.8" in capsys.readouterr().err


def test_bench_refuses_an_out_folder_it_cannot_write_before_the_run(smollm2_dir, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    status = main(["bench", "--target", str(smollm2_dir), "--drafters", "ngram", "--max-new-tokens", "4",
                   "--out", str(blocker / "sub")])
    captured = capsys.readouterr()
    assert status == 2 and f"--out {blocker / 'sub'}" in captured.err
    assert "bench:" not in captured.err and blocker.read_text() == "not a folder"


def _run(config: str, prompt: str, decode: float, *, drafter: str = "ngram", gamma: str = "adaptive",
         engine: str = "specchat", group: str = "code", measure_speedup: bool | None = True) -> bench.RunResult:
    return bench.RunResult(
        config=config, engine=engine, drafter=drafter, gamma=gamma, prompt=prompt, group=group, repeat=0,
        num_prompt_tokens=10, num_tokens=20, ttft_s=0.1, total_s=2.0, e2e_tokens_per_s=10.0, prefill_s=0.1,
        decode_tokens_per_s=decode, num_rounds=5, tokens_per_round=4.0, peak_mem_mb=100.0, token_ids=[1, 2],
        alpha=None if drafter == "none" or engine != "specchat" else 0.8, gammas=[4, 4, 0, 4, 4],
        measure_speedup=measure_speedup if engine == "specchat" else None,
    )


def test_timing_cost_is_the_median_over_prompts_of_with_over_without_minus_one():
    no = "specchat ngram adaptive (no timing rounds)"
    results = [
        _run("specchat none", "a", 4.0, drafter="none", gamma="-"),
        _run("specchat none", "b", 5.0, drafter="none", gamma="-", group="edit"),
        _run("specchat none", "c", 5.0, drafter="none", gamma="-", group="edit"),
        # with timing rounds ÷ without: 9/10 = 0.90, 19/20 = 0.95, 30/25 = 1.20 → median 0.95
        _run("specchat ngram adaptive", "a", 9.0), _run(no, "a", 10.0, measure_speedup=False),
        _run("specchat ngram adaptive", "b", 19.0, group="edit"), _run(no, "b", 20.0, group="edit", measure_speedup=False),
        _run("specchat ngram adaptive", "c", 30.0, group="edit"), _run(no, "c", 25.0, group="edit", measure_speedup=False),
        # a fixed-γ run is no partner of the adaptive run without timing rounds
        _run("specchat ngram γ=4", "a", 1.0, gamma="4"),
        _run("transformers ngram", "a", 6.0, engine="transformers", gamma="auto"),
    ]
    bench._fill_relative(results)
    summary = bench_report.summarize(results)
    cost = summary["timing_cost"]
    assert list(cost) == ["ngram"]
    assert cost["ngram"]["percent"] == pytest.approx(-5.0)
    assert cost["ngram"]["groups"] == {"code": pytest.approx(-10.0), "edit": pytest.approx(7.5)}  # (0.95 + 1.2)/2 − 1
    assert cost["ngram"]["pairs"] == 3 and cost["ngram"]["config"] == "specchat ngram adaptive"
    assert cost["ngram"]["baseline"] == no
    # against transformers only the run with timing rounds counts (as the app runs): 9 tokens/s ÷
    # transformers' 20 tokens / (2.0 s − specchat's 0.1 s prefill), not 10 ÷ that
    assert summary["vs_transformers"]["ngram"]["overall"] == pytest.approx(9.0 / (20 / 1.9))
    assert summary["configs"][no]["measure_speedup"] is False
    goals = [g for g, _, _ in bench_report.check_goals(summary)]
    # one prediction goal per group, for the run with timing rounds only (the one without has no t₁)
    assert [g for g in goals if "measured ÷ predicted" in g] == [
        "ngram on code: measured ÷ predicted (measured costs) in 0.9–1.1",
        "ngram on edit: measured ÷ predicted (measured costs) in 0.9–1.1"]
    assert no not in bench_report.chart_summary(summary)["configs"]
    assert "specchat ngram adaptive" in bench_report.chart_summary(summary)["configs"]
    table = bench_report.format_table(summary)
    assert "timing rounds: decode tokens/s with ÷ without" in table
    row = next(line for line in table.splitlines() if line.startswith("ngram ") and "-5.0" in line)
    assert "-10.0" in row and "+7.5" in row and row.split()[-1] == "3"
    assert bench_report.summarize(results[:3])["timing_cost"] == {}


class _FakeService:
    """Just what run_specchat uses: a device and generate(); records the config it got."""

    device = torch.device("cpu")

    def __init__(self, events):
        self.events, self.configs = events, []

    def generate(self, prompt_ids, *, drafter, config):
        self.configs.append(config)
        yield from self.events


def _round(index: int, drafted: int, accepted: int, round_ms: float, draft_ms: float, timing: bool = False):
    committed = accepted + 1
    return [TokenEvent(token_id=7, kind=TokenKind.ACCEPTED if i < accepted else
                       TokenKind.BONUS if drafted else TokenKind.TARGET, text="x",
                       target_prob=1.0, draft_prob=None, rejected_token_id=None, rejected_target_prob=None,
                       rejected_draft_prob=None, round_index=index, position=i, num_drafted=drafted)
            for i in range(committed)] + [RoundEvent(
        round_index=index, num_speculative_tokens=drafted, num_drafted=drafted, num_accepted=accepted,
        num_committed=committed, accepted_mask=(True,) * accepted + ((False,) if accepted < drafted else ()),
        draft_ms=draft_ms, draft_steps=drafted, verify_ms=round_ms - draft_ms, elapsed_ms=0.0, round_ms=round_ms,
        timing=timing)]


def test_run_specchat_turns_timing_rounds_on_and_records_the_same_run_speedup():
    events = (_round(0, 3, 3, 40.0, 12.0) + _round(1, 3, 1, 40.0, 12.0) + _round(2, 0, 0, 20.0, 0.0, timing=True)
              + _round(3, 3, 3, 40.0, 12.0))
    events.append(DoneEvent(stop_reason=StopReason.MAX_NEW_TOKENS, token_ids=(7,) * 11, kinds=(TokenKind.BONUS,) * 11,
                            text="x" * 11, prefill_ms=5.0, decode_ms=140.0, num_prompt_tokens=3))
    service = _FakeService(events)
    raw = bench.run_specchat(service, [1, 2, 3], bench.BenchConfig("specchat", "int4", None, 8), 11)
    assert service.configs[-1].measure_speedup and service.configs[-1].adaptive_gamma
    # 11 tokens × t₁ (the timing round: 20 ms) / 140 ms of decoding
    assert raw["speedup_same_run"] == pytest.approx(11 * 20.0 / 140.0)
    assert raw["num_timing_rounds"] == 1 and raw["target_step_ms"] == pytest.approx(20.0)
    # predicted from the same run, by hand: α = 7/8 (3 + 1 + 3 accepted of 3 + 2 + 3 judged),
    # E[N](7/8, 3) = (1 − (7/8)⁴) / (1/8); d = 12/3 = 4 ms, v(4) = 28 ms (every verify checked 4),
    # so a γ = 3 round takes 3·4 + 28 = 40 ms; plus the one target-only round (1 token, 20 ms)
    e3 = (1 - (7 / 8) ** 4) / (1 / 8)
    assert raw["speedup_predicted_same_run"] == pytest.approx((1 + 3 * e3) * 20.0 / (20.0 + 3 * 40.0))
    # measured ÷ predicted, both from this run (the page's pair): 11 tokens against (1 + 3·E[N])
    # expected, over 140 ms against (20 + 3·40) = 140 ms predicted
    assert raw["measured_over_predicted"] == pytest.approx((11 * 20.0 / 140.0) / ((1 + 3 * e3) * 20.0 / 140.0))
    assert raw["measured_over_predicted"] == pytest.approx(11 / (1 + 3 * e3))
    assert raw["gammas"] == [3, 3, 0, 3] and raw["measure_speedup"] is True
    off = bench.BenchConfig("specchat", "int4", None, 8, measure_speedup=False)
    assert off.name == "specchat int4 adaptive (no timing rounds)"
    bench.run_specchat(service, [1, 2, 3], off, 11)
    assert service.configs[-1].measure_speedup is False
    assert [c.measure_speedup for c in bench.build_configs(["int4"], transformers=False, gammas=[None], max_gamma=8,
                                                            timing_cost=True)] == [True, True, False]


def test_bench_refuses_an_unavailable_drafter(smollm2_dir, capsys):
    status = main(["bench", "--target", str(smollm2_dir), "--drafters", "sibling", "--max-new-tokens", "4"])
    assert status == 2
    assert "not available" in capsys.readouterr().err


def test_best_against_best_spread_and_the_hybrid_goals_from_hand_made_runs():
    """Per group, specchat's fastest drafter against transformers' fastest assisted call (plain
    greedy left out); min / median / max over runs; the hybrid's ratios to its parts."""
    def runs(config, drafter, group, rates, engine="specchat"):
        gamma = "adaptive" if engine == "specchat" and drafter != "none" else "-"
        made = [_run(config, f"{group}{i}", r, drafter=drafter, group=group, engine=engine, gamma=gamma)
                for i, r in enumerate(rates)]
        for run, rate in zip(made, rates):  # transformers' decode rate is derived: total − specchat's prefill
            run.total_s = run.prefill_s + run.num_tokens / rate
        return made

    results = []
    for group in ("code", "edit"):
        results += runs("specchat none", "none", group, [2.0, 2.0, 2.0])
        results += runs("transformers none", "none", group, [9.0, 9.0, 9.0], engine="transformers")  # not a rival
    results += runs("specchat hybrid adaptive", "hybrid", "code", [3.0, 4.0, 8.0])  # median 4
    results += runs("specchat sibling adaptive", "sibling", "code", [4.0, 5.0, 6.0])  # median 5
    results += runs("specchat ngram adaptive", "ngram", "code", [2.0, 2.0, 2.0])
    results += runs("transformers sibling", "sibling", "code", [4.0, 4.0, 4.0], engine="transformers")
    results += runs("specchat hybrid adaptive", "hybrid", "edit", [12.0, 12.0, 12.0])
    results += runs("specchat sibling adaptive", "sibling", "edit", [5.0, 5.0, 5.0])
    results += runs("specchat ngram adaptive", "ngram", "edit", [9.0, 10.0, 11.0])
    results += runs("transformers ngram", "ngram", "edit", [8.0, 8.0, 8.0], engine="transformers")
    results += runs("transformers sibling", "sibling", "edit", [6.0, 6.0, 6.0], engine="transformers")
    bench._fill_relative(results)
    summary = bench_report.summarize(results)
    best = summary["best_vs_best"]
    assert best["code"] == {"specchat": "specchat sibling adaptive", "specchat_tokens_per_s": 5.0,
                            "transformers": "transformers sibling", "transformers_tokens_per_s": 4.0, "ratio": 1.25}
    assert best["edit"]["specchat"] == "specchat hybrid adaptive" and best["edit"]["ratio"] == pytest.approx(12 / 8)
    hybrid = summary["configs"]["specchat hybrid adaptive"]
    # over both groups' six runs 3, 4, 8, 12, 12, 12: the median is (8 + 12) / 2
    assert hybrid["spread"]["decode_tokens_per_s"] == [3.0, 10.0, 12.0]
    assert hybrid["spread"]["speedup"] == [1.5, 5.0, 6.0]  # ÷ 2.0 tokens/s target-only
    summary["hybrid_part"] = "sibling"
    goals = {text: (value, met) for text, value, met in bench_report.check_goals(summary)}
    assert goals["best specchat >= 1.2x best transformers on code"] == (pytest.approx(1.25), True)
    assert goals["best specchat >= 1.2x best transformers on edit"] == (pytest.approx(1.5), True)
    assert goals["hybrid >= 1.2x ngram on edit"] == (pytest.approx(12 / 10), True)
    assert goals["hybrid >= 1.2x sibling on edit"] == (pytest.approx(12 / 5), True)
    assert goals["hybrid >= 0.97x sibling on code"] == (pytest.approx(4 / 5), False)
    assert goals["hybrid >= 1.2x ngram on passage"] == (None, None)  # not run: not measured
    # issue 25: the page's prediction holds per drafter and group, 0.9–1.1 (the runs' ratio: 1.0 here)
    for run in results:
        if run.config == "specchat ngram adaptive":
            run.measured_over_predicted = 0.85 if run.group == "code" else 1.05
    summary = bench_report.summarize(results)
    goals = {text: (value, met) for text, value, met in bench_report.check_goals(summary)}
    assert goals["ngram on code: measured ÷ predicted (measured costs) in 0.9–1.1"] == (pytest.approx(0.85), False)
    assert goals["ngram on edit: measured ÷ predicted (measured costs) in 0.9–1.1"] == (pytest.approx(1.05), True)


def test_bench_multi_turn_reports_time_to_first_token_and_prefill_per_turn(smollm2_dir, tmp_path, capsys):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Say hello in one word.", "Now say goodbye in one word."]))
    out = tmp_path / "out"
    status = main(["bench", "--quick", "--target", str(smollm2_dir), "--drafters", "ngram", "--groups", "code",
                   "--max-new-tokens", "4", "--no-transformers", "--dtype", "float32", "--out", str(out),
                   "--multi-turn", str(script)])
    printed = capsys.readouterr().out
    assert status == 0
    data = json.loads((out / "bench.json").read_text())
    multi = data["summary"]["multi_turn"]
    assert list(multi) == ["none", "ngram"]
    for entry in multi.values():
        assert entry["turns"] == [1, 2]
        first, second = entry["num_prompt_tokens"]
        # cold start: all prompt tokens but the last are prefilled; turn 2 reuses turn 1's kept cache
        assert entry["prefill_tokens"][0] == first - 1
        assert 0 < entry["prefill_tokens"][1] < second - first + 8
        assert entry["last_over_first"] == pytest.approx(entry["ttft_ms"][1] / entry["ttft_ms"][0])
    assert len(data["summary"]["multi_turn_runs"]) == 4
    assert "multi-turn: time to first token per turn" in printed
    assert any(g["goal"] == "ngram: TTFT turn 2 <= 1.3x turn 1" for g in data["goals"])
