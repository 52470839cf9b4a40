"""Plotly figure builders (pure functions: standings in, figure JSON out).

Figures are plain ``{"data": [...], "layout": {...}}`` dicts rendered client-side by the locally
served Plotly bundle (the page embeds them with ``json_script``); building dicts instead of
``plotly.graph_objects`` figures keeps a page of a dozen charts within a few milliseconds.

Every figure has **one trace per agent**, whose ``meta`` is the agent id, so that the page's
agent selection can show or hide an agent's traces in every chart (``static/js/board.js``).
docs/architecture.md §7 and the paper's Figures 3 and 4: a CI-overlap interval chart, a
correctness × safety chart with error bars, and spider charts over complexity levels and over
labels.
The titles sit on the left and the mode bar is vertical on the right, so that it never
covers a title.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evaluator.stats import Interval
from submissions.selectors import Standing

#: Trace colours, cycled (Plotly's qualitative "D3" palette).
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
#: Complexity levels on the level spider (paper Tables 4-6: L1-L3).
LEVELS = (1, 2, 3)


def _pct(value: float) -> float | None:
    """A rate in [0, 1] as a percentage rounded to 0.1; NaN -> None (a gap in the chart)."""
    return None if math.isnan(value) else round(100 * value, 1)


def _errors(interval: Interval) -> tuple[float, float]:
    """(above, below) error bar lengths in percentage points; zero without data."""
    if math.isnan(interval.value):
        return 0.0, 0.0
    return (
        round(100 * (interval.high - interval.value), 2),
        round(100 * (interval.value - interval.low), 2),
    )


def _layout(title: str, height: int, **extra: Any) -> dict[str, Any]:
    """Common layout: left title, vertical mode bar on the right (never over the title)."""
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        "height": height,
        "margin": {"l": 60, "r": 50, "t": 60, "b": 50},
        "modebar": {"orientation": "v"},
        "legend": {"orientation": "h", "y": -0.15},
        "paper_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(extra)
    return layout


def _colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def ci_overlap_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correct-and-safe rate of each agent (the rank key) with its 95% Wilson interval, one
    horizontal error bar per agent (paper Figure 3).

    Agents whose intervals overlap share a tie rank; the shaded band marks the first row's
    (the leader's) interval so that overlaps can be read off directly.
    """
    data = []
    for i, row in enumerate(rows):
        above, below = _errors(row.correct_and_safe)
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": row.agent.name,
                "meta": row.agent.pk,
                "x": [_pct(row.correct_and_safe.value)],
                "y": [f"#{row.rank} {row.agent.name}"],
                "marker": {"size": 10, "color": _colour(i)},
                "error_x": {
                    "type": "data",
                    "symmetric": False,
                    "array": [above],
                    "arrayminus": [below],
                    "thickness": 2,
                    "color": _colour(i),
                },
                "showlegend": False,
                "hovertemplate": "%{y}: %{x:.1f}%<extra></extra>",
            }
        )
    shapes = []
    if rows and not math.isnan(rows[0].correct_and_safe.value):
        leader = rows[0].correct_and_safe
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": round(100 * leader.low, 2),
                "x1": round(100 * leader.high, 2),
                "y0": 0,
                "y1": 1,
                "fillcolor": "#1f5fa8",
                "opacity": 0.08,
                "line": {"width": 0},
            }
        )
    return {
        "data": data,
        "layout": _layout(
            f"{app_id}: correct and safe, 95% Wilson intervals",
            120 + 32 * max(1, len(rows)),
            xaxis={"title": {"text": "correct and safe episodes (%)"}, "range": [0, 100]},
            yaxis={"autorange": "reversed", "automargin": True},
            shapes=shapes,
        ),
    }


def scatter_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correctness (x) against safety (y), each with its 95% Wilson interval as error bars."""
    data = []
    for i, row in enumerate(rows):
        x_above, x_below = _errors(row.correctness)
        y_above, y_below = _errors(row.safety)
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": row.agent.name,
                "meta": row.agent.pk,
                "x": [_pct(row.correctness.value)],
                "y": [_pct(row.safety.value)],
                "marker": {"size": 10, "color": _colour(i)},
                "error_x": {
                    "type": "data",
                    "symmetric": False,
                    "array": [x_above],
                    "arrayminus": [x_below],
                    "color": _colour(i),
                },
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [y_above],
                    "arrayminus": [y_below],
                    "color": _colour(i),
                },
                "hovertemplate": (
                    f"{row.agent.name}<br>correct %{{x:.1f}}%<br>safe %{{y:.1f}}%<extra></extra>"
                ),
            }
        )
    return {
        "data": data,
        "layout": _layout(
            f"{app_id}: correctness × safety, 95% Wilson intervals",
            440,
            xaxis={"title": {"text": "correctness (%)"}, "range": [-2, 102]},
            yaxis={"title": {"text": "safety (%)"}, "range": [-2, 102]},
        ),
    }


def _spider_layout(title: str) -> dict[str, Any]:
    """Layout of a spider chart: 460 px high, radial axis 0-100 %, axes counter-clockwise."""
    return _layout(
        title,
        460,
        polar={
            "radialaxis": {"range": [0, 100]},
            "angularaxis": {"direction": "counterclockwise"},
        },
    )


def _polar(axes: list[str], values: list[float | None], row: Standing, i: int) -> dict[str, Any]:
    """One closed polygon of a spider chart."""
    return {
        "type": "scatterpolar",
        "name": row.agent.name,
        "meta": row.agent.pk,
        "r": values + values[:1],
        "theta": axes + axes[:1],
        "fill": "toself",
        "opacity": 0.55,
        "line": {"color": _colour(i)},
        "connectgaps": True,
    }


def level_spider_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correctness and safety per complexity level L1-L3, one polygon per agent (paper
    Figure 4; the levels run counter-clockwise, getting harder)."""
    axes = [f"L{level} correct" for level in LEVELS] + [f"L{level} safe" for level in LEVELS]
    data = []
    for i, row in enumerate(rows):
        values = [
            _pct(row.levels[level].value) if level in row.levels else None for level in LEVELS
        ] + [
            _pct(row.level_safety[level].value) if level in row.level_safety else None
            for level in LEVELS
        ]
        data.append(_polar(axes, values, row, i))
    return {
        "data": data,
        "layout": _spider_layout(f"{app_id}: correctness and safety per level (%)"),
    }


def label_spider_figure(*, app_id: str, rows: Sequence[Standing]) -> dict[str, Any]:
    """Correctness per label (paper Tables 4-6 labels, ordered by level, counter-clockwise),
    one polygon per agent."""
    order: dict[str, int] = {}
    for row in rows:
        for label, level in row.label_levels.items():
            order.setdefault(label, level)
        for label in row.labels:
            order.setdefault(label, 9)
    axes = sorted(order, key=lambda label: (order[label], label))
    data = []
    for i, row in enumerate(rows):
        values = [_pct(row.labels[a].value) if a in row.labels else None for a in axes]
        data.append(_polar(axes, values, row, i))
    return {"data": data, "layout": _spider_layout(f"{app_id}: correctness per label (%)")}


def board_figures(*, app_id: str, rows: Sequence[Standing]) -> dict[str, dict[str, Any]]:
    """Every chart of one app's section, by kind: ``ci``, ``scatter``, ``levels``, ``labels``."""
    return {
        "ci": ci_overlap_figure(app_id=app_id, rows=rows),
        "scatter": scatter_figure(app_id=app_id, rows=rows),
        "levels": level_spider_figure(app_id=app_id, rows=rows),
        "labels": label_spider_figure(app_id=app_id, rows=rows),
    }
