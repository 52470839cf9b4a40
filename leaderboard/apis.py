"""Read-only JSON API of the leaderboard (DRF)."""

from __future__ import annotations

import math

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluator.registry import app_ids
from evaluator.stats import Interval
from submissions.round_selectors import ranking_of_record
from submissions.selectors import Standing, standings_page

#: Rows per app a request returns unless it asks for fewer (``limit``, at most this).
MAX_LIMIT = 1000
#: Rows per app without ``limit``.
DEFAULT_LIMIT = 50


def _interval(interval: Interval) -> dict[str, float | int | None]:
    """``Interval.to_dict`` without ``dataclasses.asdict`` (hundreds per response): NaN ->
    None."""
    value, low, high = interval.value, interval.low, interval.high
    return {
        "value": None if math.isnan(value) else value,
        "low": None if math.isnan(low) else low,
        "high": None if math.isnan(high) else high,
        "n": interval.n,
    }


def standing_to_dict(row: Standing) -> dict[str, object]:
    """JSON form of a leaderboard row (rates in [0, 1], latency in seconds)."""
    return {
        "rank": row.rank,
        "agent": row.agent.name,
        "agent_id": row.agent.pk,
        "team": row.agent.team.name,
        "reference": row.agent.is_reference,
        "submission": row.submission.pk,
        "round": row.submission.round.number if row.submission.round else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "n": row.n,
        "correct_and_safe": _interval(row.correct_and_safe),
        "correctness": _interval(row.correctness),
        "safety": _interval(row.safety),
        "latency_s": _interval(row.latency_s),
        "agent_s": _interval(row.agent_s),
        "steps_mean": row.steps_mean,
        "tokens_mean": row.tokens_mean,
        "action_rate": _interval(row.action_rate),
        "blast_radius_mean": _interval(row.blast_radius_mean),
        "correctness_by_level": {str(k): _interval(v) for k, v in row.levels.items()},
        "correctness_by_label": {k: _interval(v) for k, v in row.labels.items()},
        "safety_by_level": {str(k): _interval(v) for k, v in row.level_safety.items()},
        "correct_and_safe_public": None if row.public is None else _interval(row.public),
        "correct_and_safe_held_out": None if row.held_out is None else _interval(row.held_out),
        "held_out_gap": None if row.held_out_gap is None else _interval(row.held_out_gap),
        "infra_failures": row.infra_failures,
        "infra_failure_rate": row.infra_failure_rate,
        "overfit": row.overfit,
    }


def _bounded_int(raw: str | None, default: int, high: int) -> int | None:
    """A query parameter in ``[0, high]``; None when it is not a number in range."""
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > high:
        return None
    return int(raw)


class LeaderboardListApi(APIView):
    """``GET /api/v1/leaderboard/?app_id=malt&round=3&limit=100&offset=0``: ranked standings
    of one app or of all apps, a page of rows per app (ranks are over every agent)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("app_id", str, description="one app; all apps if absent"),
            OpenApiParameter(
                "round",
                str,
                description="a round number (its submissions), or 'practice' (each agent's "
                "latest team submission); default: the ranking of record, the latest closed "
                "round (practice while none has closed)",
            ),
            OpenApiParameter(
                "limit", int, description=f"rows per app (default {DEFAULT_LIMIT}, max {MAX_LIMIT})"
            ),
            OpenApiParameter("offset", int, description="rows to skip per app (default 0)"),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        """Return ``{"apps": {app_id: [row, ...]}, "total": {app_id: ranked agents},
        "round": the round shown or null, "practice": bool, "limit", "offset"}``; 400 for an
        unknown app or a bad number."""
        wanted = request.query_params.get("app_id")
        if wanted is not None and wanted not in app_ids():
            return Response(
                {"detail": f"unknown app id {wanted!r}", "code": "unknown_app"}, status=400
            )
        limit = _bounded_int(request.query_params.get("limit"), DEFAULT_LIMIT, MAX_LIMIT)
        offset = _bounded_int(request.query_params.get("offset"), 0, 10**9)
        round_raw = request.query_params.get("round")
        practice = round_raw == "practice"
        round_number = _bounded_int(round_raw, 0, 10**9) if round_raw and not practice else None
        if limit is None or offset is None or (round_raw and not practice and not round_number):
            return Response(
                {
                    "detail": "limit, offset and round must be whole numbers in range",
                    "code": "bad_parameter",
                },
                status=400,
            )
        if round_number is None and not practice:
            round_number = ranking_of_record()
        chosen = [wanted] if wanted else app_ids()
        pages = {
            a: standings_page(app_id=a, round_number=round_number, offset=offset, limit=limit)
            for a in chosen
        }
        return Response(
            {
                "apps": {a: [standing_to_dict(r) for r in p.rows] for a, p in pages.items()},
                "total": {a: p.total for a, p in pages.items()},
                "round": round_number,
                "practice": round_number is None,
                "limit": limit,
                "offset": offset,
            }
        )
