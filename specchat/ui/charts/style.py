"""The look every chart of the app shares: a minimal plotly template, colours, sizes and the
small builders the figures are made with. No gradio import.

The app resends every figure whole 2–4 times a second while a reply streams, so a figure is
one validated construction (:func:`figure`), fixed in height, on a template without the
built-in ones' ~10 kB of JSON, with long series thinned (:func:`buckets`) and numbers rounded
(:func:`rounded`). Without data a figure shows its title and a one-line hint
(:func:`empty_figure`) instead of empty axes.

Colors match the token legend (:mod:`specchat.ui.html.render`): accepted green for acceptance,
dark for measured values, teal for predictions, gray for the target-only baseline.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specchat.ui.html.render import KIND_COLORS

FIGURE_HEIGHT = 340  # px (300 left the theory chart's plot too short under its captions)
FIGURE_MARGIN = dict(l=48, r=14, t=40, b=38)  # px
FIGURE_MARGIN_LEGEND = 92  # px: the bottom margin with the legend under the plot
LEGEND_GAP_PX = 52  # px from the plot's foot to the legend: the x axis's tick labels and title (~50 px)
MAX_POINTS = 300  # longest series sent to the browser; longer ones are bucketed

ACCEPTED = KIND_COLORS["accepted"]
RESAMPLED = KIND_COLORS["resampled"]
GRID = "#e9ecef"
GAMMA_COLOR = "#868e96"  # γ per round (adaptive γ)
TEXT = "#495057"

# A minimal template: the built-in ones add ~10 kB of JSON to every figure.
TEMPLATE = go.layout.Template(
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


def axis(title: str | None = None, **extra) -> dict:
    """An axis layout: ``extra``, and the title in the charts' small font."""
    axis = dict(extra)
    if title:
        axis["title"] = dict(text=title, font=dict(size=10))
    return axis


def figure(data: list[dict], title: str, *, show_legend: bool = False, **layout) -> go.Figure:
    """One validated construction (much faster than add_trace / update_* / add_hline)."""
    base = dict(
        template=TEMPLATE,
        height=FIGURE_HEIGHT,
        margin=dict(FIGURE_MARGIN, b=FIGURE_MARGIN_LEGEND if show_legend else FIGURE_MARGIN["b"]),
        title=dict(text=title, x=0.01, xanchor="left", y=0.97, yanchor="top", font=dict(size=13)),
        showlegend=show_legend,
        # below the plot: above it, a legend that wraps on a narrow page ran into the title
        legend=dict(orientation="h", x=0, xanchor="left", yanchor="top", font=dict(size=10)),
        hovermode="closest",
        # keep the mode bar to "download as PNG": the zoom/pan buttons cover titles and legends
        modebar=dict(remove=_MODEBAR_REMOVE, bgcolor="rgba(255,255,255,0.6)"),
    )
    legend = {**base["legend"], **layout.pop("legend", {})}
    base.update(layout)
    if "y" not in legend:  # the legend's top a fixed distance under the plot, clear of the x axis's title
        plot_px = max(base["height"] - base["margin"]["t"] - base["margin"]["b"], 1)  # (y is a fraction of it)
        legend["y"] = -LEGEND_GAP_PX / plot_px
    base["legend"] = legend
    return go.Figure(data=data, layout=base)


def hline(y: float, color: str, *, xref: str = "x domain", yref: str = "y", dash: str = "dash") -> dict:
    """A horizontal line across the plot at ``y`` (a layout shape, drawn below the data)."""
    return dict(
        type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y,
        line=dict(color=color, width=1, dash=dash), layer="below",
    )


def note(text: str, x: float, y: float, color: str, *, xref: str = "paper", yref: str = "paper",
          xanchor: str = "center", yanchor: str = "middle", size: int = 10) -> dict:
    """A text annotation without an arrow (paper coordinates unless ``xref`` / ``yref`` say otherwise)."""
    return dict(
        text=text, x=x, y=y, xref=xref, yref=yref, xanchor=xanchor, yanchor=yanchor,
        showarrow=False, font=dict(size=size, color=color),
    )


def empty_figure(title: str, hint: str) -> go.Figure:
    """A titled figure with a centered hint and no axes: the no-data state."""
    return figure(
        [], title,
        xaxis=dict(visible=False), yaxis=dict(visible=False),
        annotations=[note(hint, 0.5, 0.5, "#868e96", size=12)],
    )


def buckets(n: int, max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """Split range(n) into at most max_points consecutive [start, stop) buckets."""
    size = max(1, math.ceil(n / max_points))
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def rounded(x: float | None, digits: int = 4) -> float | None:
    """``x`` rounded to ``digits`` (the JSON sent to the browser stays small); None stays None."""
    return None if x is None else round(x, digits)
