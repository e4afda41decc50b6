"""Running statistics → plotly figures for the app: the charts of a reply as it streams, and of
the whole conversation. No gradio import.

Each function takes a :class:`~specchat.core.metrics.SpeculationMetrics` (per reply) and returns
a small ``go.Figure`` built the way every chart is (:mod:`specchat.ui.charts.style`). The theory
chart and the α-against-c chart are :mod:`specchat.ui.charts.theory`, the benchmark's figure
:mod:`specchat.ui.charts.bench`; all of them are importable from here too, the app's one
module of figures.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specchat.core import evidence
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds
from specchat.ui.charts.bench import DRAFTER_COLORS, bench_figure
from specchat.ui.charts.style import (
    ACCEPTED,
    FIGURE_HEIGHT,
    FIGURE_MARGIN,
    FIGURE_MARGIN_LEGEND,
    GAMMA_COLOR,
    MAX_POINTS,
    axis,
    buckets,
    empty_figure,
    figure,
    hline,
    note,
    rounded,
)
from specchat.ui.charts.theory import theory_curve, theory_figure, worth_figure
from specchat.ui.html.render import BASELINE_COLOR, MEASURED_COLOR, PREDICTED_COLOR

__all__ = [
    "FIGURE_HEIGHT",
    "acceptance_rate_figure",
    "acceptance_by_position_figure",
    "speed_figure",
    "theory_figure",
    "all_figures",
    "conversation_figures",
    "speed_series",
    "theory_curve",
    "bench_figure",
    "worth_figure",
    "DRAFTER_COLORS",
]


# ---- 1. acceptance rate over rounds ---------------------------------------------------------
def acceptance_rate_figure(metrics: SpeculationMetrics) -> go.Figure:
    """Cumulative α and accepted/judged drafts per round (per bucket of rounds for long replies),
    and γ per round on a right-hand axis (it moves when adaptive γ is on).

    Judged drafts are the accepted ones plus the first rejected one (metrics.num_verified).
    """
    title = "Acceptance rate α over rounds"
    if not metrics.rounds:
        return empty_figure(title, "Send a message: α appears after the first round")
    if not metrics.num_drafted:
        return empty_figure(title, "Nothing drafted (target only): pick a drafter other than 'none'")
    rounds = metrics.rounds
    cumulative = metrics.cumulative_acceptance_rate()
    x, per_bucket, custom, x_cum, y_cum = [], [], [], [], []
    for start, stop in buckets(len(rounds)):
        accepted = sum(r.num_accepted for r in rounds[start:stop])
        drafted = sum(r.num_drafted for r in rounds[start:stop])
        judged = sum(len(r.accepted_mask) for r in rounds[start:stop])
        label = f"round {start + 1}" if stop - start == 1 else f"rounds {start + 1}–{stop}"
        x_cum.append(stop)
        y_cum.append(rounded(cumulative[stop - 1]))
        if drafted:
            x.append(rounded((start + 1 + stop) / 2, 2))
            per_bucket.append(rounded(accepted / judged))
            custom.append([label, accepted, judged, drafted])
    gamma_x, gamma_y = [], []
    for start, stop in buckets(len(rounds)):
        drafting = [r.num_speculative_tokens for r in rounds[start:stop] if r.num_speculative_tokens]
        if drafting:
            gamma_x.append(rounded((start + 1 + stop) / 2, 2))
            gamma_y.append(rounded(sum(drafting) / len(drafting), 2))
    data = [
        dict(
            type="scatter", x=gamma_x, y=gamma_y, mode="lines", name="γ", yaxis="y2",
            line=dict(color=GAMMA_COLOR, width=1.5, shape="hv"),
            hovertemplate="round %{x}: γ = %{y}<extra></extra>",
        ),
        dict(
            type="scatter", x=x, y=per_bucket, mode="markers", name="per round",
            marker=dict(color=ACCEPTED, opacity=0.35, size=6), customdata=custom,
            hovertemplate=(
                "%{customdata[0]}: %{customdata[1]} accepted of %{customdata[2]} judged"
                " (%{customdata[3]} drafted)<extra></extra>"
            ),
        ),
        dict(
            type="scatter", x=x_cum, y=y_cum, mode="lines", name="cumulative α", connectgaps=True,
            line=dict(color=ACCEPTED, width=2.5),
            hovertemplate="after round %{x}: α = %{y:.2f}<extra></extra>",
        ),
    ]
    return figure(
        data, f"Acceptance rate α = {metrics.acceptance_rate:.2f}", show_legend=True,
        xaxis=axis("round", rangemode="tozero"),
        yaxis=axis("accepted / judged drafts", range=[-0.03, 1.05]),
        yaxis2=dict(
            title=dict(text="γ", font=dict(size=11)), overlaying="y", side="right", showgrid=False,
            rangemode="tozero", range=[0, max(gamma_y, default=1) * 1.1 + 0.5], color=GAMMA_COLOR, tickformat="d",
            tick0=0, dtick=max(1, math.ceil(max(gamma_y, default=1) / 5)),  # whole steps: "d" of 0.5 steps read 0, 1, 1, 2
        ),
    )


# ---- 2. acceptance by draft position ---------------------------------------------------------
def acceptance_by_position_figure(metrics: SpeculationMetrics) -> go.Figure:
    """Bars of accepted / reached for draft positions 1..γ (β_i, the conditional acceptance).

    Position i is reached when the first i−1 drafts of a round were accepted
    (SpeculationMetrics.acceptance_by_position); hover shows both counts.
    """
    title = "Acceptance by draft position"
    by_position = metrics.acceptance_by_position()
    if not by_position:
        return empty_figure(title, "Per-position acceptance appears once drafts are verified")
    x = list(range(1, len(by_position) + 1))
    y = [rounded(a / n) if n else None for a, n in by_position]
    bars = dict(
        type="bar", x=x, y=y, name="accepted / reached", marker=dict(color=ACCEPTED), opacity=0.85,
        customdata=[[a, n] for a, n in by_position],
        hovertemplate=(
            "position %{x}: %{customdata[0]} accepted of %{customdata[1]} reached"
            "<br>β = %{y:.2f}<extra></extra>"
        ),
    )
    data = [bars]
    alpha = metrics.acceptance_rate
    if alpha is not None:
        data.append(dict(
            type="scatter", x=[0.5, len(x) + 0.5], y=[round(alpha, 4)] * 2, mode="lines",
            name=f"α = {alpha:.2f} over all drafts", line=dict(color=MEASURED_COLOR, width=1, dash="dot"),
            hoverinfo="skip",
        ))
    # the counts go under the bars, in the tick labels, where the α line cannot cross them
    ticks = dict(tickvals=x, ticktext=[f"{i}<br>{a}/{n}" for i, (a, n) in zip(x, by_position)]) if len(x) <= 10 else {}
    return figure(
        data, "Acceptance by draft position", show_legend=True,
        xaxis=axis("draft position (accepted / reached)" if ticks else "draft position (counts on hover)",
                    dtick=1 if len(x) <= 16 else None,
                    range=[0.5, len(x) + 0.5], **ticks),
        yaxis=axis("β at position", range=[0, 1.12]),
        bargap=0.25,
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.36 if ticks else -0.24, yanchor="top", font=dict(size=10)),
    )


# ---- 3. speed ------------------------------------------------------------------------------
def speed_series(metrics: SpeculationMetrics) -> tuple[list[float], list[float]]:
    """(decode seconds, cumulative tokens/s) after each round, thinned to MAX_POINTS."""
    elapsed_ms, tokens, points = 0.0, 0, []
    for r in metrics.rounds:
        elapsed_ms += r.round_ms
        tokens += r.num_committed
        if elapsed_ms > 0:
            points.append((elapsed_ms / 1000.0, tokens / (elapsed_ms / 1000.0)))
    seconds, rates = [], []
    for _, stop in buckets(len(points)):
        t, rate = points[stop - 1]
        seconds.append(round(t, 3))
        rates.append(round(rate, 2))
    return seconds, rates


def target_only_samples(metrics: SpeculationMetrics) -> tuple[list[float], list[float]]:
    """(decode seconds, tokens/s) of each target-only step timed in the reply: the rounds that
    drafted nothing, at the time they ended (the t₁ samples, as 1000 / ms tokens/s)."""
    elapsed_ms, seconds, rates = 0.0, [], []
    for r in metrics.rounds:
        elapsed_ms += r.round_ms
        step_ms = r.round_ms - r.draft_ms
        if r.num_drafted == 0 and step_ms > 0:
            seconds.append(round(elapsed_ms / 1000.0, 3))
            rates.append(round(1000.0 / step_ms, 2))
    return seconds[-MAX_POINTS:], rates[-MAX_POINTS:]


def speed_figure(metrics: SpeculationMetrics) -> go.Figure:
    """Left: tokens/s so far, and each target-only step timed during the reply (dots) with
    their mean (dashed). Right: the measured speedup against those steps, and the predicted one."""
    seconds, rates = speed_series(metrics)
    if not seconds:
        return empty_figure("Speed", "Tokens/s and the speedup appear after the first round")
    data = [dict(
        type="scatter", x=seconds, y=rates, mode="lines", name="this reply",
        line=dict(color=MEASURED_COLOR, width=2),
        hovertemplate="%{x:.1f} s: %{y:.1f} tok/s<extra></extra>",
    )]
    target_tps = metrics.target_only_tokens_per_s
    sample_x, sample_y = target_only_samples(metrics)
    if sample_x:
        data.append(dict(
            type="scatter", x=sample_x, y=sample_y, mode="markers", name="target-only steps",
            marker=dict(color=BASELINE_COLOR, size=6, symbol="circle-open"),
            hovertemplate="target-only step at %{x:.1f} s: %{y:.1f} tok/s<extra></extra>",
        ))
        data.append(dict(
            type="scatter", x=[0, seconds[-1]], y=[round(target_tps, 2)] * 2, mode="lines",
            name="their mean", line=dict(color=BASELINE_COLOR, width=1.5, dash="dash"),
            hovertemplate=f"target only: {target_tps:.1f} tok/s (timed during this reply)<extra></extra>",
        ))
    measured = evidence.measured_speedup(metrics)
    values = [rounded(measured.value, 3) if measured.shown else None, rounded(evidence.predicted_speedup(metrics), 3)]
    # a bar with no value draws nothing, its text included: say why on the axis instead
    missing = ["held back" if measured.value is not None else "not measured",
               "no drafts" if metrics.num_drafted == 0 else "held back"]
    data.append(dict(
        type="bar", x=["measured", "predicted"], y=values,
        xaxis="x2", yaxis="y2", marker=dict(color=[MEASURED_COLOR, PREDICTED_COLOR]), opacity=0.9,
        text=[why if v is None else f"{v:.2f}×" for v, why in zip(values, missing)], textposition="outside",
        textfont=dict(size=10), cliponaxis=False, showlegend=False,
        hovertemplate="%{x}: %{y:.2f}×<extra></extra>",
    ))
    notes = [
        note(why, name, 0, BASELINE_COLOR, xref="x2", yref="y2", yanchor="bottom")
        for name, v, why in zip(["measured", "predicted"], values, missing) if v is None
    ]
    tps = metrics.tokens_per_s
    title = f"Speed: {tps:.1f} tok/s" if tps else "Speed"
    title += f" vs {target_tps:.1f} target only, timed in it" if target_tps else " (no target-only step timed yet)"
    top = max([v for v in values if v is not None] + [1.0]) * 1.25
    return figure(
        data, title, show_legend=True,
        xaxis=axis("decode time (s)", domain=[0, 0.62], rangemode="tozero"),
        yaxis=axis("tokens/s", rangemode="tozero"),
        xaxis2=axis(None, domain=[0.74, 1], anchor="y2", tickfont=dict(size=10), tickangle=0),
        yaxis2=axis(None, anchor="x2", range=[0, top]),
        shapes=[hline(1, BASELINE_COLOR, xref="x2 domain", yref="y2")],
        annotations=notes,
        bargap=0.35,
    )


def all_figures(
    metrics: SpeculationMetrics, num_speculative_tokens: int | None = None, *, reply: str | None = None,
    hint: str | None = None,
) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    """The four figures of one reply, in display order: α over rounds, by position, speed, theory;
    ``reply`` (e.g. "reply #6") starts each title, so that the charts say which reply they show;
    ``hint`` replaces each figure's own hint when ``metrics`` has no rounds (e.g. after a reload)."""
    figures = (
        acceptance_rate_figure(metrics),
        acceptance_by_position_figure(metrics),
        speed_figure(metrics),
        theory_figure(metrics, num_speculative_tokens),
    )
    if hint and not metrics.rounds:
        figures = tuple(empty_figure(fig.layout.title.text, hint) for fig in figures)  # type: ignore[assignment]
    if reply:
        for fig in figures:
            fig.layout.title.text = f"{reply} · {fig.layout.title.text}"
    return figures


# ---- the whole conversation ------------------------------------------------------------------
BAR_LABEL_PX = 11  # the value over each bar and the reply under it: no smaller (10 px, shrunk, was unreadable)
LABEL_CHAR_PX = 6.5  # the width of a character at BAR_LABEL_PX (digits, "×", lower case), for the fit below
PLOT_WIDTH_PX = 440  # a conversation chart's plot area, about (half the page's width less the axes)


def _fit_bar_labels(data: list[dict], num_replies: int) -> float:
    """Lay out the labels over the bars of ``data`` (the bar traces of one chart, one bar per reply
    each) at BAR_LABEL_PX, never shrunk: as written if every label fits within its bar's share
    of the width, else without the unit, else each turned to run up its bar in one line. A
    trace's ``customdata`` holds its labels as written (the hover shows them), ``_unit`` their
    unit. Returns the room the labels need above the tallest bar, px."""
    share = PLOT_WIDTH_PX / max(num_replies, 1) * 0.7 / len(data)  # a reply's slot, less the gap, per bar

    def two_lines(label: str) -> str:  # "not measured" stands on a flat bar in two short lines
        return label if label[:1].isdigit() else label.replace(" ", "<br>")

    def widest(labels: list[list[str]]) -> float:
        return max(len(line) for row in labels for t in row for line in t.split("<br>")) * LABEL_CHAR_PX

    units = [trace.pop("_unit") for trace in data]
    bare = [[t.removesuffix(unit) for t in trace["customdata"]] for trace, unit in zip(data, units)]
    written = [[two_lines(t) for t in trace["customdata"]] for trace in data]
    short = [[two_lines(t) for t in row] for row in bare]
    turned = widest(short) > share
    labels = bare if turned else written if widest(written) <= share else short
    for trace, row in zip(data, labels):
        trace["text"], trace["textangle"] = row, -90 if turned else 0
    if not turned:
        return BAR_LABEL_PX + 6
    return max([len(t) * LABEL_CHAR_PX for trace in data for t, v in zip(trace["text"], trace["y"]) if v]
               + [BAR_LABEL_PX]) + 6


def conversation_figures(replies: list[tuple[int, str, SpeculationMetrics]]) -> tuple[go.Figure, ...]:
    """Four per-reply bar charts for the conversation so far: α, tokens per round, the measured
    and predicted speedup, and decode speed with the target-only speed timed in each reply.

    Args:
        replies: ``(number, drafter, metrics)`` per reply, in order; bars take the drafter's color.
    """
    titles = ("α by reply", "Tokens per round by reply", "Speedup by reply", "Speed by reply")
    if not replies:
        return tuple(empty_figure(t, "One bar per reply appears here as you chat") for t in titles)
    x = [f"#{n} {d}" for n, d, _ in replies]
    colors = [drafter_kinds.color(d) for _, d, _ in replies]

    drafted = [m.num_drafted > 0 for _, _, m in replies]

    held = [evidence.measured_speedup(m).value is not None for _, _, m in replies]  # measured, too few steps

    def bars(values, name, color=colors, fmt=".2f", suffix="", missing="measure", legend=True):
        # a bar with no value would draw nothing, its text included: a flat bar says why instead
        why = ["no drafts" if missing == "drafts" and not d
               else "held back" if missing in ("held", "drafts") and h else "not measured"
               for d, h in zip(drafted, held)]
        return dict(
            type="bar", x=x, y=[0.0 if v is None else rounded(v, 3) for v in values], name=name,
            marker=dict(color=color), opacity=0.9, showlegend=legend, textposition="outside",
            # never shrunk to the bar's width (plotly's default made them 2-5 px with a dozen replies)
            textfont=dict(size=BAR_LABEL_PX), constraintext="none", cliponaxis=False,
            customdata=[w if v is None else f"{v:{fmt}}{suffix}" for v, w in zip(values, why)], _unit=suffix,
            hovertemplate=f"%{{x}}: %{{customdata}}<extra>{name}</extra>",
        )

    def fig(data, title, ytitle, top, legend=False):
        room = _fit_bar_labels(data, len(replies))  # the tallest bar leaves this much above it, px
        plot_px = FIGURE_HEIGHT - FIGURE_MARGIN["t"] - (FIGURE_MARGIN_LEGEND if legend else FIGURE_MARGIN["b"])
        return figure(data, title, show_legend=legend, barmode="group", bargap=0.3,
                       xaxis=axis(None, type="category", tickfont=dict(size=BAR_LABEL_PX)),
                       yaxis=axis(ytitle, range=[0, top * max(1.2, 1 / (1 - min(room / plot_px, 0.5)))]))

    alphas = [m.acceptance_rate for _, _, m in replies]
    per_round = [m.mean_tokens_per_round for _, _, m in replies]
    measured = [m.measured_speedup if evidence.measured_speedup(m).shown else None for _, _, m in replies]
    predicted = [evidence.predicted_speedup(m) for _, _, m in replies]
    speed = [m.tokens_per_s for _, _, m in replies]
    target = [m.target_only_tokens_per_s for _, _, m in replies]
    top = lambda values, floor=1.0: max([v for v in values if v is not None] + [floor])  # noqa: E731
    speedup_fig = fig(
        [bars(measured, "measured", MEASURED_COLOR, suffix="×", missing="held"),
         bars(predicted, "predicted", PREDICTED_COLOR, suffix="×", missing="drafts")],
        "Speedup by reply (vs target-only steps timed in each)", "speedup ×", top(measured + predicted), legend=True,
    )
    speedup_fig.layout.shapes = [hline(1, BASELINE_COLOR)]
    return (
        fig([bars(alphas, "α", missing="drafts")], "α by reply", "α", 1.0),
        fig([bars(per_round, "tokens/round")], "Tokens per round by reply", "tokens per round", top(per_round)),
        speedup_fig,
        # the reply's bar takes its drafter's colour, so only the grey bar needs a legend entry
        fig([bars(speed, "this reply", colors, ".1f", " tok/s", legend=False),
             bars(target, "target only, timed in it", BASELINE_COLOR, ".1f", " tok/s")],
            "Speed by reply (its drafter's colour) vs target only", "tokens/s", top(speed + target), legend=True),
    )
