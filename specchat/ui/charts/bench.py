"""The benchmark's figure (``python -m specchat bench``): speedup by prompt group and drafter,
and fixed γ against adaptive γ. No gradio import.
"""

from __future__ import annotations

import plotly.graph_objects as go

from specchat.drafters import kinds as drafter_kinds
from specchat.ui.charts.style import TEMPLATE, rounded
from specchat.ui.html.render import BASELINE_COLOR, MEASURED_COLOR

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
            x=groups, y=[rounded(e["groups"].get(g, {}).get("speedup"), 3) for g in groups],
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
                x=[g for g, _ in fixed], y=[rounded(s, 3) for _, s in fixed], mode="lines+markers",
                name=f"{drafter} fixed γ", legendgroup=drafter, showlegend=False, line=dict(color=color),
                hovertemplate=f"{drafter} γ=%{{x}}: %{{y:.2f}}×<extra></extra>",
            ), row=1, col=2)
        adaptive = configs.get(f"specchat {drafter} adaptive", {}).get("speedup_on_fixed_gamma_prompts")
        if adaptive is not None and fixed:
            lo, hi = fixed[0][0], fixed[-1][0]
            fig.add_trace(go.Scatter(
                x=[lo - 0.5, hi + 0.5] if lo == hi else [lo, hi], y=[rounded(adaptive, 3)] * 2, mode="lines",
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
        template=TEMPLATE, height=430, width=1100, barmode="group",
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
