"""Team-facing REST API: agents, submissions (create, progress, cancel, episodes), rounds.

Authentication: session (with CSRF, DRF's ``SessionAuthentication``) or a per-user token
(``Authorization: Token <key>``, DRF authtoken; ``manage.py drf_create_token`` or the admin). A
user acts only for the teams they belong to; rounds are started by admins only
(docs/architecture.md §8).
Lists are paginated (``?page=N``; ``{"count", "next", "previous", "results"}``) and every
caller is throttled (settings ``REST_FRAMEWORK``). Errors are ``{"detail": str, "code": str}``
with status 400/403/404/409/429; a service's refusal propagates and is mapped once
(``submissions.api_errors``). Episodes never carry the query or its hidden ground truth.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluator.agents import PROTOCOLS
from evaluator.prompting import DEFAULT_PROMPT_TYPE, check_prompt_type
from evaluator.registry import app_ids
from submissions import selectors
from submissions.api_parsers import BoundedJSONParser
from submissions.disclosure import (
    PROGRESS_EPISODE_FIELDS,
    SPENT_EPISODE_FIELDS,
    Disclosure,
    disclosure_for,
    episode_rows,
)
from submissions.errors import NotTeamMemberError, NotYourAgentError
from submissions.models import Agent, EpisodeRecord, Round, Submission
from submissions.progress import submission_infrastructure_failures, submission_progress
from submissions.result_selectors import submission_result
from submissions.round_selectors import round_get, round_progress, round_standings
from submissions.services import preflight
from submissions.services.agents import (
    AGENT_NAME_PATTERN,
    API_KEY_MAX_CHARS,
    ENDPOINT_URL_MAX_CHARS,
    MODEL_NAME_MAX_CHARS,
    agent_register,
)
from submissions.services.submissions import (
    TEAM_QUERIES_PER_APP_MAX,
    submission_cancel,
    submission_create,
)
from submissions.throttling import AnonRateThrottle, UserRateThrottle


def _error(detail: str, code: str, http_status: int) -> Response:
    return Response({"detail": detail, "code": code}, status=http_status)


ErrorSerializer = inline_serializer(
    "Error", {"detail": serializers.CharField(), "code": serializers.CharField()}
)


class AgentSerializer(serializers.ModelSerializer[Agent]):
    """An agent of one of the caller's teams (the API key is never returned), with its latest
    pre-flight check (``null`` if none ran; a team agent is submitted only once it passed)."""

    team = serializers.CharField(source="team.name")
    preflight = serializers.SerializerMethodField()

    class Meta:
        model = Agent
        fields = [
            "id",
            "name",
            "team",
            "endpoint_url",
            "protocol",
            "model_name",
            "apps",
            "is_active",
            "created_at",
            "preflight",
        ]
        read_only_fields = fields

    @extend_schema_field(
        inline_serializer(
            "AgentPreflight",
            {
                "status": serializers.CharField(),
                "checks": serializers.ListField(child=serializers.DictField()),
                "latency_s": serializers.FloatField(allow_null=True),
                "finished_at": serializers.DateTimeField(allow_null=True),
            },
            allow_null=True,
        )
    )
    def get_preflight(self, obj: Agent) -> dict[str, Any] | None:
        """``{"status": running|passed|failed, "checks", "latency_s", "finished_at"}``."""
        latest = preflight.preflight_latest(agent=obj)
        if latest is None:
            return None
        return {
            "status": latest.status,
            "checks": latest.checks,
            "latency_s": latest.latency_s,
            "finished_at": latest.finished_at.isoformat() if latest.finished_at else None,
        }


class AgentCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Input of ``POST /api/v1/agents/``; ``api_key`` is write-only and stored encrypted.

    The bounds mirror ``submissions.services.agents`` for field errors; the service decides.
    """

    team = serializers.CharField(max_length=100)
    name = serializers.RegexField(AGENT_NAME_PATTERN)
    endpoint_url = serializers.URLField(max_length=ENDPOINT_URL_MAX_CHARS)
    protocol = serializers.ChoiceField(choices=list(PROTOCOLS))
    model_name = serializers.CharField(
        max_length=MODEL_NAME_MAX_CHARS, required=False, default=""
    )
    api_key = serializers.CharField(
        max_length=API_KEY_MAX_CHARS, required=False, default="", write_only=True
    )


class AgentListCreateApi(generics.ListAPIView[Agent]):
    """``GET /api/v1/agents/``: the agents of the caller's teams (paginated);
    ``POST``: register an agent of one of the caller's teams."""

    permission_classes = [IsAuthenticated]
    serializer_class = AgentSerializer

    def get_queryset(self) -> QuerySet[Agent]:
        """Agents of the caller's teams, newest first."""
        return (
            Agent.objects.filter(team__members=self.request.user.pk)
            .select_related("team")
            .order_by("-created_at", "-pk")
        )

    @extend_schema(
        request=AgentCreateSerializer,
        responses={
            201: inline_serializer(
                "AgentCreated",
                {
                    "id": serializers.IntegerField(),
                    "name": serializers.CharField(),
                    "team": serializers.CharField(),
                },
            ),
            400: ErrorSerializer,
            403: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        """201 with the agent's id; 400 for bad input or an endpoint the guard refuses."""
        serializer = AgentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = selectors.team_get_for_member(name=data["team"], user=request.user)
        if team is None:
            raise NotTeamMemberError("you are not a member of this team")
        agent, _ = agent_register(
            team=team,
            actor=request.user,
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
    queries_per_app = serializers.IntegerField(
        min_value=1, max_value=TEAM_QUERIES_PER_APP_MAX, default=30
    )  # mirrors the service's rule for field errors
    #: NetArena's prompt type (``evaluator.prompting``); only zeroshot_base is ranked
    prompt_type = serializers.CharField(default=DEFAULT_PROMPT_TYPE)

    def validate_prompt_type(self, value: str) -> str:
        """One of the four prompt types (``check_prompt_type``'s message otherwise: 400)."""
        try:
            return check_prompt_type(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None


class SubmissionSerializer(serializers.ModelSerializer[Submission]):
    """A submission in a list (no episodes; see ``/episodes/``)."""

    agent = serializers.CharField(source="agent.name")
    agent_id = serializers.IntegerField()
    team = serializers.CharField(source="agent.team.name")
    round = serializers.IntegerField(source="round.number", allow_null=True, default=None)

    class Meta:
        model = Submission
        fields = [
            "id",
            "agent",
            "agent_id",
            "team",
            "round",
            "status",
            "incomplete",
            "apps",
            "queries_per_app",
            "prompt_type",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class SubmissionListCreateApi(generics.ListAPIView[Submission]):
    """``GET /api/v1/submissions/``: the submissions of the caller's teams' agents, newest
    first (paginated); ``POST``: evaluate one of the caller's agents on fresh queries.

    Quotas (enforced by ``submissions.services.submissions.submission_create``): one open
    submission per agent, ``SUBMISSIONS_PER_TEAM_PER_DAY`` per team and
    ``SUBMISSIONS_PER_USER_PER_DAY`` per caller across all their teams (platform failures are
    free; cancelled submissions count).
    """

    permission_classes = [IsAuthenticated]
    serializer_class = SubmissionSerializer

    def get_queryset(self) -> QuerySet[Submission]:
        """Submissions of the caller's teams' agents, newest first."""
        return (
            Submission.objects.filter(agent__team__members=self.request.user.pk)
            .select_related("agent__team", "round")
            .order_by("-created_at", "-pk")
        )

    @extend_schema(
        request=SubmissionCreateSerializer,
        responses={
            202: inline_serializer(
                "SubmissionCreated",
                {"id": serializers.IntegerField(), "status": serializers.CharField()},
            ),
            400: ErrorSerializer,
            403: ErrorSerializer,
            409: ErrorSerializer,
            429: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        """202 with the submission's id; 403 for a foreign agent; 409 while the agent's
        pre-flight has not passed; 429 over quota or with a submission already open."""
        serializer = SubmissionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = selectors.agent_get(agent_id=data["agent"])
        if agent is None:
            raise NotYourAgentError("no such agent among your teams")
        submission = submission_create(
            agent=agent,
            apps=data["apps"],
            queries_per_app=data["queries_per_app"],
            prompt_type=data["prompt_type"],
            actor=request.user,
        )
        return Response({"id": submission.pk, "status": submission.status}, status=202)


class AppProgressSerializer(serializers.Serializer[dict[str, Any]]):
    """Episode counts of one app (``done`` = scored + platform failures)."""

    done = serializers.IntegerField()
    total = serializers.IntegerField()
    running = serializers.IntegerField()
    errors = serializers.IntegerField()  # type: ignore[assignment]  # a field, not .errors
    cancelled = serializers.IntegerField()


class ProgressSerializer(serializers.Serializer[dict[str, Any]]):
    """``submissions.progress.SubmissionProgress``: times in seconds, percent in [0, 100]."""

    status = serializers.CharField()
    open = serializers.BooleanField()
    incomplete = serializers.BooleanField()
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.FloatField()
    by_app = serializers.DictField(child=AppProgressSerializer())
    queue_position = serializers.IntegerField(allow_null=True)
    elapsed_s = serializers.FloatField(allow_null=True)
    eta_s = serializers.FloatField(allow_null=True)


class InfraFailureSerializer(serializers.Serializer[dict[str, Any]]):
    """An episode the platform could not run, with its cause."""

    episode = serializers.IntegerField()
    app_id = serializers.CharField()
    index = serializers.IntegerField()
    kind = serializers.CharField()
    message = serializers.CharField()
    attempts = serializers.IntegerField()


class EpisodeSerializer(serializers.ModelSerializer[EpisodeRecord]):
    """The columns of an episode the caller may see (``submissions.disclosure``): always
    ``id, app_id, index, query_id, status``; the level, label and verdict columns only once
    the answers are spent (absent before). Never the query, its ground truth or a
    transcript."""

    class Meta:
        model = EpisodeRecord
        fields = list(SPENT_EPISODE_FIELDS)
        read_only_fields = fields

    def to_representation(self, instance: EpisodeRecord) -> dict[str, Any]:
        """Only the columns of ``context["fields"]`` (the caller's disclosure)."""
        data = super().to_representation(instance)
        allowed = self.context.get("fields", PROGRESS_EPISODE_FIELDS)
        return {k: v for k, v in data.items() if k in allowed}


def _failures_shown(submission: Submission, disclosure: Disclosure) -> list[dict[str, Any]]:
    """Infrastructure failures; their messages to the owner team and, once the answers are
    spent, to everyone."""
    failures = submission_infrastructure_failures(submission=submission)
    if not disclosure.shows_transcript:
        for failure in failures:
            failure["message"] = ""
    return failures


def _submission_or_404(submission_id: int) -> Submission | None:
    return selectors.submission_get(submission_id=submission_id)


class SubmissionDetailApi(APIView):
    """``GET /api/v1/submissions/<id>/``: status, progress, platform failures, episode
    verdicts and, once the submission is closed, its ``result`` per app (the summary of the
    result file, docs/result-format.md; public, like the submission page)."""

    @extend_schema(
        responses={
            200: inline_serializer(
                "SubmissionDetail",
                {
                    "id": serializers.IntegerField(),
                    "agent": serializers.CharField(),
                    "team": serializers.CharField(),
                    "status": serializers.CharField(),
                    "incomplete": serializers.BooleanField(),
                    "apps": serializers.ListField(child=serializers.CharField()),
                    "queries_per_app": serializers.IntegerField(),
                    "prompt_type": serializers.CharField(),
                    "error": serializers.CharField(),
                    "created_at": serializers.DateTimeField(),
                    "finished_at": serializers.DateTimeField(allow_null=True),
                    "progress": ProgressSerializer(),
                    "infrastructure_failures": InfraFailureSerializer(many=True),
                    "episodes": serializers.ListField(child=serializers.DictField()),
                    "result": inline_serializer(
                        "SubmissionResult",
                        {
                            "ready": serializers.BooleanField(),
                            "ranked": serializers.BooleanField(),
                            "note": serializers.CharField(),
                            "apps": serializers.DictField(child=serializers.DictField()),
                        },
                        allow_null=True,
                    ),
                    "result_file": serializers.CharField(allow_null=True),
                },
            ),
            404: ErrorSerializer,
        }
    )
    def get(self, request: Request, submission_id: int) -> Response:
        """The submission with its progress, its episodes' columns the caller may see and,
        once its answers are spent, its result per app (``submissions.disclosure``):
        ``result`` and ``result_file`` are null and episodes carry no level, label or
        verdict while it runs or its round is open. Never the ground truth."""
        submission = _submission_or_404(submission_id)
        if submission is None:
            return _error("no such submission", "not_found", 404)
        disclosure = disclosure_for(request.user, submission)
        episodes = episode_rows(submission, disclosure)
        progress = submission_progress(submission=submission)
        result = submission_result(submission=submission) if disclosure.shows_verdicts else None
        return Response(
            {
                "id": submission.pk,
                "agent": submission.agent.name,
                "team": submission.agent.team.name,
                "status": submission.status,
                "incomplete": submission.incomplete,
                "apps": submission.apps,
                "queries_per_app": submission.queries_per_app,
                "prompt_type": submission.prompt_type,
                "error": submission.error,
                "created_at": submission.created_at.isoformat(),
                "finished_at": submission.finished_at.isoformat()
                if submission.finished_at
                else None,
                "progress": progress.to_dict(),
                "infrastructure_failures": _failures_shown(submission, disclosure),
                "episodes": episodes,
                "result": None if result is None else result.to_dict(),
                "result_file": None
                if result is None
                else request.build_absolute_uri(
                    reverse("submissions:submission-result-file", args=[submission.pk])
                ),
            },
            status=status.HTTP_200_OK,
        )


class SubmissionProgressApi(APIView):
    """``GET /api/v1/submissions/<id>/progress/``: live progress (public)."""

    @extend_schema(responses={200: ProgressSerializer, 404: ErrorSerializer})
    def get(self, request: Request, submission_id: int) -> Response:
        """Done/total per app, queue position, elapsed and estimated seconds, status."""
        submission = _submission_or_404(submission_id)
        if submission is None:
            return _error("no such submission", "not_found", 404)
        return Response(submission_progress(submission=submission).to_dict())


class SubmissionCancelApi(APIView):
    """``POST /api/v1/submissions/<id>/cancel/``: cancel an open submission of one of the
    caller's teams (staff: also a round's). Pending episodes never run; running ones finish."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None,
        responses={
            200: ProgressSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request, submission_id: int) -> Response:
        """200 with the progress of the cancelled submission; 409 if it was not open."""
        submission = _submission_or_404(submission_id)
        if submission is None:
            return _error("no such submission", "not_found", 404)
        submission = submission_cancel(submission=submission, actor=request.user)
        return Response(submission_progress(submission=submission).to_dict())


class SubmissionEpisodeListApi(generics.ListAPIView[EpisodeRecord]):
    """``GET /api/v1/submissions/<id>/episodes/``: the submission's episodes (paginated),
    with the columns the caller may see (``submissions.disclosure``: progress only while the
    answers are unspent; never the query or its hidden ground truth)."""

    serializer_class = EpisodeSerializer

    def _submission(self) -> Submission:
        """The submission of the URL, read once per request; 404 for an unknown one."""
        cached: Submission | None = getattr(self, "_cached_submission", None)
        if cached is None:
            cached = selectors.submission_get(submission_id=self.kwargs["submission_id"])
            if cached is None:
                raise Http404("no such submission")
            self._cached_submission = cached
        return cached

    def get_queryset(self) -> QuerySet[EpisodeRecord]:
        """Episodes of the submission in (app, index) order; 404 for an unknown one."""
        return EpisodeRecord.objects.filter(submission=self._submission()).order_by(
            "app_id", "index", "pk"
        )

    def get_serializer_context(self) -> dict[str, Any]:
        """The caller's disclosure decides the columns."""
        context = dict(super().get_serializer_context())
        context["fields"] = disclosure_for(self.request.user, self._submission()).episode_fields
        return context


class RoundSerializer(serializers.ModelSerializer[Round]):
    """A round: its commitment always; its seed and salt only once it is closed."""

    seed = serializers.SerializerMethodField()
    salt = serializers.SerializerMethodField()
    closed = serializers.BooleanField(source="is_closed")

    class Meta:
        model = Round
        fields = [
            "number",
            "apps",
            "queries_per_app",
            "versions",
            "packs",
            "held_out_share",
            "commitment",
            "created_at",
            "closed_at",
            "closed",
            "seed",
            "salt",
        ]
        read_only_fields = fields

    def get_seed(self, obj: Round) -> str | None:
        """The seed as decimal text once the round is closed, else None."""
        return str(obj.seed) if obj.is_closed else None

    def get_salt(self, obj: Round) -> str | None:
        """The salt once the round is closed, else None."""
        return obj.salt if obj.is_closed else None


class RoundListApi(generics.ListAPIView[Round]):
    """``GET /api/v1/rounds/``: every round, newest first (paginated, public)."""

    serializer_class = RoundSerializer
    queryset = Round.objects.order_by("-number")


def _interval(value: Any) -> dict[str, Any]:
    return dict(value.to_dict())


def _optional(value: Any) -> dict[str, Any] | None:
    """An interval's dict, or None when the figure does not exist (no held-out queries)."""
    return None if value is None else _interval(value)


class RoundDetailApi(APIView):
    """``GET /api/v1/rounds/<number>/``: a round with its progress and, per app, standings
    ranked by paired comparisons (public)."""

    @extend_schema(
        responses={
            200: inline_serializer(
                "RoundDetail",
                {
                    "round": RoundSerializer(),
                    "progress": serializers.DictField(),
                    "standings": serializers.DictField(
                        child=serializers.ListField(child=serializers.DictField())
                    ),
                },
            ),
            404: ErrorSerializer,
        }
    )
    def get(self, request: Request, number: int) -> Response:
        """The round, ``progress`` ``{done, total, by_app, open_submissions}`` and, once it is
        closed, ``standings`` ``{app_id: [row]}`` (rates in [0, 1] with 95% Wilson
        intervals; ``{}`` while it is open)."""
        evaluation_round = round_get(number=number)
        if evaluation_round is None:
            return _error("no such round", "not_found", 404)
        progress = round_progress(evaluation_round=evaluation_round)
        # standings only once the round is closed: before, a finished agent's figures would
        # tell the agents still answering about the shared queries (submissions.disclosure)
        standings = {} if not evaluation_round.is_closed else {
            app_id: [
                {
                    "paired_rank": row.paired_rank,
                    "agent": row.standing.agent.name,
                    "team": row.standing.agent.team.name,
                    "submission": row.standing.submission.pk,
                    "n": row.standing.n,
                    "correct_and_safe": _interval(row.standing.correct_and_safe),
                    "correctness": _interval(row.standing.correctness),
                    "safety": _interval(row.standing.safety),
                    "tied_with": row.tied_with,
                    "correct_and_safe_public": _optional(row.standing.public),
                    "correct_and_safe_held_out": _optional(row.standing.held_out),
                    "held_out_gap": _optional(row.standing.held_out_gap),
                    "overfit": row.standing.overfit,
                }
                for row in round_standings(evaluation_round=evaluation_round, app_id=app_id)
            ]
            for app_id in evaluation_round.apps
        }
        return Response(
            {
                "round": RoundSerializer(evaluation_round).data,
                "progress": {
                    "done": progress.done,
                    "total": progress.total,
                    "by_app": {app: list(c) for app, c in progress.by_app.items()},
                    "open_submissions": progress.open_submissions,
                },
                "standings": standings,
            }
        )


class TokenObtainApi(ObtainAuthToken):
    """``POST /api/v1/token/`` with ``username`` and ``password`` (form or JSON): the user's
    API token, ``{"token": "<key>"}`` (created on first use; 400 for wrong credentials).
    Throttled like every endpoint (anonymous rate per IP)."""

    # DRF's view is unthrottled and parses JSON without a depth bound: use the site's defaults
    throttle_classes = [AnonRateThrottle, UserRateThrottle]
    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]
