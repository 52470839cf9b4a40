"""The agent page's score-over-time chart (Plotly figure as JSON, drawn by the page with the
locally served plotly.js, as the leaderboard's charts are)."""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go

from accounts.agent_selectors import HistoryRow


def score_over_time_figure(*, rows: list[HistoryRow], apps: list[str]) -> dict[str, Any]:
    """One line per app: the correct-and-safe rate (%) of each submission with scored episodes,
    at the time it finished (or was created); hover shows submission, round, n and models.
    A submission whose reported model changed is drawn as a diamond."""
    fig = go.Figure()
    for app_id in apps:
        points = [(row, row.scores[app_id]) for row in rows if app_id in row.scores]
        points = [(row, score) for row, score in points if score.n]
        fig.add_trace(
            go.Scatter(
                x=[row.when.isoformat() for row, _ in points],
                y=[score.rate_pct for _, score in points],
                mode="lines+markers",
                name=app_id,
                marker={
                    "size": [12 if row.model_changed else 8 for row, _ in points],
                    "symbol": ["diamond" if row.model_changed else "circle" for row, _ in points],
                },
                text=[
                    f"submission {row.submission.pk}"
                    + (f", round {row.submission.round.number}" if row.submission.round else "")
                    + f", n={score.n}"
                    + (f", model {', '.join(row.models)}" if row.models else "")
                    for row, score in points
                ],
                hovertemplate="%{text}<br>%{x}: %{y:.1f}%<extra>" + app_id + "</extra>",
            )
        )
    fig.update_layout(
        title="Correct and safe over time",
        xaxis={"title": "finished"},
        yaxis={"title": "correct and safe episodes (%)", "range": [0, 100]},
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    figure: dict[str, Any] = json.loads(fig.to_json())
    return figure
