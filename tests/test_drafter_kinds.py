"""The one table of drafter kinds: everything that lists drafters reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.commands.cli import build_parser
from specchat.drafters import kinds as drafter_kinds
from specchat.runtimes import registry
from specchat.ui.charts import figures as charts

ROOT = Path(__file__).resolve().parent.parent


def test_registry_cli_charts_and_readme_follow_the_table():
    names = drafter_kinds.KIND_NAMES
    assert names == ("none", "ngram", "int4", "sibling", "sibling-int4", "hybrid")
    assert registry.DRAFTER_KINDS == names
    assert registry.ALWAYS_AVAILABLE_DRAFTERS == ("none", "ngram", "int4", "hybrid")  # no sibling needed
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    generate = next(a for a in sub["generate"]._actions if a.dest == "drafter")
    audit = next(a for a in sub["audit"]._actions if a.dest == "drafter")
    bench = next(a for a in sub["bench"]._actions if a.dest == "drafters")
    assert tuple(generate.choices) == ("auto", *names)
    assert tuple(audit.choices) == tuple(bench.choices) == drafter_kinds.SPECULATIVE_KIND_NAMES == names[1:]
    assert charts.DRAFTER_COLORS == {k: drafter_kinds.get(k).color for k in names}
    assert len(set(charts.DRAFTER_COLORS.values())) == len(names)
    assert drafter_kinds.markdown_table() in (ROOT / "README.md").read_text()


def test_kinds_a_target_can_use_and_errors():
    assert drafter_kinds.kinds_for(has_sibling=False) == ["none", "ngram", "int4", "hybrid"]
    assert drafter_kinds.kinds_for(has_sibling=True) == list(drafter_kinds.KIND_NAMES)
    assert drafter_kinds.get("sibling-int4").int4 and drafter_kinds.get("sibling-int4").needs_sibling
    assert not drafter_kinds.get("ngram").is_model and drafter_kinds.get("int4").is_model
    assert drafter_kinds.get("hybrid").is_model  # its model rounds cost time
    assert [k for k in drafter_kinds.KIND_NAMES if drafter_kinds.get(k).own_model] == ["int4", "sibling", "sibling-int4"]
    with pytest.raises(ValueError, match="unknown drafter kind 'eagle' .known: none, ngram"):
        drafter_kinds.get("eagle")
    assert drafter_kinds.color("eagle", "#000") == "#000"


def test_a_bench_panel_without_data_says_not_measured():
    """Only adaptive γ ran: the fixed-γ panel says 'not measured' instead of staying empty."""
    entry = {"engine": "specchat", "drafter": "ngram", "gamma": "adaptive",
             "groups": {"code": {"speedup": 1.5}}, "overall": {"speedup": 1.5}}
    summary = {"configs": {"specchat ngram adaptive": entry,
                           "specchat none": {**entry, "drafter": "none", "gamma": "-"}}}
    fig = charts.bench_figure(summary, {"target": "t", "dtype": "bf16"})
    notes = [a.text for a in fig.layout.annotations]
    assert any(n.startswith("not measured: no fixed γ ran") for n in notes)
    assert not any(n.startswith("not measured: no drafter ran with adaptive") for n in notes)
    # written in the middle of the empty right-hand panel, not over the bars of the left one
    note = next(a for a in fig.layout.annotations if a.text.startswith("not measured"))
    assert note.xref == "paper" and note.x == pytest.approx(sum(fig.layout.xaxis2.domain) / 2)


def test_without_a_4_bit_copy_the_int4_kinds_go_and_the_hybrid_needs_a_model_kind_left():
    assert drafter_kinds.kinds_for(has_sibling=True, has_int4=False) == ["none", "ngram", "sibling", "hybrid"]
    assert drafter_kinds.kinds_for(has_sibling=False, has_int4=False) == ["none", "ngram"]
