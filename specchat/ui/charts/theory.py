"""The charts of the theory, drawn with a reply's measured numbers. No gradio import.

:func:`theory_figure`: the predicted speedup S(γ) for γ = 1..10 from the reply's α and costs,
its best γ and the measured speedup (docs/ALGORITHM.md), and beside it the verify-cost curve
T(k)/T(1) measured in the reply, with the textbook's 1 step for every k. :func:`worth_figure`: "is this drafter
worth it?", α against c for each drafter used in the conversation, with the line α = c
(Leviathan et al. 2023: some γ gives a speedup iff α > c).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specchat.core import evidence, theory
from specchat.core.metrics import SpeculationMetrics
from specchat.ui.charts.style import (
    FIGURE_MARGIN,
    FIGURE_MARGIN_LEGEND,
    RESAMPLED,
    TEXT,
    axis,
    empty_figure,
    figure,
    hline,
    note,
)
from specchat.ui.html.render import BASELINE_COLOR, KIND_COLORS, MEASURED_COLOR, PREDICTED_COLOR

THEORY_MAX_GAMMA = evidence.SHOWN_MAX_GAMMA  # the ledger's best γ is sought in the same range
MAIN_RIGHT = 0.62  # the S(γ) panel's right edge (paper x); the verify-cost panel is to its right


def theory_curve(alpha: float, cost_ratio: float, max_gamma: int = THEORY_MAX_GAMMA) -> list[float]:
    """Leviathan's S(γ) = E[N] / (γc + 1) for γ = 1..max_gamma (theory.predicted_speedup): the
    textbook curve, which assumes verifying γ + 1 tokens costs one target step."""
    return [theory.predicted_speedup(alpha, g, cost_ratio) for g in range(1, max_gamma + 1)]


def theory_figure(metrics: SpeculationMetrics, num_speculative_tokens: int | None = None) -> go.Figure:
    """S(γ) for γ = 1..10 from the reply's measured α and costs (ALGORITHM.md:
    E[N](γ) · t₁ / (γ·d + v(γ + 1))), its best γ (the γ the adaptive controller's formula picks),
    the γ drafted and the measured speedup there, and the textbook S(γ) for comparison.

    Args:
        num_speculative_tokens: the γ to mark as drafted; defaults to the mean γ drafted.
    """
    title = "Theory: predicted speedup S(γ)"
    alpha, cost = metrics.acceptance_rate, metrics.cost_ratio
    gamma = num_speculative_tokens
    if gamma is None and metrics.mean_num_speculative_tokens is not None:
        gamma = max(1, round(metrics.mean_num_speculative_tokens))
    max_gamma = max(THEORY_MAX_GAMMA, gamma or 0)
    measured_curve = metrics.predicted_speedup_curve(max_gamma)
    if alpha is None or cost is None or not math.isfinite(cost) or measured_curve is None:
        hint = ("S(γ) needs α and a timed target-only step: send a longer message with a drafter"
                if alpha is not None else "S(γ) needs a measured α and c: send a message with a drafter")
        return empty_figure(title, hint)
    alpha, cost = min(max(alpha, 0.0), 1.0), max(cost, 0.0)
    xs = list(range(1, max_gamma + 1))
    curve = [round(v, 4) for v in measured_curve]
    textbook = [round(v, 4) for v in theory_curve(alpha, cost, max_gamma)]
    best = 1 + max(range(len(curve)), key=lambda i: (curve[i], -i))
    supported = evidence.supports_prediction(metrics)  # the star (and the ledger's best γ) need the sample
    data = [
        dict(
            type="scatter", x=xs, y=textbook, mode="lines", name="textbook (verify = 1 step)",
            line=dict(color=PREDICTED_COLOR, width=1, dash="dot"),
            hovertemplate="γ = %{x}: E[N]/(γc+1) = %{y:.2f}×<extra></extra>",
        ),
        dict(
            type="scatter", x=xs, y=curve, mode="lines+markers", name="S(γ), measured costs",
            line=dict(color=PREDICTED_COLOR, width=2), marker=dict(size=5),
            hovertemplate="γ = %{x}: S = %{y:.2f}×<extra></extra>",
        ),
    ]
    if supported:
        data.append(dict(
            type="scatter", x=[best], y=[curve[best - 1]], mode="markers", name=f"best γ={best} (adaptive's pick)",
            marker=dict(symbol="star", size=15, color=PREDICTED_COLOR, line=dict(color="white", width=1)),
            hovertemplate="best γ = %{x}: S = %{y:.2f}× (the adaptive controller maximises this)<extra></extra>",
        ))
    shown = evidence.measured_speedup(metrics)
    measured = shown.value if shown.shown else None
    if gamma:
        data.append(dict(
            type="scatter", x=[gamma], y=[curve[gamma - 1]], mode="markers", name=f"γ drafted ≈ {gamma}",
            marker=dict(symbol="circle-open", size=16, color=MEASURED_COLOR, line=dict(width=2)),
            hovertemplate="γ drafted (mean) = %{x}: predicted %{y:.2f}×<extra></extra>",
        ))
        if measured is not None:
            data.append(dict(
                type="scatter", x=[gamma], y=[round(measured, 3)], mode="markers", name="measured",
                marker=dict(symbol="diamond", size=10, color=MEASURED_COLOR),
                hovertemplate="measured at γ ≈ %{x}: %{y:.2f}×<extra></extra>",
            ))
    # the S = 1 label on the side of the line that the curves leave free at the right edge
    # (both below: above it; both above: below it; one each side: the side of the one farther away)
    far = curve[-1] if abs(curve[-1] - 1) >= abs(textbook[-1] - 1) else textbook[-1]
    above = (curve[-1] < 1 and textbook[-1] < 1) or (far >= 1 and not (curve[-1] >= 1 and textbook[-1] >= 1))
    notes = [note("S = 1 (target only)", MAIN_RIGHT, 1, BASELINE_COLOR, yref="y", xanchor="right",
                   yanchor="bottom" if above else "top")]
    contradicted = shown.shown and shown.interval[0] > 1.0  # the reply measured a speedup nonetheless
    captions: list[tuple[str, str]] = []  # (text, colour): lines under the title, above the plot
    if not supported:
        captions.append((f"{metrics.num_verified} judged draft(s), {metrics.num_target_only_rounds} target step(s): "
                         "too few for a best γ or a verdict", TEXT))
    elif curve[best - 1] < 1 and not contradicted:
        # the star still marks the best γ ≥ 1: the one adaptive γ probes while drafting is paused
        why = "α ≤ c" if alpha <= cost else "at the measured costs"
        captions.append((f"{why}: no γ gives a speedup", RESAMPLED))
        captions.append(("adaptive γ pauses drafting (γ = 0) and probes this best γ now and then, to keep measuring α",
                         TEXT))
    elif gamma and abs(gamma - best) >= 2:
        captions.append(("adaptive γ weighs recent rounds and each position's acceptance; this curve averages the reply",
                         TEXT))
    notes += _caption_notes(captions)
    top = max(curve + textbook + [1.0, measured or 0.0])
    headroom = 1.15  # the S = 1 label and the star clear the top
    cost_data, cost_axes, cost_shapes = _verify_cost_panel(metrics)
    if cost_shapes:
        notes.append(note("textbook: 1 step for any k", 1.0, 1, BASELINE_COLOR, xref="x2 domain", yref="y2",
                          xanchor="right", yanchor="top", size=9))
    return figure(
        data + cost_data, f"Theory: S(γ) at α = {alpha:.2f}, c = {cost:.2f}", show_legend=True,
        xaxis=axis("γ (draft tokens per round)", dtick=1 if max_gamma <= 12 else 2, domain=[0, MAIN_RIGHT]),
        yaxis=axis("speedup ×", range=[0, top * headroom]),
        shapes=[hline(1, BASELINE_COLOR, xref="x domain"), *cost_shapes], annotations=notes, **cost_axes,
        # room for two caption lines, there or not (a figure's height never changes while a reply
        # streams), and for the legend's third row
        margin=dict(FIGURE_MARGIN, t=FIGURE_MARGIN["t"] + CAPTION_LINE_PX * MAX_CAPTIONS,
                    b=FIGURE_MARGIN_LEGEND + LEGEND_ROW_PX),
        legend=dict(entrywidth=1 / 3, entrywidthmode="fraction"),  # three a row: seven entries in three rows
    )


CAPTION_LINE_PX = 15  # one caption line (10-11 px text)
MAX_CAPTIONS = 2
LEGEND_ROW_PX = 20  # one row of the legend (10 px text, 15 px symbols)


def _caption_notes(captions: list[tuple[str, str]]) -> list[dict]:
    """The theory chart's captions as lines between its title and its plot (the top margin grows
    by a line each): inside the plot they ran over the curves, the y axis's top label or, at its
    foot, the x axis."""
    return [{**note(text, 0, 1, color, xanchor="left", yanchor="bottom", size=11 if color == RESAMPLED else 10),
             "yshift": 2 + CAPTION_LINE_PX * (len(captions) - 1 - i)} for i, (text, color) in enumerate(captions)]


def _verify_cost_panel(metrics: SpeculationMetrics) -> tuple[list[dict], dict, list[dict]]:
    """The right-hand panel: the verify-cost curve T(k)/T(1), measured in this reply for the k
    its rounds verified (dots: mean of (round − drafting) / t₁; k = 1 is t₁ itself), the
    straight line v(k)/t₁ that S(γ) uses, and the textbook assumption, 1 for every k (dashed).
    Where the dots climb, a longer draft costs more than one target step to verify, which is
    why the measured-cost S(γ) peaks at a smaller γ than the textbook one."""
    points, t1 = metrics.verify_cost_curve(), metrics.target_step_ms
    if not points or len(points) < 2 or not t1:
        return [], {}, []
    ks = [k for k, _, _ in points]
    fit = [metrics.costs.verify_ms(k) for k in range(1, ks[-1] + 1)]
    data = [dict(
        type="scatter", x=ks, y=[round(v, 3) for _, v, _ in points], mode="markers", name="verify cost, measured",
        xaxis="x2", yaxis="y2", marker=dict(size=7, color=MEASURED_COLOR),
        customdata=[n for _, _, n in points],
        hovertemplate="a pass over %{x} tokens: %{y:.2f} target steps (%{customdata} rounds)<extra></extra>",
    )]
    if all(v is not None for v in fit[1:]):
        data.append(dict(
            type="scatter", x=list(range(2, ks[-1] + 1)), y=[round(v / t1, 3) for v in fit[1:]], mode="lines",
            name="v(k)/t₁ used by S(γ)", xaxis="x2", yaxis="y2", line=dict(color=PREDICTED_COLOR, width=1.5),
            hovertemplate="v(%{x})/t₁ = %{y:.2f}<extra></extra>",
        ))
    top = max([v for _, v, _ in points] + [v / t1 for v in fit[1:] if v is not None] + [1.0])
    axes = dict(
        xaxis2=axis("k (tokens per pass)", domain=[MAIN_RIGHT + 0.1, 1.0], dtick=max(1, round(ks[-1] / 5)),
                    range=[0.5, ks[-1] + 0.5], anchor="y2"),
        yaxis2=axis("T(k) / T(1)", range=[0, top * 1.2], anchor="x2"),
    )
    textbook = hline(1, BASELINE_COLOR, xref="x2 domain", yref="y2")
    return data, axes, [textbook]


def _free_spot(points: list, top: float) -> tuple[float, float]:
    """Where the "α > c" note goes: the first of a few spots above the line that no drafter's
    marker or label (drawn to its right, about 0.3 of the width) is near."""
    for x, y in ((0.12 * top, 1.03), (0.02 * top, 0.62), (0.3 * top, 0.78), (0.02 * top, 0.3)):
        if not any(abs(p.alpha - (y - 0.03)) < 0.1 and -0.3 * top < p.cost_ratio - x < 0.35 * top for p in points):
            return x, y
    return 0.12 * top, 1.03


def worth_figure(points: list, current: str | None = None, this_reply=None) -> go.Figure:
    """"Is this drafter worth it?": α against c for each drafter used in the conversation, with
    the line α = c. Above it some γ gives a speedup (Leviathan et al. 2023: S(γ) > 1 for some γ
    iff α > c); on or below it none does.

    Args:
        points: :class:`specchat.ui.html.ledger.DrafterPoint` s (α pooled over the drafter's
            replies, c measured in them).
        current: the drafter of the reply in view (drawn larger).
        this_reply: the reply in view alone (a DrafterPoint of its own α and c), drawn as a
            diamond labelled "this reply": the pooled point is the drafter's over all its replies.
    """
    title = "Is the drafter worth it? α against c"
    shown = [p for p in points if p.cost_ratio is not None]
    if not shown:
        return empty_figure(title, "needs a reply with a drafter and a timed target-only step")
    top = max(1.0, max(p.cost_ratio for p in shown) * 1.1)
    data = [
        dict(type="scatter", x=[0, top, top, 0], y=[0, top, 1.05 * top, 1.05 * top], fill="toself", mode="none",
             fillcolor="rgba(47, 158, 68, 0.07)", hoverinfo="skip", showlegend=False),
        dict(type="scatter", x=[0, top, top], y=[0, top, 0], fill="toself", mode="none",
             fillcolor="rgba(232, 89, 12, 0.07)", hoverinfo="skip", showlegend=False),
        dict(type="scatter", x=[0, top], y=[0, top], mode="lines", name="α = c",
             line=dict(color=BASELINE_COLOR, width=1.5, dash="dash"), hoverinfo="skip", showlegend=False),
    ]
    for p in shown:
        big = p.drafter == current
        data.append(dict(
            type="scatter", x=[round(p.cost_ratio, 4)], y=[round(p.alpha, 4)], mode="markers+text",
            name=p.drafter,
            text=[f"{p.drafter} ({p.num_replies} repl{'y' if p.num_replies == 1 else 'ies'})" if big else p.drafter],
            textposition="middle left" if p.cost_ratio > 0.6 * top else "middle right",
            textfont=dict(size=10, color=p.color),
            marker=dict(size=15 if big else 10, color=p.color, line=dict(color="white", width=1)),
            hovertemplate=(f"{p.drafter}: α = %{{y:.2f}}, c = %{{x:.3f}} ({p.num_replies} repl"
                           f"{'y' if p.num_replies == 1 else 'ies'}, {p.num_drafted} drafted)<extra></extra>"),
        ))
    if this_reply is not None and this_reply.cost_ratio is not None and this_reply.cost_ratio <= top:
        data.append(dict(
            type="scatter", x=[round(this_reply.cost_ratio, 4)], y=[round(this_reply.alpha, 4)], mode="markers",
            name="this reply", marker=dict(size=11, symbol="diamond-open", color=this_reply.color, line=dict(width=2)),
            hovertemplate=(f"this reply ({this_reply.drafter}): α = %{{y:.2f}}, c = %{{x:.3f}} "
                           f"({this_reply.num_drafted} drafted)<extra></extra>"),
        ))
    notes = [
        note("α > c: some γ speeds up", *_free_spot(shown, top), KIND_COLORS["accepted"], xref="x", yref="y",
              xanchor="left", yanchor="top"),
        note("α ≤ c: no γ does", 0.97, 0.03, RESAMPLED, xanchor="right", yanchor="bottom"),
    ]
    if top > 1:
        notes.append(note("c > 1: a drafter step costs more than a target step; nothing pays", 0.97, 0.12,
                           RESAMPLED, xanchor="right", yanchor="bottom", size=9))
    return figure(
        data, title, xaxis=axis("c: drafter step / target step (measured)", range=[-0.04 * top, 1.02 * top]),
        yaxis=axis("α: acceptance rate (measured)", range=[0, 1.05]),
        annotations=notes,
    )
