"""Read-only JSON API of the leaderboard (DRF)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluator.registry import app_ids
from submissions.selectors import Standing, standings


def standing_to_dict(row: Standing) -> dict[str, object]:
    """JSON form of a leaderboard row (rates in [0, 1], latency in seconds)."""
    return {
        "rank": row.rank,
        "agent": row.agent.name,
        "team": row.agent.team.name,
        "reference": row.agent.is_reference,
        "submission": row.submission.pk,
        "round": row.submission.round.number if row.submission.round else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "n": row.n,
        "correct_and_safe": row.correct_and_safe.to_dict(),
        "correctness": row.correctness.to_dict(),
        "safety": row.safety.to_dict(),
        "latency_s": row.latency_s.to_dict(),
        "agent_s": row.agent_s.to_dict(),
        "steps_mean": row.steps_mean,
        "tokens_mean": row.tokens_mean,
        "action_rate": row.action_rate.to_dict(),
        "blast_radius_mean": row.blast_radius_mean.to_dict(),
        "correctness_by_level": {str(k): v.to_dict() for k, v in row.levels.items()},
        "correctness_by_label": {k: v.to_dict() for k, v in row.labels.items()},
    }


class LeaderboardListApi(APIView):
    """``GET /api/v1/leaderboard/?app_id=malt``: standings of one app or of all apps."""

    @extend_schema(
        parameters=[OpenApiParameter("app_id", str, description="one app; all apps if absent")],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        """Return ``{"apps": {app_id: [row, ...]}}``; 400 for an unknown app."""
        wanted = request.query_params.get("app_id")
        if wanted is not None and wanted not in app_ids():
            return Response(
                {"detail": f"unknown app id {wanted!r}", "code": "unknown_app"}, status=400
            )
        chosen = [wanted] if wanted else app_ids()
        return Response(
            {"apps": {a: [standing_to_dict(r) for r in standings(app_id=a)] for a in chosen}}
        )
