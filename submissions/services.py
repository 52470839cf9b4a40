"""Business logic of teams, agents, submissions and rounds (APIs, admin and tasks stay thin).

Every rule of the site lives here and raises a typed error from ``submissions.errors``
(team membership, the outbound guard on endpoints, one open submission per agent, the daily
quota), so that the REST API, the admin, rounds and management commands all obey the same
rules. Reads live in ``submissions.selectors``. Tasks (``submissions.tasks``) import this
module; this module sends tasks by name and never imports them.

The evaluation pipeline::

    submission_create ──on commit──> submission_prepare task   (queue "control")
        generates the queries of every app, one EpisodeRecord row each, then
        ──on commit──> episode_execute task × N                 (queue = the app id)
            runs one episode (idempotent by episode id), stores its verdict atomically,
            and the last one to finish closes the submission.

Nothing here can leave a submission stuck: generation errors fail the submission with a
message, evaluator errors close the episode as ``error`` (excluded from statistics), and a
worker lost mid-episode redelivers the task (``acks_late``), which runs it again up to
``EPISODE_MAX_ATTEMPTS`` times.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from evaluator.agents import LOOPBACK_NETWORKS, PROTOCOLS, make_client
from evaluator.agents.base import AgentClient
from evaluator.agents.guard import OutboundGuard, RefusedAddressError, ResolveError
from evaluator.oracle_vault import OracleVault
from evaluator.registry import CONTROL_QUEUE, app_ids, get_app
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.types import Query
from submissions.crypto import decrypt_secret, encrypt_secret
from submissions.errors import (
    DuplicateAgentError,
    EndpointRefusedError,
    InvalidInputError,
    NotTeamMemberError,
    NotYourAgentError,
    QuotaExceededError,
    SubmissionInProgressError,
)
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team

logger = logging.getLogger(__name__)

EPISODE_MAX_ATTEMPTS = 3
REFERENCE_KINDS = ("oracle", "null", "heuristic", "llm")

#: Celery task names (the tasks live in ``submissions.tasks``, which imports this module;
#: services send by name so that nothing here imports the tasks).
SUBMISSION_PREPARE_TASK = "submissions.submission_prepare"
EPISODE_EXECUTE_TASK = "submissions.episode_execute"


def _send_task(name: str, args: tuple[Any, ...], *, queue: str) -> None:
    """Send a Celery task by name to ``queue`` (called from ``transaction.on_commit``)."""
    from config.celery import app as celery_app

    celery_app.send_task(name, args=args, queue=queue)


def team_create(*, name: str, members: Sequence[Any] = ()) -> Team:
    """Create a team with the given users as members."""
    team = Team.objects.create(name=name)
    team.members.set(members)
    return team


def team_member_check(*, team: Team, user: Any) -> None:
    """Refuse ``user`` unless they are a member of ``team``.

    Raises:
        NotTeamMemberError: not a member (or an anonymous user).
    """
    if user is None or not getattr(user, "is_authenticated", False):
        raise NotTeamMemberError("you are not a member of this team")
    if not team.members.filter(pk=user.pk).exists():
        raise NotTeamMemberError("you are not a member of this team")


def agent_allowed_networks(*, reference: bool) -> list[str]:
    """The non-public networks an agent's endpoint may live on (CIDR strings).

    Public addresses are always allowed. Reference agents (served by the project itself on
    loopback) may also use ``LOOPBACK_NETWORKS`` and ``AGENT_ALLOWED_NETWORKS``.
    """
    allowed = list(settings.NETARENA["AGENT_ALLOWED_NETWORKS"])
    if reference:
        allowed += LOOPBACK_NETWORKS
    return allowed


def agent_endpoint_check(*, endpoint_url: str, reference: bool = False) -> None:
    """Check an agent endpoint with the outbound guard before it is stored.

    The guard's full explanation (what the host resolved to, the allow-list) is logged; the
    error shown to the user is generic so that it reveals nothing about the server's network.

    Raises:
        EndpointRefusedError: bad URL, unresolvable host or a refused address.
    """
    guard = OutboundGuard(agent_allowed_networks(reference=reference))
    try:
        guard.check_url(endpoint_url)
    except (RefusedAddressError, ResolveError, ValueError) as exc:
        logger.info("agent endpoint refused: %s", exc)
        raise EndpointRefusedError(f"endpoint refused: {exc}") from None


def agent_create(
    *,
    team: Team,
    name: str,
    endpoint_url: str,
    protocol: str,
    model_name: str = "",
    api_key: str = "",
    reference_kind: str = "",
    apps: Sequence[str] = (),
    actor: Any = None,
) -> Agent:
    """Register an agent endpoint; the API key is encrypted before it is stored.

    Args:
        actor: the user acting (API, pages); when given they must be a member of ``team``.
            Internal callers (reference agents, admin commands) pass ``None``.

    Raises:
        NotTeamMemberError: ``actor`` is not a member of ``team``.
        InvalidInputError: unknown protocol, reference kind or app.
        DuplicateAgentError: the team already has an agent of that name.
        EndpointRefusedError: the outbound guard refuses the endpoint.
    """
    if actor is not None:
        team_member_check(team=team, user=actor)
    if protocol not in PROTOCOLS:
        raise InvalidInputError(f"unknown protocol {protocol!r}")
    if reference_kind and reference_kind not in REFERENCE_KINDS:
        raise InvalidInputError(f"unknown reference kind {reference_kind!r}")
    unknown_apps = [a for a in apps if a not in app_ids()]
    if unknown_apps:
        raise InvalidInputError(f"unknown apps {unknown_apps}; known: {app_ids()}")
    if Agent.objects.filter(team=team, name=name).exists():
        raise DuplicateAgentError("this team already has an agent of that name")
    agent_endpoint_check(endpoint_url=endpoint_url, reference=bool(reference_kind))
    return Agent.objects.create(
        team=team,
        name=name,
        endpoint_url=endpoint_url,
        protocol=protocol,
        model_name=model_name,
        secret_encrypted=encrypt_secret(api_key),
        reference_kind=reference_kind,
        apps=list(apps),
    )


def _validate_apps(apps: Sequence[str], queries_per_app: int) -> list[str]:
    chosen = list(dict.fromkeys(apps))
    unknown = [a for a in chosen if a not in app_ids()]
    if not chosen or unknown:
        raise InvalidInputError(f"unknown or missing apps {unknown or chosen}; known: {app_ids()}")
    if not 1 <= queries_per_app <= 1000:
        raise InvalidInputError("queries per app must be between 1 and 1000")
    return chosen


def _team_submission_rules_check(*, agent: Agent) -> None:
    """One open submission per agent and the team's daily quota (team submissions only).

    Raises:
        SubmissionInProgressError: the agent has a queued or running submission.
        QuotaExceededError: the team used ``SUBMISSIONS_PER_TEAM_PER_DAY`` in the last 24 hours.
    """
    open_statuses = [Submission.Status.QUEUED, Submission.Status.RUNNING]
    if Submission.objects.filter(agent=agent, status__in=open_statuses).exists():
        raise SubmissionInProgressError("this agent already has a submission in progress")
    since = timezone.now() - timedelta(days=1)
    used = Submission.objects.filter(
        agent__team_id=agent.team_id, round__isnull=True, created_at__gte=since
    ).count()
    if used >= settings.NETARENA["SUBMISSIONS_PER_TEAM_PER_DAY"]:
        raise QuotaExceededError("daily submission quota of your team is used up")


def submission_create(
    *,
    agent: Agent,
    apps: Sequence[str],
    queries_per_app: int,
    seed: int | None = None,
    round: Round | None = None,  # noqa: A002 - the field's name
    actor: Any = None,
) -> Submission:
    """Create a queued submission and enqueue its preparation once the transaction commits.

    A team submission (``round`` is None) obeys one open submission per agent and the team's
    daily quota; a round's submissions are started by an admin and count against neither.
    The seed is secret and fresh unless given (rounds share theirs across agents).

    Args:
        actor: the user acting (API, pages); when given the agent must belong to one of their
            teams. Internal callers (rounds, commands) pass ``None``.

    Raises:
        NotYourAgentError: ``actor`` is not a member of the agent's team.
        InvalidInputError: unknown app or a query count outside 1..1000.
        SubmissionInProgressError: the agent already has an open submission.
        QuotaExceededError: the team's daily quota is used up.
    """
    if actor is not None and not agent.team.members.filter(pk=actor.pk).exists():
        raise NotYourAgentError("no such agent among your teams")
    chosen = _validate_apps(apps, queries_per_app)
    with transaction.atomic():
        if round is None:
            _team_submission_rules_check(agent=agent)
        submission = Submission.objects.create(
            agent=agent,
            round=round,
            seed=seed if seed is not None else secrets.randbits(31),
            apps=chosen,
            queries_per_app=queries_per_app,
        )
        transaction.on_commit(
            lambda: _send_task(SUBMISSION_PREPARE_TASK, (submission.pk,), queue=CONTROL_QUEUE)
        )
    return submission


def round_create(*, apps: Sequence[str], queries_per_app: int, created_by: Any = None) -> Round:
    """Start a round: one submission per active agent, all on the same fresh seed.

    Raises:
        InvalidInputError: unknown app or a query count outside 1..1000.
    """
    chosen = _validate_apps(apps, queries_per_app)
    with transaction.atomic():
        number = (Round.objects.aggregate(n=Max("number"))["n"] or 0) + 1
        evaluation_round = Round.objects.create(
            number=number,
            seed=secrets.randbits(31),
            apps=chosen,
            queries_per_app=queries_per_app,
            created_by=created_by,
        )
        for agent in Agent.objects.filter(is_active=True):
            agent_apps = [a for a in chosen if not agent.apps or a in agent.apps]
            if not agent_apps:
                continue
            submission_create(
                agent=agent,
                apps=agent_apps,
                queries_per_app=queries_per_app,
                seed=evaluation_round.seed,
                round=evaluation_round,
            )
    return evaluation_round


def submission_prepare(*, submission_id: int) -> None:
    """Generate the submission's queries, store one EpisodeRecord per query and enqueue them.

    Idempotent: a submission that already has episodes only re-enqueues the unfinished ones.
    """
    submission = Submission.objects.get(pk=submission_id)
    if submission.status in (Submission.Status.FINISHED, Submission.Status.FAILED):
        return
    if not submission.episodes.exists():
        try:
            rows = []
            for app_id in submission.apps:
                for query in get_app(app_id).generate(submission.queries_per_app, submission.seed):
                    rows.append(_episode_row(submission, query))
        except Exception as exc:  # noqa: BLE001 - any generator failure fails the submission
            logger.exception("generation failed for submission %s", submission.pk)
            Submission.objects.filter(pk=submission.pk).update(
                status=Submission.Status.FAILED,
                error=f"query generation failed: {exc}"[:2000],
                finished_at=timezone.now(),
            )
            return
        with transaction.atomic():
            EpisodeRecord.objects.bulk_create(rows, ignore_conflicts=True)
            Submission.objects.filter(pk=submission.pk).update(
                status=Submission.Status.RUNNING, started_at=timezone.now()
            )
    pending = list(
        submission.episodes.filter(
            status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING]
        ).values_list("pk", "app_id")
    )

    def enqueue() -> None:
        for episode_id, app_id in pending:
            _send_task(EPISODE_EXECUTE_TASK, (episode_id,), queue=app_id)

    transaction.on_commit(enqueue)


def _episode_row(submission: Submission, query: Query) -> EpisodeRecord:
    return EpisodeRecord(
        submission=submission,
        app_id=query.app_id,
        app_version=query.app_version,
        index=query.index,
        query_id=query.query_id,
        level=query.level,
        label=query.label,
        query=query.to_dict(),
    )


def agent_client_build(*, agent: Agent) -> AgentClient:
    """Build the protocol client of ``agent`` (decrypting its key; loopback only for references).

    Raises:
        ValueError: the endpoint URL or protocol is malformed.
    """
    allowed = agent_allowed_networks(reference=agent.is_reference)
    return make_client(
        agent.protocol,
        agent.endpoint_url,
        api_key=decrypt_secret(agent.secret_encrypted),
        model=agent.model_name or None,
        timeout_s=settings.NETARENA["AGENT_TIMEOUT_S"],
        allowed_networks=allowed,
    )


def episode_execute(*, episode_id: int) -> None:
    """Run one episode and store its verdict; close the submission when it was the last.

    Idempotent by episode id: a finished episode is left as it is; a redelivered one is run
    again from scratch (its emulator state is per-episode) until ``EPISODE_MAX_ATTEMPTS``.
    """
    claimed = EpisodeRecord.objects.filter(
        pk=episode_id, status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING]
    )
    episode = claimed.select_related("submission__agent").first()
    if episode is None:
        return
    if episode.attempts >= EPISODE_MAX_ATTEMPTS:
        _episode_close_error(episode, "evaluator: episode was interrupted too many times")
        return
    claimed.update(
        status=EpisodeRecord.Status.RUNNING,
        attempts=episode.attempts + 1,
        started_at=timezone.now(),
    )
    agent = episode.submission.agent
    try:
        query = Query.from_dict(episode.query)
        client = agent_client_build(agent=agent)
    except Exception as exc:  # noqa: BLE001 - a bad endpoint fails the episode, not the worker
        _episode_store(
            episode, failure=f"agent:configuration: {exc}"[:200], correct=False, safe=False
        )
        return
    episode_token = new_episode_id()
    deposit: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if agent.reference_kind == "oracle":
        deposit = OracleVault(settings.NETARENA["ORACLE_VAULT_DIR"]).deposit(query, episode_token)
    try:
        with deposit:
            result = run_episode_guarded(
                get_app(query.app_id), query, client, episode_id=episode_token
            )
    except Exception as exc:  # noqa: BLE001 - evaluator bug: close the episode, keep the worker
        logger.exception("episode %s crashed the evaluator", episode_id)
        _episode_close_error(episode, f"evaluator: {type(exc).__name__}: {exc}")
        return
    finally:
        client.close()
    if result.infrastructure is not None:
        _episode_close_error(episode, result.infrastructure.error)
        return
    _episode_store(
        episode,
        correct=result.correct,
        safe=result.safe,
        latency_s=result.latency_s,
        wall_s=result.wall_s,
        agent_s=result.agent_s,
        steps=result.steps,
        failure=(result.failure or "")[:200],
        details=result.details,
        transcript=result.transcript,
    )


def _episode_store(episode: EpisodeRecord, **fields: Any) -> None:
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        status=EpisodeRecord.Status.DONE, finished_at=timezone.now(), **fields
    )
    submission_close_if_complete(submission_id=episode.submission_id)


def _episode_close_error(episode: EpisodeRecord, message: str) -> None:
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        status=EpisodeRecord.Status.ERROR,
        failure=message[:200],
        details={"error": message[:2000]},
        finished_at=timezone.now(),
    )
    submission_close_if_complete(submission_id=episode.submission_id)


def submission_close_if_complete(*, submission_id: int) -> bool:
    """Mark the submission finished once no episode is pending or running.

    The conditional UPDATE makes exactly one caller win when episodes finish concurrently.
    Returns True for that caller.
    """
    unfinished = EpisodeRecord.objects.filter(
        submission_id=submission_id,
        status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING],
    ).exists()
    if unfinished:
        return False
    updated = Submission.objects.filter(pk=submission_id, status=Submission.Status.RUNNING).update(
        status=Submission.Status.FINISHED, finished_at=timezone.now()
    )
    return updated == 1
