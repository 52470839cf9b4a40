"""The agent page's charts (Plotly figures as JSON, drawn by the page with the locally served
plotly.js, as the leaderboard's charts are): correct and safe over time with intervals, and
the board rank over time. Both read well with one submission and with hundreds: a date axis
padded around a lone point, at most a few ticks, smaller markers when there are many."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go

from accounts.agent_selectors import HistoryRow, RankPoint

#: Above this many points per app, markers shrink and error bars thin (the chart stays legible).
MANY_POINTS = 30
#: A time axis spanning less than this is widened to it, centred on the points.
MIN_SPAN = timedelta(days=2)


def _time_axis(times: list[datetime]) -> dict[str, Any]:
    """A date axis with a few readable ticks; a lone point (or a burst within a day) gets a
    range of :data:`MIN_SPAN` around it instead of Plotly's milliseconds."""
    axis: dict[str, Any] = {
        "title": "finished (UTC)",
        "type": "date",
        "nticks": 8,
        "hoverformat": "%Y-%m-%d %H:%M",
    }
    if times:
        first, last = min(times), max(times)
        if last - first < MIN_SPAN:
            middle = first + (last - first) / 2
            half = MIN_SPAN / 2
            axis["range"] = [(middle - half).isoformat(), (middle + half).isoformat()]
    return axis


def _round_marks(rows: list[HistoryRow]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A dotted vertical line and a label "R<n>" at every round submission (shapes,
    annotations)."""
    shapes, annotations = [], []
    for row in rows:
        evaluation_round = row.submission.round
        if evaluation_round is None:
            continue
        when = row.when.isoformat()
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": when,
                "x1": when,
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "width": 1, "color": "#8a5a00"},
            }
        )
        annotations.append(
            {
                "x": when,
                "xref": "x",
                "y": 1,
                "yref": "paper",
                "yanchor": "bottom",
                "text": f"R{evaluation_round.number}",
                "showarrow": False,
                "font": {"size": 10, "color": "#8a5a00"},
            }
        )
    return shapes, annotations


def score_over_time_figure(*, rows: list[HistoryRow], apps: list[str]) -> dict[str, Any]:
    """One line per app: the correct-and-safe rate (%) of each submission with scored episodes,
    with its 95% Wilson interval as an error bar, at the time it finished (or was created);
    hover shows submission, round, n and models. A submission whose reported model changed
    is drawn as a diamond; round submissions are marked by a dotted line labelled "R<n>"."""
    fig = go.Figure()
    times: list[datetime] = []
    for app_id in apps:
        points = [(row, row.scores[app_id]) for row in rows if app_id in row.scores]
        points = [(row, score) for row, score in points if score.n]
        times += [row.when for row, _ in points]
        many = len(points) > MANY_POINTS
        intervals = [score.interval for _, score in points]
        values = [score.rate_pct or 0.0 for _, score in points]
        fig.add_trace(
            go.Scatter(
                x=[row.when.isoformat() for row, _ in points],
                y=[score.rate_pct for _, score in points],
                mode="lines+markers",
                name=app_id,
                marker={
                    "size": [
                        (9 if many else 12) if row.model_changed else (5 if many else 8)
                        for row, _ in points
                    ],
                    "symbol": ["diamond" if row.model_changed else "circle" for row, _ in points],
                },
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [100 * i.high - v for i, v in zip(intervals, values, strict=True)],
                    "arrayminus": [v - 100 * i.low for i, v in zip(intervals, values, strict=True)],
                    "thickness": 1,
                    "width": 0 if many else 3,
                },
                text=[
                    f"submission {row.submission.pk}"
                    + (f", round {row.submission.round.number}" if row.submission.round else "")
                    + f", n={score.n}, 95% [{100 * score.interval.low:.1f}, "
                    + f"{100 * score.interval.high:.1f}]"
                    + (f", model {', '.join(row.models)}" if row.models else "")
                    for row, score in points
                ],
                hovertemplate="%{text}<br>%{x}: %{y:.1f}%<extra>" + app_id + "</extra>",
            )
        )
    shapes, annotations = _round_marks(rows)
    fig.update_layout(
        title="Correct and safe over time (95% Wilson intervals; R<n>: a round)",
        xaxis=_time_axis(times),
        yaxis={"title": "correct and safe episodes (%)", "range": [0, 100]},
        shapes=shapes,
        annotations=annotations,
        height=380,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    figure: dict[str, Any] = json.loads(fig.to_json())
    return figure


def rank_history_figure(*, history: dict[str, list[RankPoint]]) -> dict[str, Any]:
    """One step line per app: the agent's board rank (1 at the top) after each of its
    submissions, with the number of agents on the board then in the hover."""
    fig = go.Figure()
    times: list[datetime] = []
    worst = 1
    for app_id, points in history.items():
        times += [p.when for p in points]
        worst = max(worst, *(p.rank for p in points))
        fig.add_trace(
            go.Scatter(
                x=[p.when.isoformat() for p in points],
                y=[p.rank for p in points],
                mode="lines+markers",
                line={"shape": "hv"},
                marker={"size": 5 if len(points) > MANY_POINTS else 8},
                name=app_id,
                text=[f"submission {p.submission_id}: rank {p.rank} of {p.agents}" for p in points],
                hovertemplate="%{text}<br>%{x}<extra>" + app_id + "</extra>",
            )
        )
    fig.update_layout(
        title="Board rank over time (1 = top; agents whose intervals overlap share a rank)",
        xaxis=_time_axis(times),
        yaxis={
            "title": "rank",
            "range": [worst + 0.5, 0.5],
            "dtick": 1 if worst <= 10 else None,
            "zeroline": False,
        },
        height=300,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.25},
    )
    figure: dict[str, Any] = json.loads(fig.to_json())
    return figure
