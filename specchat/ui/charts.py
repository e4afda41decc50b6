"""Running statistics → plotly figures for the app. No gradio import.

Each function takes a :class:`~specchat.core.metrics.SpeculationMetrics` and returns a small
``go.Figure`` (fixed height, a minimal template, long series thinned to a few hundred points)
because the app resends every figure whole 2–4 times a second while it streams. Without data a
figure shows its title and a one-line hint instead of empty axes.

Colors match the token legend (:mod:`specchat.ui.render`): accepted green for acceptance,
dark for measured values, teal for predictions, gray for the target-only baseline.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specchat.core import theory
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds
from specchat.ui.render import BASELINE_COLOR, KIND_COLORS, MEASURED_COLOR, PREDICTED_COLOR

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
]

FIGURE_HEIGHT = 300  # px
MAX_POINTS = 300  # longest series sent to the browser; longer ones are bucketed
THEORY_MAX_GAMMA = 10

ACCEPTED = KIND_COLORS["accepted"]
RESAMPLED = KIND_COLORS["resampled"]
GRID = "#e9ecef"
GAMMA_COLOR = "#868e96"  # γ per round (adaptive γ)
TEXT = "#495057"

# A minimal template: the built-in ones add ~10 kB of JSON to every figure.
_TEMPLATE = go.layout.Template(
    layout=dict(
        font=dict(family="system-ui, -apple-system, Segoe UI, sans-serif", size=11, color=TEXT),
        paper_bgcolor="white",
        plot_bgcolor="white",
        xaxis=dict(gridcolor=GRID, zeroline=False, linecolor="#ced4da", ticks="", automargin=True),
        yaxis=dict(gridcolor=GRID, zeroline=False, linecolor="#ced4da", ticks="", automargin=True),
        hoverlabel=dict(font_size=11),
    )
)


_MODEBAR_REMOVE = [
    "zoom", "pan", "select", "lasso", "zoomIn", "zoomOut", "autoScale", "resetScale",
    "toggleSpikelines", "hoverClosestCartesian", "hoverCompareCartesian",
]


def _axis(title: str | None = None, **extra) -> dict:
    axis = dict(extra)
    if title:
        axis["title"] = dict(text=title, font=dict(size=10))
    return axis


def _figure(data: list[dict], title: str, *, show_legend: bool = False, **layout) -> go.Figure:
    """One validated construction (much faster than add_trace / update_* / add_hline)."""
    base = dict(
        template=_TEMPLATE,
        height=FIGURE_HEIGHT,
        margin=dict(l=48, r=14, t=40, b=92 if show_legend else 38),
        title=dict(text=title, x=0.01, xanchor="left", y=0.97, yanchor="top", font=dict(size=13)),
        showlegend=show_legend,
        # below the plot: above it, a legend that wraps on a narrow page ran into the title
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.24, yanchor="top", font=dict(size=10)),
        hovermode="closest",
        # keep the mode bar to "download as PNG": the zoom/pan buttons cover titles and legends
        modebar=dict(remove=_MODEBAR_REMOVE, bgcolor="rgba(255,255,255,0.6)"),
    )
    base.update(layout)
    return go.Figure(data=data, layout=base)


def _hline(y: float, color: str, *, xref: str = "x domain", yref: str = "y", dash: str = "dash") -> dict:
    return dict(
        type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y,
        line=dict(color=color, width=1, dash=dash), layer="below",
    )


def _note(text: str, x: float, y: float, color: str, *, xref: str = "paper", yref: str = "paper",
          xanchor: str = "center", yanchor: str = "middle", size: int = 10) -> dict:
    return dict(
        text=text, x=x, y=y, xref=xref, yref=yref, xanchor=xanchor, yanchor=yanchor,
        showarrow=False, font=dict(size=size, color=color),
    )


def _empty(title: str, hint: str) -> go.Figure:
    """A titled figure with a centered hint and no axes: the no-data state."""
    return _figure(
        [], title,
        xaxis=dict(visible=False), yaxis=dict(visible=False),
        annotations=[_note(hint, 0.5, 0.5, "#868e96", size=12)],
    )


def _buckets(n: int, max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """Split range(n) into at most max_points consecutive [start, stop) buckets."""
    size = max(1, math.ceil(n / max_points))
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


# ---- 1. acceptance rate over rounds ---------------------------------------------------------
def acceptance_rate_figure(metrics: SpeculationMetrics) -> go.Figure:
    """Cumulative α and accepted/judged drafts per round (per bucket of rounds for long replies),
    and γ per round on a right-hand axis (it moves when adaptive γ is on).

    Judged drafts are the accepted ones plus the first rejected one (metrics.num_verified).
    """
    title = "Acceptance rate α over rounds"
    if not metrics.rounds:
        return _empty(title, "Send a message: α appears after the first round")
    if not metrics.num_drafted:
        return _empty(title, "Nothing drafted (target only): pick a drafter other than 'none'")
    rounds = metrics.rounds
    cumulative = metrics.cumulative_acceptance_rate()
    x, per_bucket, custom, x_cum, y_cum = [], [], [], [], []
    for start, stop in _buckets(len(rounds)):
        accepted = sum(r.num_accepted for r in rounds[start:stop])
        drafted = sum(r.num_drafted for r in rounds[start:stop])
        judged = sum(len(r.accepted_mask) for r in rounds[start:stop])
        label = f"round {start + 1}" if stop - start == 1 else f"rounds {start + 1}–{stop}"
        x_cum.append(stop)
        y_cum.append(_r(cumulative[stop - 1]))
        if drafted:
            x.append(_r((start + 1 + stop) / 2, 2))
            per_bucket.append(_r(accepted / judged))
            custom.append([label, accepted, judged, drafted])
    gamma_x, gamma_y = [], []
    for start, stop in _buckets(len(rounds)):
        drafting = [r.num_speculative_tokens for r in rounds[start:stop] if r.num_speculative_tokens]
        if drafting:
            gamma_x.append(_r((start + 1 + stop) / 2, 2))
            gamma_y.append(_r(sum(drafting) / len(drafting), 2))
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
    return _figure(
        data, f"Acceptance rate α = {metrics.acceptance_rate:.2f}", show_legend=True,
        xaxis=_axis("round", rangemode="tozero"),
        yaxis=_axis("accepted / judged drafts", range=[-0.03, 1.05]),
        yaxis2=dict(
            title=dict(text="γ", font=dict(size=11)), overlaying="y", side="right", showgrid=False,
            rangemode="tozero", range=[0, max(gamma_y, default=1) * 1.1 + 0.5], color=GAMMA_COLOR, tickformat="d",
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
        return _empty(title, "Per-position acceptance appears once drafts are verified")
    x = list(range(1, len(by_position) + 1))
    y = [_r(a / n) if n else None for a, n in by_position]
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
    return _figure(
        data, "Acceptance by draft position", show_legend=True,
        xaxis=_axis("draft position (accepted / reached)" if ticks else "draft position (counts on hover)",
                    dtick=1 if len(x) <= 16 else None,
                    range=[0.5, len(x) + 0.5], **ticks),
        yaxis=_axis("β at position", range=[0, 1.12]),
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
    for _, stop in _buckets(len(points)):
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
        return _empty("Speed", "Tokens/s and the speedup appear after the first round")
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
    values = [_r(metrics.measured_speedup, 3), _r(metrics.predicted_speedup, 3)]
    # a bar with no value draws nothing, its text included: say why on the axis instead
    missing = ["not measured", "no drafts" if metrics.num_drafted == 0 else "not measured"]
    data.append(dict(
        type="bar", x=["measured", "predicted"], y=values,
        xaxis="x2", yaxis="y2", marker=dict(color=[MEASURED_COLOR, PREDICTED_COLOR]), opacity=0.9,
        text=[why if v is None else f"{v:.2f}×" for v, why in zip(values, missing)], textposition="outside",
        textfont=dict(size=10), cliponaxis=False, showlegend=False,
        hovertemplate="%{x}: %{y:.2f}×<extra></extra>",
    ))
    notes = [
        _note(why, name, 0, BASELINE_COLOR, xref="x2", yref="y2", yanchor="bottom")
        for name, v, why in zip(["measured", "predicted"], values, missing) if v is None
    ]
    tps = metrics.tokens_per_s
    title = f"Speed: {tps:.1f} tok/s" if tps else "Speed"
    title += f" vs {target_tps:.1f} target only, timed in it" if target_tps else " (no target-only step timed yet)"
    top = max([v for v in values if v is not None] + [1.0]) * 1.25
    return _figure(
        data, title, show_legend=True,
        xaxis=_axis("decode time (s)", domain=[0, 0.62], rangemode="tozero"),
        yaxis=_axis("tokens/s", rangemode="tozero"),
        xaxis2=_axis(None, domain=[0.74, 1], anchor="y2", tickfont=dict(size=10), tickangle=0),
        yaxis2=_axis(None, anchor="x2", range=[0, top]),
        shapes=[_hline(1, BASELINE_COLOR, xref="x2 domain", yref="y2")],
        annotations=notes,
        bargap=0.35,
    )


# ---- 4. theory -----------------------------------------------------------------------------
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
        return _empty(title, hint)
    alpha, cost = min(max(alpha, 0.0), 1.0), max(cost, 0.0)
    xs = list(range(1, max_gamma + 1))
    curve = [round(v, 4) for v in measured_curve]
    textbook = [round(v, 4) for v in theory_curve(alpha, cost, max_gamma)]
    best = 1 + max(range(len(curve)), key=lambda i: (curve[i], -i))
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
        dict(
            type="scatter", x=[best], y=[curve[best - 1]], mode="markers", name=f"best γ={best} (adaptive's pick)",
            marker=dict(symbol="star", size=15, color=PREDICTED_COLOR, line=dict(color="white", width=1)),
            hovertemplate="best γ = %{x}: S = %{y:.2f}× (the adaptive controller maximises this)<extra></extra>",
        ),
    ]
    measured = metrics.measured_speedup
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
    notes = [_note("S = 1 (target only)", 1, 1, BASELINE_COLOR, yref="y", xanchor="right",
                   yanchor="bottom" if above else "top")]
    if curve[best - 1] < 1:
        # the star still marks γ ≥ 1: adaptive γ keeps drafting (one token at least) to keep measuring α
        why = "α ≤ c" if alpha <= cost else "at the measured costs"
        notes.append(_note(f"{why}: no γ gives a speedup", 0.5, 0.95, RESAMPLED, size=11))
        notes.append(_note("adaptive γ still drafts its best γ ≥ 1, to keep measuring α", 0.5, 0.87, TEXT, size=9))
    elif gamma and abs(gamma - best) >= 2:
        notes.append(_note(
            "adaptive γ weighs recent rounds and each position's acceptance; this curve averages the reply",
            0.5, 0.02, TEXT, size=9, yanchor="bottom",
        ))
    top = max(curve + textbook + [1.0, measured or 0.0])
    headroom = 1.5 if curve[best - 1] < 1 else 1.15  # room for the notes above the curves
    return _figure(
        data, f"Theory: S(γ) at α = {alpha:.2f}, c = {cost:.2f}", show_legend=True,
        xaxis=_axis("γ (draft tokens per round)", dtick=1 if max_gamma <= 12 else 2),
        yaxis=_axis("speedup ×", range=[0, top * headroom]),
        shapes=[_hline(1, BASELINE_COLOR)], annotations=notes,
    )


def _free_spot(points: list, top: float) -> tuple[float, float]:
    """Where the "α > c" note goes: the first of a few spots above the line that no drafter's
    marker or label (drawn to its right, about 0.3 of the width) is near."""
    for x, y in ((0.12 * top, 1.03), (0.02 * top, 0.62), (0.3 * top, 0.78), (0.02 * top, 0.3)):
        if not any(abs(p.alpha - (y - 0.03)) < 0.1 and -0.3 * top < p.cost_ratio - x < 0.35 * top for p in points):
            return x, y
    return 0.12 * top, 1.03


def worth_figure(points: list, current: str | None = None) -> go.Figure:
    """"Is this drafter worth it?": α against c for each drafter used in the conversation, with
    the line α = c. Above it some γ gives a speedup (Leviathan et al. 2023: S(γ) > 1 for some γ
    iff α > c); on or below it none does.

    Args:
        points: :class:`specchat.ui.ledger_view.DrafterPoint` s (α pooled over the drafter's
            replies, c measured in them).
        current: the drafter of the reply in view (drawn larger).
    """
    title = "Is the drafter worth it? α against c"
    shown = [p for p in points if p.cost_ratio is not None]
    if not shown:
        return _empty(title, "needs a reply with a drafter and a timed target-only step")
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
            name=p.drafter, text=[f"{p.drafter}{' (this reply)' if big else ''}"],
            textposition="middle left" if p.cost_ratio > 0.6 * top else "middle right",
            textfont=dict(size=10, color=p.color),
            marker=dict(size=15 if big else 10, color=p.color, line=dict(color="white", width=1)),
            hovertemplate=(f"{p.drafter}: α = %{{y:.2f}}, c = %{{x:.3f}} ({p.num_replies} repl"
                           f"{'y' if p.num_replies == 1 else 'ies'}, {p.num_drafted} drafted)<extra></extra>"),
        ))
    notes = [
        _note("α > c: some γ speeds up", *_free_spot(shown, top), KIND_COLORS["accepted"], xref="x", yref="y",
              xanchor="left", yanchor="top"),
        _note("α ≤ c: no γ does", 0.97, 0.03, RESAMPLED, xanchor="right", yanchor="bottom"),
    ]
    if top > 1:
        notes.append(_note("c > 1: a drafter step costs more than a target step; nothing pays", 0.97, 0.12,
                           RESAMPLED, xanchor="right", yanchor="bottom", size=9))
    return _figure(
        data, title, xaxis=_axis("c: drafter step / target step (measured)", range=[-0.04 * top, 1.02 * top]),
        yaxis=_axis("α: acceptance rate (measured)", range=[0, 1.05]),
        annotations=notes,
    )


def all_figures(
    metrics: SpeculationMetrics, num_speculative_tokens: int | None = None
) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    """The four figures of one reply, in display order: α over rounds, by position, speed, theory."""
    return (
        acceptance_rate_figure(metrics),
        acceptance_by_position_figure(metrics),
        speed_figure(metrics),
        theory_figure(metrics, num_speculative_tokens),
    )


# ---- the whole conversation ------------------------------------------------------------------
def conversation_figures(replies: list[tuple[int, str, SpeculationMetrics]]) -> tuple[go.Figure, ...]:
    """Four per-reply bar charts for the conversation so far: α, tokens per round, the measured
    and predicted speedup, and decode speed with the target-only speed timed in each reply.

    Args:
        replies: ``(number, drafter, metrics)`` per reply, in order; bars take the drafter's color.
    """
    titles = ("α by reply", "Tokens per round by reply", "Speedup by reply", "Speed by reply")
    if not replies:
        return tuple(_empty(t, "One bar per reply appears here as you chat") for t in titles)
    x = [f"#{n} {d}" for n, d, _ in replies]
    colors = [drafter_kinds.color(d) for _, d, _ in replies]

    drafted = [m.num_drafted > 0 for _, _, m in replies]

    def bars(values, name, color=colors, fmt=".2f", suffix="", missing="measure", legend=True):
        # a bar with no value would draw nothing, its text included: a flat bar says why instead
        why = ["no<br>drafts" if missing == "drafts" and not d else "not<br>measured" for d in drafted]
        return dict(
            type="bar", x=x, y=[0.0 if v is None else _r(v, 3) for v in values], name=name,
            marker=dict(color=color), opacity=0.9, showlegend=legend,
            text=[w if v is None else f"{v:{fmt}}{suffix}" for v, w in zip(values, why)], textposition="outside",
            textfont=dict(size=10), cliponaxis=False, hovertemplate=f"%{{x}}: %{{text}}<extra>{name}</extra>",
        )

    def fig(data, title, ytitle, top, legend=False):
        return _figure(data, title, show_legend=legend, barmode="group", bargap=0.3,
                       xaxis=_axis(None, type="category"), yaxis=_axis(ytitle, range=[0, top * 1.2]))

    alphas = [m.acceptance_rate for _, _, m in replies]
    per_round = [m.mean_tokens_per_round for _, _, m in replies]
    measured = [m.measured_speedup for _, _, m in replies]
    predicted = [m.predicted_speedup for _, _, m in replies]
    speed = [m.tokens_per_s for _, _, m in replies]
    target = [m.target_only_tokens_per_s for _, _, m in replies]
    top = lambda values, floor=1.0: max([v for v in values if v is not None] + [floor])  # noqa: E731
    speedup_fig = fig(
        [bars(measured, "measured", MEASURED_COLOR, suffix="×"),
         bars(predicted, "predicted", PREDICTED_COLOR, suffix="×", missing="drafts")],
        "Speedup by reply (vs target-only steps timed in each)", "speedup ×", top(measured + predicted), legend=True,
    )
    speedup_fig.layout.shapes = [_hline(1, BASELINE_COLOR)]
    return (
        fig([bars(alphas, "α", missing="drafts")], "α by reply", "α", 1.0),
        fig([bars(per_round, "tokens/round")], "Tokens per round by reply", "tokens per round", top(per_round)),
        speedup_fig,
        # the reply's bar takes its drafter's colour, so only the grey bar needs a legend entry
        fig([bars(speed, "this reply", colors, ".1f", " tok/s", legend=False),
             bars(target, "target only, timed in it", BASELINE_COLOR, ".1f", " tok/s")],
            "Speed by reply (its drafter's colour) vs target only", "tokens/s", top(speed + target), legend=True),
    )


# ---- the benchmark (python -m specchat bench) -------------------------------------------------
DRAFTER_COLORS = {name: kind.color for name, kind in drafter_kinds.DRAFTER_KINDS.items()}


def bench_figure(summary: dict, meta: dict) -> go.Figure:
    """Two panels from ``bench.summarize``: speedup by prompt group for each drafter (specchat
    with adaptive γ, solid; transformers' matching call, hatched), and speedup against fixed γ
    with adaptive γ as a dashed line, per drafter. Speedup is over specchat target-only."""
    from plotly.subplots import make_subplots

    configs = summary["configs"]
    groups = [g for g in ("code", "edit", "passage", "chat")
              if any(g in e["groups"] for e in configs.values())]
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.08,
        subplot_titles=("speedup by prompt group (median)", "fixed γ vs adaptive γ (median, same prompts)"),
    )
    for name, e in configs.items():
        if e["drafter"] == "none" or e["gamma"] not in ("adaptive", "auto"):
            continue
        ours = e["engine"] == "specchat"
        fig.add_trace(go.Bar(
            x=groups, y=[_r(e["groups"].get(g, {}).get("speedup"), 3) for g in groups],
            name=f"{e['drafter']}" if ours else f"{e['drafter']} (transformers)",
            legendgroup=e["drafter"], marker=dict(
                color=DRAFTER_COLORS.get(e["drafter"], MEASURED_COLOR),
                pattern=dict(shape="" if ours else "/", fillmode="overlay" if ours else "replace", solidity=0.4),
                line=dict(color=DRAFTER_COLORS.get(e["drafter"], MEASURED_COLOR), width=1),
            ),
            opacity=1.0 if ours else 0.55,
            hovertemplate=f"{name}<br>%{{x}}: %{{y:.2f}}×<extra></extra>",
        ), row=1, col=1)
    drafters = list(dict.fromkeys(e["drafter"] for e in configs.values() if e["engine"] == "specchat" and e["drafter"] != "none"))
    for drafter in drafters:
        fixed = sorted(
            (int(e["gamma"]), e["overall"]["speedup"]) for e in configs.values()
            if e["engine"] == "specchat" and e["drafter"] == drafter and e["gamma"].isdigit()
        )
        color = DRAFTER_COLORS.get(drafter, MEASURED_COLOR)
        if fixed:
            fig.add_trace(go.Scatter(
                x=[g for g, _ in fixed], y=[_r(s, 3) for _, s in fixed], mode="lines+markers",
                name=f"{drafter} fixed γ", legendgroup=drafter, showlegend=False, line=dict(color=color),
                hovertemplate=f"{drafter} γ=%{{x}}: %{{y:.2f}}×<extra></extra>",
            ), row=1, col=2)
        adaptive = configs.get(f"specchat {drafter} adaptive", {}).get("speedup_on_fixed_gamma_prompts")
        if adaptive is not None and fixed:
            lo, hi = fixed[0][0], fixed[-1][0]
            fig.add_trace(go.Scatter(
                x=[lo - 0.5, hi + 0.5] if lo == hi else [lo, hi], y=[_r(adaptive, 3)] * 2, mode="lines",
                name=f"{drafter} adaptive", legendgroup=drafter, showlegend=False,
                line=dict(color=color, dash="dash"),
                hovertemplate=f"{drafter} adaptive γ: %{{y:.2f}}×<extra></extra>",
            ), row=1, col=2)
    for col in (1, 2):
        fig.add_hline(y=1.0, line=dict(color=BASELINE_COLOR, width=1, dash="dot"), row=1, col=col)
    hints = {1: "not measured: no drafter ran with adaptive γ", 2: "not measured: no fixed γ ran (--gammas 1 2 4 8)"}
    for col, hint in hints.items():
        axis = "x" if col == 1 else "x2"
        if not any(getattr(t, "xaxis", None) == axis for t in fig.data):
            # paper coordinates: plotly.js places "x2 domain" on the first subplot when no trace uses x2
            x_domain = fig.layout["xaxis" if col == 1 else "xaxis2"].domain
            y_domain = fig.layout["yaxis" if col == 1 else "yaxis2"].domain
            fig.add_annotation(text=hint, xref="paper", yref="paper", x=sum(x_domain) / 2, y=sum(y_domain) / 2,
                               xanchor="center", yanchor="middle", showarrow=False,
                               font=dict(size=12, color=BASELINE_COLOR))
    machine = f"{meta.get('processor', '?')}, {meta.get('torch_threads', '?')} threads, {meta.get('device', '?')}"
    fig.update_layout(
        template=_TEMPLATE, height=430, width=1100, barmode="group",
        title=dict(
            text=f"specchat bench: {meta.get('target', '')} ({meta.get('dtype', '')}), greedy, "
                 f"{meta.get('max_new_tokens', '?')} new tokens<br><sup>{machine}; dashed = adaptive γ, "
                 "hatched = transformers' matching call; speedup over specchat target-only</sup>",
            x=0.01, xanchor="left", font=dict(size=14),
        ),
        legend=dict(orientation="h", y=-0.18, x=0, font=dict(size=11)),
        margin=dict(l=56, r=20, t=90, b=80),
    )
    fig.update_yaxes(title_text="speedup ×", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="speedup ×", rangemode="tozero", row=1, col=2)
    fixed_gammas = sorted({int(e["gamma"]) for e in configs.values() if e["gamma"].isdigit()})
    fig.update_xaxes(title_text="γ (draft tokens per round)", tickvals=fixed_gammas or None, row=1, col=2)
    return fig
