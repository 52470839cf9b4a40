"""Team-facing REST API: register agents, submit them for evaluation, follow a submission.

Authentication: session (with CSRF, DRF's ``SessionAuthentication``) or a per-user token
(``Authorization: Token <key>``, DRF authtoken; created in the admin). A user acts only for the
teams they belong to; rounds are started by admins only (DESIGN.md §8). Errors are
``{"detail": str, "code": str}`` with status 400/403/404/429.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluator.agents import PROTOCOLS
from evaluator.registry import app_ids
from submissions import preflight, selectors, services
from submissions.errors import NotTeamMemberError, NotYourAgentError, ServiceError


def _error(detail: str, code: str, http_status: int) -> Response:
    return Response({"detail": detail, "code": code}, status=http_status)


def _service_error(exc: ServiceError) -> Response:
    """Map a typed service error to ``{"detail", "code"}`` with the error's HTTP status."""
    return _error(str(exc), exc.code, exc.http_status)


class AgentCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Input of ``POST /api/v1/agents/``; ``api_key`` is write-only and stored encrypted."""

    team = serializers.CharField(max_length=100)
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    endpoint_url = serializers.URLField(max_length=500)
    protocol = serializers.ChoiceField(choices=list(PROTOCOLS))
    model_name = serializers.CharField(max_length=200, required=False, default="")
    api_key = serializers.CharField(max_length=4096, required=False, default="", write_only=True)


class AgentCreateApi(APIView):
    """``POST /api/v1/agents/``: register an agent of one of the caller's teams."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=AgentCreateSerializer,
        responses={201: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 403: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        """201 with the agent's id; 400 for bad input or an endpoint the guard refuses."""
        serializer = AgentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            team = selectors.team_get_for_member(name=data["team"], user=request.user)
            if team is None:
                raise NotTeamMemberError("you are not a member of this team")
            agent = services.agent_create(
                team=team,
                name=data["name"],
                endpoint_url=data["endpoint_url"],
                protocol=data["protocol"],
                model_name=data["model_name"],
                api_key=data["api_key"],
                actor=request.user,
            )
            preflight.preflight_start(agent=agent, actor=request.user)  # A10: runs on commit
        except ServiceError as exc:
            return _service_error(exc)
        return Response({"id": agent.pk, "name": agent.name, "team": team.name}, status=201)


class SubmissionCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Input of ``POST /api/v1/submissions/``."""

    agent = serializers.IntegerField()
    apps = serializers.ListField(child=serializers.ChoiceField(choices=app_ids()), min_length=1)
    queries_per_app = serializers.IntegerField(min_value=1, max_value=200, default=30)


class SubmissionCreateApi(APIView):
    """``POST /api/v1/submissions/``: evaluate one of the caller's agents on fresh queries.

    Quotas (enforced by ``services.submission_create``): one open submission per agent, and
    ``SUBMISSIONS_PER_TEAM_PER_DAY`` per team.
    """

    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=SubmissionCreateSerializer,
        responses={202: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 403: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        """202 with the submission's id; 403 for a foreign agent; 429 over quota."""
        serializer = SubmissionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            agent = selectors.agent_get(agent_id=data["agent"])
            if agent is None:
                raise NotYourAgentError("no such agent among your teams")
            submission = services.submission_create(
                agent=agent,
                apps=data["apps"],
                queries_per_app=data["queries_per_app"],
                actor=request.user,
            )
        except ServiceError as exc:
            return _service_error(exc)
        return Response({"id": submission.pk, "status": submission.status}, status=202)


class SubmissionDetailApi(APIView):
    """``GET /api/v1/submissions/<id>/``: status and per-episode verdicts (public)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT})
    def get(self, request: Request, submission_id: int) -> Response:
        """The submission with its episodes' verdicts; never the hidden ground truth."""
        submission = selectors.submission_get(submission_id=submission_id)
        if submission is None:
            return _error("no such submission", "not_found", 404)
        episodes = selectors.submission_episode_rows(submission=submission)
        return Response(
            {
                "id": submission.pk,
                "agent": submission.agent.name,
                "status": submission.status,
                "apps": submission.apps,
                "queries_per_app": submission.queries_per_app,
                "error": submission.error,
                "created_at": submission.created_at.isoformat(),
                "finished_at": submission.finished_at.isoformat()
                if submission.finished_at
                else None,
                "episodes": episodes,
            },
            status=status.HTTP_200_OK,
        )
