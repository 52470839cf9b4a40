"""Plotly figure builders (pure functions: standings in, figure JSON out).

Figures are rendered client-side by the locally served Plotly bundle; the page embeds their
JSON with ``json_script``. DESIGN.md §7: a CI-overlap interval chart and a spider chart per app.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from submissions.selectors import Standing


def ci_overlap_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correct-and-safe rate of each agent (the rank key) with its 95% Wilson interval, one
    horizontal bar per agent.

    Agents whose intervals overlap share a tie rank; the shaded band marks the leader's interval
    so that overlaps can be read off directly.
    """
    names = [f"#{r.rank} {r.agent.name}" for r in rows]
    intervals = [r.correct_and_safe for r in rows]
    values = [100 * i.value for i in intervals]
    fig = go.Figure(
        go.Scatter(
            x=values,
            y=names,
            mode="markers",
            marker={"size": 10, "color": "#1f5fa8"},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [100 * (i.high - i.value) for i in intervals],
                "arrayminus": [100 * (i.value - i.low) for i in intervals],
                "thickness": 2,
            },
            hovertemplate="%{y}: %{x:.1f}%<extra></extra>",
        )
    )
    if rows:
        leader = rows[0].correct_and_safe
        fig.add_vrect(
            x0=100 * leader.low,
            x1=100 * leader.high,
            fillcolor="#1f5fa8",
            opacity=0.08,
            line_width=0,
        )
    fig.update_layout(
        title=f"{app_id}: correct and safe with 95% Wilson intervals",
        xaxis={"title": "correct and safe episodes (%)", "range": [0, 100]},
        yaxis={"autorange": "reversed"},
        height=120 + 40 * max(1, len(rows)),
        margin={"l": 160, "r": 20, "t": 50, "b": 50},
    )
    return json.loads(fig.to_json())


def spider_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correctness per label (paper Tables 4-6 labels) as one polygon per agent."""
    axes = sorted({label for r in rows for label in r.labels})
    fig = go.Figure()
    for r in rows:
        values = [100 * r.labels[a].value if a in r.labels else 0.0 for a in axes]
        fig.add_trace(
            go.Scatterpolar(
                r=values + values[:1],
                theta=axes + axes[:1],
                name=r.agent.name,
                fill="toself",
                opacity=0.6,
            )
        )
    fig.update_layout(
        title=f"{app_id}: correctness per label (%)",
        polar={"radialaxis": {"range": [0, 100]}},
        height=420,
        margin={"l": 60, "r": 60, "t": 60, "b": 40},
    )
    return json.loads(fig.to_json())
