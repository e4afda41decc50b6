"""specchat.ui.charts.figures: the figures carry the right numbers, stay small, and have empty states."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from specchat.core import theory
from specchat.core.events import RoundEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.ui.charts import figures as charts


def _round(
    i: int,
    drafted: int,
    accepted: int,
    *,
    round_ms: float | None = None,
    draft_ms: float | None = None,
    draft_steps: int | None = None,
    committed: int | None = None,
) -> RoundEvent:
    """A round of the hand-made cost model: 100 ms target step + 10 ms per drafted token."""
    draft_ms = 10.0 * drafted if draft_ms is None else draft_ms
    return RoundEvent(
        round_index=i,
        num_speculative_tokens=drafted,
        num_drafted=drafted,
        num_accepted=accepted,
        num_committed=accepted + 1 if committed is None else committed,
        accepted_mask=tuple([True] * accepted + ([False] if accepted < drafted else [])),
        draft_ms=draft_ms,
        draft_steps=drafted if draft_steps is None else draft_steps,
        verify_ms=100.0,
        elapsed_ms=0.0,
        round_ms=100.0 + draft_ms if round_ms is None else round_ms,
    )


def _metrics(rounds: list[RoundEvent]) -> SpeculationMetrics:
    m = SpeculationMetrics()
    for r in rounds:
        m.num_tokens += r.num_committed  # as the token events would
        m.update(r)
    return m


# (drafted, accepted) per round: 3 target-only rounds (t₁ = 100 ms, enough to show a speedup)
# between 4 rounds of γ = 4 (13 judged drafts).
ROUNDS = [(0, 0), (4, 2), (4, 4), (0, 0), (4, 1), (4, 3), (0, 0)]


@pytest.fixture
def metrics() -> SpeculationMetrics:
    return _metrics([_round(i, d, a) for i, (d, a) in enumerate(ROUNDS)])


def _trace(fig: go.Figure, name: str):
    return next(t for t in fig.data if t.name == name)


def test_acceptance_by_position_matches_hand_counts(metrics):
    fig = charts.acceptance_by_position_figure(metrics)
    bars = fig.data[0]
    # position 1: reached 4×, accepted 4×; 2: 4, 3; 3: reached when ≥2 accepted (3×), accepted 2×;
    # 4: reached when ≥3 accepted (2×), accepted once
    assert list(bars.x) == [1, 2, 3, 4]
    assert list(bars.y) == pytest.approx([4 / 4, 3 / 4, 2 / 3, 1 / 2], abs=1e-4)
    assert [list(c) for c in bars.customdata] == [[4, 4], [3, 4], [2, 3], [1, 2]]
    # the counts are under the bars (tick labels), where the α line cannot cross them
    assert bars.text is None
    assert list(fig.layout.xaxis.ticktext) == ["1<br>4/4", "2<br>3/4", "3<br>2/3", "4<br>1/2"]
    # the dotted α line: 10 accepted of 13 judged (3 + 4 + 2 + 4)
    assert list(fig.data[1].y) == pytest.approx([10 / 13] * 2, abs=1e-4)


def test_acceptance_rate_series(metrics):
    fig = charts.acceptance_rate_figure(metrics)
    cumulative = _trace(fig, "cumulative α")
    assert list(cumulative.x) == [1, 2, 3, 4, 5, 6, 7]
    assert cumulative.y[0] is None  # nothing drafted yet after the target-only round
    assert list(cumulative.y)[1:] == pytest.approx([2 / 3, 6 / 7, 6 / 7, 7 / 9, 10 / 13, 10 / 13], abs=1e-4)
    per_round = _trace(fig, "per round")
    assert list(per_round.x) == [2, 3, 5, 6]  # the target-only rounds have no ratio
    assert list(per_round.y) == pytest.approx([2 / 3, 1.0, 0.5, 0.75], abs=1e-4)
    assert "0.77" in fig.layout.title.text
    # the γ axis ticks whole numbers only (γ ≤ 4 here): 0.5 steps formatted "d" read 0, 1, 1, 2
    assert fig.layout.yaxis2.tick0 == 0 and fig.layout.yaxis2.dtick == 1


def test_speed_series_and_bars(metrics):
    seconds, rates = charts.speed_series(metrics)
    # committed tokens 1, 3, 5, 1, 2, 4, 1 at 0.10, 0.24, 0.38, 0.48, 0.62, 0.76, 0.86 s
    assert seconds == pytest.approx([0.10, 0.24, 0.38, 0.48, 0.62, 0.76, 0.86])
    assert rates == pytest.approx([1 / 0.10, 4 / 0.24, 9 / 0.38, 10 / 0.48, 12 / 0.62, 16 / 0.76, 17 / 0.86], abs=0.01)
    fig = charts.speed_figure(metrics)
    # the target-only rounds took 100 ms: 10 tok/s, timed during the reply
    assert list(_trace(fig, "target-only steps").y) == [10.0] * 3
    assert list(_trace(fig, "their mean").y) == [10.0, 10.0]
    bars = next(t for t in fig.data if t.type == "bar")
    measured, predicted = bars.y
    assert measured == pytest.approx(17 * 100 / 860, abs=1e-3)
    # predicted for the rounds as run: the target-only rounds (1 token, 100 ms each) and four
    # rounds of γ = 4 (E[N](α = 10/13, 4) tokens, 4 × 10 ms + v(5) = 100 ms each)
    e4 = theory.expected_tokens_per_round(10 / 13, 4)
    assert predicted == pytest.approx((3 + 4 * e4) * 100 / (300 + 4 * 140), abs=1e-3)
    assert list(bars.x) == ["measured", "predicted"]
    assert "timed in it" in fig.layout.title.text


def test_speed_without_a_target_only_round_says_not_measured():
    m = _metrics([_round(i, 4, 3) for i in range(3)])
    fig = charts.speed_figure(m)
    assert not any(t.name == "their mean" for t in fig.data)
    bars = next(t for t in fig.data if t.type == "bar")
    assert bars.y[0] is None and bars.text[0] == "not measured"
    # an empty bar draws no text: the reason is written on the axis where the bar would be
    # (the prediction needs t₁ too)
    assert [(a.x, a.text) for a in fig.layout.annotations] == [("measured", "not measured"), ("predicted", "held back")]
    assert "no target-only step timed yet" in fig.layout.title.text


def test_speed_series_adds_the_rounds_of_several_streams():
    m = _metrics([_round(0, 4, 4, round_ms=100.0), _round(0, 4, 4, round_ms=100.0)])
    seconds, rates = charts.speed_series(m)
    assert seconds == [0.1, 0.2]
    assert rates == pytest.approx([50.0, 50.0])


def test_conversation_figures_have_one_bar_per_reply_in_the_drafters_colors(metrics):
    from specchat.drafters import kinds as drafter_kinds

    other = _metrics([_round(0, 0, 0, round_ms=200.0), _round(1, 2, 2)])  # t₁ = 200 ms from one step: held back
    figs = charts.conversation_figures([(1, "ngram", metrics), (2, "sibling", other)])
    alpha, per_round, speedup, speed = figs
    assert list(alpha.data[0].x) == ["#1 ngram", "#2 sibling"]
    assert list(alpha.data[0].y) == pytest.approx([round(10 / 13, 3), 1.0])
    assert list(alpha.data[0].marker.color) == [drafter_kinds.color("ngram"), drafter_kinds.color("sibling")]
    assert list(per_round.data[0].y) == pytest.approx([round(17 / 7, 3), 2.0])
    assert list(speedup.data[0].y) == pytest.approx([round(1700 / 860, 3), 0.0])
    assert list(speedup.data[0].text) == [f"{1700 / 860:.2f}×", "held<br>back"]
    assert [t.name for t in speedup.data] == ["measured", "predicted"]
    assert list(speed.data[1].y) == pytest.approx([10.0, 5.0])  # target only, timed in each reply
    assert all(not f.data for f in charts.conversation_figures([]))
    # the bar in the drafter's colour needs no legend entry (it took the first reply's colour)
    assert [t.showlegend for t in speed.data] == [False, True]


def test_conversation_bars_without_a_value_say_why():
    """A target-only reply has no α and no prediction; a reply too short for a timing round
    has no measured speedup: a flat bar says so (a bar with no value drew nothing)."""
    none = _metrics([_round(i, 0, 0) for i in range(3)])
    short = _metrics([_round(0, 4, 4), _round(1, 4, 2)])
    alpha, _, speedup, speed = charts.conversation_figures([(1, "none", none), (2, "ngram", short)])
    assert list(alpha.data[0].y) == [0.0, 1.0 * round(6 / 7, 3)] and alpha.data[0].text[0] == "no<br>drafts"
    measured, predicted = speedup.data
    assert list(measured.text) == ["1.00×", "not<br>measured"] and measured.y[1] == 0.0
    assert list(predicted.text) == ["no<br>drafts", "not<br>measured"]
    assert list(speed.data[1].text) == ["10.0 tok/s", "not<br>measured"]


def _alpha_08_c_01() -> SpeculationMetrics:
    # three target-only rounds (t₁ = 100 ms), then 16 accepted of 20 judged drafts (four rounds
    # reject the 4th draft, one accepts all four); 10 ms per drafted token; the rest of a
    # drafting round costs 100 ms whatever γ (v flat: the textbook's assumption)
    accepted = [3, 3, 3, 3, 4]
    return _metrics([_round(i, 0, 0) for i in range(3)] + [_round(i + 3, 4, a) for i, a in enumerate(accepted)])


def test_theory_curve_worked_example():
    curve = charts.theory_curve(0.8, 0.1)
    assert len(curve) == 12
    assert curve[3] == pytest.approx(2.40, abs=0.01)  # ALGORITHM.md: α=0.8, c=0.1, γ=4 → 2.40×
    assert curve[0] == pytest.approx(1.8 / 1.1)


def test_theory_figure_marks_current_and_best(metrics):
    m = _alpha_08_c_01()
    assert m.acceptance_rate == pytest.approx(0.8) and m.cost_ratio == pytest.approx(0.1)
    fig = charts.theory_figure(m, 4)
    curve = _trace(fig, "S(γ), measured costs")
    assert list(curve.x) == list(range(1, 13))
    # v flat at t₁: the measured-cost curve is the textbook one, S(4) = 2.40 (ALGORITHM.md)
    assert curve.y[3] == pytest.approx(2.40, abs=0.01)
    assert list(_trace(fig, "textbook (verify = 1 step)").y) == pytest.approx(list(curve.y), abs=1e-4)
    current = _trace(fig, "γ drafted ≈ 4")
    assert list(current.x) == [4] and current.y[0] == pytest.approx(2.40, abs=0.01)
    best = next(t for t in fig.data if t.name.startswith("best"))
    assert list(best.x) == [6]  # S(5)=2.46, S(6)=2.47, S(7)=2.45
    assert best.x[0] == theory.optimal_num_speculative_tokens(0.8, 0.1, 12)
    measured = _trace(fig, "measured")  # 24 tokens in 3 × 100 + 5 × 140 ms, against t₁ = 100 ms
    assert measured.y[0] == pytest.approx(m.measured_speedup, abs=1e-3) and m.measured_speedup == pytest.approx(2.4)
    assert fig.layout.shapes[0].y0 == 1  # the S = 1 line
    # the default γ is the mean γ drafted (4), as in metrics.predicted_speedup
    assert list(_trace(charts.theory_figure(m), "γ drafted ≈ 4").x) == [4]


def test_theory_star_is_the_argmax_of_the_measured_cost_curve_not_the_textbook():
    """A verify pass that grows by 20 ms per checked position: the measured-cost S(γ) falls below
    the textbook curve at large γ and its best γ (the adaptive controller's formula) is smaller."""
    rounds = [_round(i, 0, 0) for i in range(3)]
    for i, k in enumerate([2, 8] * 6):
        rounds.append(_round(i + 3, k, k - 1, round_ms=10.0 * k + 80.0 + 20.0 * (k + 1)))
    m = _metrics(rounds)
    fig = charts.theory_figure(m)
    curve = list(_trace(fig, "S(γ), measured costs").y)
    assert curve == pytest.approx(m.predicted_speedup_curve(len(curve)), abs=1e-4)
    best = next(t for t in fig.data if t.name.startswith("best")).x[0]
    assert curve[best - 1] == max(curve)
    textbook = list(_trace(fig, "textbook (verify = 1 step)").y)
    assert best < 1 + textbook.index(max(textbook))


def test_theory_figure_warns_when_alpha_not_above_c():
    m = _metrics([_round(i, 0, 0) for i in range(3)] + [_round(i + 3, 4, 0, draft_ms=200.0) for i in range(10)])
    fig = charts.theory_figure(m)
    assert any("α ≤ c" in a.text for a in fig.layout.annotations)


def test_theory_figure_says_when_no_gamma_wins_at_the_measured_costs():
    """α = 0.75 > c = 0.1, so the textbook curve promises a speedup, but a verify pass costs
    50 + 100 ms per checked position (t₁ = 100 ms): at these costs every γ loses. The page says
    so, and why the star still marks a γ ≥ 1."""
    rounds = [_round(i, 0, 0) for i in range(3)]
    for i, k in enumerate([2, 6] * 6):
        rounds.append(_round(i + 3, k, k - 1, round_ms=10.0 * k + 50.0 + 100.0 * (k + 1)))
    m = _metrics(rounds)
    assert m.acceptance_rate == pytest.approx(0.75) and m.cost_ratio == pytest.approx(0.1)
    fig = charts.theory_figure(m)
    assert max(_trace(fig, "S(γ), measured costs").y) < 1 < max(_trace(fig, "textbook (verify = 1 step)").y)
    texts = [a.text for a in fig.layout.annotations]
    assert "at the measured costs: no γ gives a speedup" in texts
    assert any(t.startswith("adaptive γ pauses drafting (γ = 0) and probes") for t in texts)
    # at the right edge the measured curve is far below 1 and the textbook one above it
    # (farther away): the S = 1 label goes above the line, on the textbook's side
    label = next(a for a in fig.layout.annotations if a.text == "S = 1 (target only)")
    assert label.yanchor == "bottom"
    # with both curves above 1 at the right edge, the label goes under the line
    good = charts.theory_figure(_alpha_08_c_01(), 4)
    assert next(a for a in good.layout.annotations if a.text == "S = 1 (target only)").yanchor == "top"
    assert not any("no γ gives" in a.text for a in good.layout.annotations)


def test_theory_range_extends_past_ten_for_large_gamma():
    m = _metrics([_round(0, 0, 0), _round(1, 12, 6)])
    fig = charts.theory_figure(m)
    assert list(_trace(fig, "S(γ), measured costs").x) == list(range(1, 13))


@pytest.mark.parametrize(
    "build",
    [
        charts.acceptance_rate_figure,
        charts.acceptance_by_position_figure,
        charts.speed_figure,
        charts.theory_figure,
    ],
)
def test_empty_state_has_a_hint_not_an_error(build):
    fig = build(SpeculationMetrics())
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 0
    assert fig.layout.annotations and fig.layout.annotations[0].text
    assert fig.layout.height == charts.FIGURE_HEIGHT


def test_target_only_run_shows_a_hint_for_acceptance():
    m = _metrics([_round(i, 0, 0, committed=1, round_ms=ms) for i, ms in enumerate([90.0, 110.0, 100.0, 120.0, 80.0] * 4)])
    assert "none" in charts.acceptance_rate_figure(m).layout.annotations[0].text
    assert len(charts.acceptance_by_position_figure(m).data) == 0
    assert len(charts.theory_figure(m).data) == 0
    speed = charts.speed_figure(m)  # speed still makes sense without drafts
    assert _trace(speed, "this reply").y[-1] == pytest.approx(10.0)
    # target only against target-only steps timed in the same reply: exactly 1.00×
    assert next(t for t in speed.data if t.type == "bar").y[0] == pytest.approx(1.0)
    # nothing was drafted, so there is no prediction, and the page says why
    assert [(a.x, a.text) for a in speed.layout.annotations] == [("predicted", "no drafts")]


def test_long_runs_are_thinned_and_small():
    rounds = [_round(i, 4 if i % 16 else 0, i % 5 if i % 16 else 0) for i in range(3000)]
    m = _metrics(rounds)
    figs = charts.all_figures(m)
    alpha = figs[0]
    assert len(_trace(alpha, "cumulative α").x) <= charts.MAX_POINTS
    assert _trace(alpha, "cumulative α").y[-1] == pytest.approx(m.acceptance_rate, abs=1e-4)
    assert len(_trace(figs[2], "this reply").x) <= charts.MAX_POINTS
    assert len(_trace(figs[2], "target-only steps").x) <= charts.MAX_POINTS
    for fig in figs:
        assert len(fig.to_json()) < 25_000
        assert fig.layout.height == charts.FIGURE_HEIGHT
        json.loads(fig.to_json())


def test_colors_match_the_token_legend(metrics):
    from specchat.ui.html.render import KIND_COLORS

    assert charts.acceptance_by_position_figure(metrics).data[0].marker.color == KIND_COLORS["accepted"]
    assert _trace(charts.acceptance_rate_figure(metrics), "cumulative α").line.color == KIND_COLORS["accepted"]


def test_stats_line_wording_for_short_and_finished_replies():
    """One round reads "1 round"; a finished reply with no timed target-only step does not
    promise one "yet"; a reply stopped before its first round says so instead of "no reply yet"."""
    from specchat.ui.html.render import stats_html

    one = _metrics([_round(0, 2, 2)])  # 3 tokens in 1 round, nothing timed
    done = stats_html(one, label="#1 · ngram", running=False)
    assert "3 tokens in 1 round:" in done and "no target-only step timed in this reply" in done
    assert "timed in this reply yet" not in done
    assert "timed in this reply yet" in stats_html(one, label="#1 · ngram", running=True)
    stopped = stats_html(SpeculationMetrics(), label="#2 · ngram", running=False)
    assert "no tokens: the reply ended before its first round" in stopped and "no reply yet" not in stopped
    assert "no reply yet: send a message" in stats_html(None)


def test_verify_cost_panel_shows_the_reply_curve_next_to_the_textbook_line():
    """Hand-made rounds, t₁ = 100 ms: γ = 1 rounds take 10 + 160 ms (a pass over 2 tokens: 1.6
    steps), γ = 3 rounds 30 + 240 and 30 + 260 ms (a pass over 4: 2.4 and 2.6, mean 2.5). The
    panel's dots are those means; the textbook line is 1 for every k."""
    rounds = [_round(0, 0, 0), _round(1, 1, 1, round_ms=170.0), _round(2, 3, 2, round_ms=270.0),
              _round(3, 3, 3, round_ms=290.0), _round(4, 1, 0, round_ms=170.0)]
    m = _metrics(rounds)
    assert m.verify_cost_curve() == [(1, 1.0, 1), (2, pytest.approx(1.6), 2), (4, pytest.approx(2.5), 2)]
    fig = charts.theory_figure(m)
    dots = _trace(fig, "verify cost, measured")
    assert list(dots.x) == [1, 2, 4] and list(dots.y) == pytest.approx([1.0, 1.6, 2.5])
    assert (dots.xaxis, dots.yaxis) == ("x2", "y2") and list(dots.customdata) == [1, 2, 2]
    line = _trace(fig, "v(k)/t₁ used by S(γ)")  # the straight line S(γ) divides by
    assert list(line.x) == [2, 3, 4]
    assert list(line.y) == pytest.approx([m.costs.verify_ms(k) / 100.0 for k in (2, 3, 4)], abs=1e-3)
    textbook = [s for s in fig.layout.shapes if s.yref == "y2"]
    assert len(textbook) == 1 and textbook[0].y0 == textbook[0].y1 == 1
    # no t₁ yet: no panel, and no curve to show
    assert _metrics(rounds[1:]).verify_cost_curve() is None
