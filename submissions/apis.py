"""Team-facing REST API: register agents, submit them for evaluation, follow a submission.

Authentication: session (with CSRF, DRF's ``SessionAuthentication``) or a per-user token
(``Authorization: Token <key>``, DRF authtoken; created in the admin). A user acts only for the
teams they belong to; rounds are started by admins only (DESIGN.md §8). Errors are
``{"detail": str, "code": str}`` with status 400/403/404/429.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluator.agents import PROTOCOLS
from evaluator.agents.guard import OutboundGuard, RefusedAddressError, ResolveError
from evaluator.registry import app_ids
from leaderboard.selectors import submission_episode_rows
from submissions.models import Agent, Submission, Team
from submissions.services import SubmissionError, agent_create, submission_create


def _error(detail: str, code: str, http_status: int) -> Response:
    return Response({"detail": detail, "code": code}, status=http_status)


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

    def post(self, request: Request) -> Response:
        """201 with the agent's id; 400 for bad input or an endpoint the guard refuses."""
        serializer = AgentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = Team.objects.filter(name=data["team"], members=request.user.pk).first()
        if team is None:
            return _error("you are not a member of this team", "not_team_member", 403)
        try:
            OutboundGuard(settings.NETARENA["AGENT_ALLOWED_NETWORKS"]).check_url(
                data["endpoint_url"]
            )
        except (RefusedAddressError, ResolveError, ValueError) as exc:
            return _error(f"endpoint refused: {exc}", "endpoint_refused", 400)
        if Agent.objects.filter(team=team, name=data["name"]).exists():
            return _error("this team already has an agent of that name", "duplicate_agent", 400)
        agent = agent_create(
            team=team,
            name=data["name"],
            endpoint_url=data["endpoint_url"],
            protocol=data["protocol"],
            model_name=data["model_name"],
            api_key=data["api_key"],
        )
        return Response({"id": agent.pk, "name": agent.name, "team": team.name}, status=201)


class SubmissionCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Input of ``POST /api/v1/submissions/``."""

    agent = serializers.IntegerField()
    apps = serializers.ListField(child=serializers.ChoiceField(choices=app_ids()), min_length=1)
    queries_per_app = serializers.IntegerField(min_value=1, max_value=200, default=30)


class SubmissionCreateApi(APIView):
    """``POST /api/v1/submissions/``: evaluate one of the caller's agents on fresh queries.

    Quotas: one open submission per agent, and ``SUBMISSIONS_PER_TEAM_PER_DAY`` per team.
    """

    permission_classes = [IsAuthenticated]

    def post(self, request: Request) -> Response:
        """202 with the submission's id; 403 for a foreign agent; 429 over quota."""
        serializer = SubmissionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = Agent.objects.filter(pk=data["agent"], team__members=request.user.pk).first()
        if agent is None:
            return _error("no such agent among your teams", "not_your_agent", 403)
        open_statuses = [Submission.Status.QUEUED, Submission.Status.RUNNING]
        if Submission.objects.filter(agent=agent, status__in=open_statuses).exists():
            return _error("this agent already has a submission in progress", "in_progress", 429)
        since = timezone.now() - timedelta(days=1)
        used = Submission.objects.filter(
            agent__team=agent.team, round__isnull=True, created_at__gte=since
        ).count()
        if used >= settings.NETARENA["SUBMISSIONS_PER_TEAM_PER_DAY"]:
            return _error("daily submission quota of your team is used up", "quota", 429)
        try:
            submission = submission_create(
                agent=agent, apps=data["apps"], queries_per_app=data["queries_per_app"]
            )
        except SubmissionError as exc:
            return _error(str(exc), "invalid", 400)
        return Response({"id": submission.pk, "status": submission.status}, status=202)


class SubmissionDetailApi(APIView):
    """``GET /api/v1/submissions/<id>/``: status and per-episode verdicts (public)."""

    def get(self, request: Request, submission_id: int) -> Response:
        """The submission with its episodes' verdicts; never the hidden ground truth."""
        submission = get_object_or_404(Submission.objects.select_related("agent"), pk=submission_id)
        episodes = submission_episode_rows(submission=submission)
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
