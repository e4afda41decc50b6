"""The benchmark runs (on SmolLM2-135M, a few tokens) and its prompt set is well formed.

Speed is not asserted here: that is what `python -m specchat bench` itself is for. What is
asserted is what must hold on any machine: greedy speculative output and transformers' greedy
output equal specchat's target-only output, target-only is 1.0× itself, medians are medians.
"""

from __future__ import annotations

import json
import statistics

import pytest

from specchat import bench
from specchat.cli import main


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


def test_bench_runs_end_to_end_on_a_real_small_model(smollm2_dir, tmp_path, capsys):
    out = tmp_path / "out"
    status = main([
        "bench", "--target", str(smollm2_dir), "--drafters", "ngram", "int4", "--groups", "code", "edit",
        "--per-group", "1", "--max-new-tokens", "6", "--gammas", "adaptive", "2", "--dtype", "float32",
        "--json", str(out / "b.json"), "--csv", str(out / "b.csv"), "--chart", str(out / "b"),
    ])
    printed = capsys.readouterr().out
    assert status == 0
    assert "speedup over specchat target-only" in printed and "goals (issue 4)" in printed
    data = json.loads((out / "b.json").read_text())
    runs = data["runs"]
    configs = {r["config"] for r in runs}
    assert configs == {
        "specchat none", "specchat ngram adaptive", "specchat int4 adaptive", "specchat ngram γ=2",
        "specchat int4 γ=2", "transformers none", "transformers ngram", "transformers int4",
    }
    assert {r["prompt"] for r in runs} == {"code-lru", "edit-typehints"}
    for r in runs:
        assert 1 <= r["num_tokens"] <= 6 and r["ttft_s"] > 0 and r["peak_mem_mb"] > 0
        if r["engine"] == "specchat" or r["drafter"] == "none":
            # lossless greedy (specchat), and the same greedy target in transformers
            assert r["identical"], (r["config"], r["prompt"])
        if r["config"] == "specchat none":
            assert r["speedup"] == 1.0 and r["tokens_per_round"] == 1.0 and r["alpha"] is None
        if r["config"].startswith("specchat") and r["drafter"] != "none":
            assert r["alpha"] is not None and 0 <= r["alpha"] <= 1
            assert all(g <= (12 if r["gamma"] == "adaptive" else 2) for g in r["gammas"])
    # the summary is the median of the runs
    tps = [r["decode_tokens_per_s"] for r in runs if r["config"] == "specchat int4 adaptive" and r["decode_tokens_per_s"]]
    summary = data["summary"]["configs"]["specchat int4 adaptive"]["overall"]["decode_tokens_per_s"]
    assert summary == pytest.approx(statistics.median(tps))
    same = [r["speedup"] for r in runs if r["config"] == "specchat int4 adaptive" and r["speedup"] is not None]
    assert data["summary"]["configs"]["specchat int4 adaptive"]["speedup_on_fixed_gamma_prompts"] == pytest.approx(
        statistics.median(same))  # γ=2 ran on the same two prompts
    assert data["meta"]["max_new_tokens"] == 6 and data["meta"]["target"]
    assert "specchat bench" in (out / "b.html").read_text()
    assert (out / "b.csv").read_text().startswith("config,")


def test_bench_refuses_an_unavailable_drafter(smollm2_dir, capsys):
    status = main(["bench", "--target", str(smollm2_dir), "--drafters", "sibling", "--max-new-tokens", "4"])
    assert status == 2
    assert "not available" in capsys.readouterr().err
