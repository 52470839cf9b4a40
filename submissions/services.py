"""Business logic of teams, agents, submissions and rounds (views and tasks stay thin).

The evaluation pipeline::

    submission_create ──on commit──> submission_prepare_task   (queue "control")
        generates the queries of every app, one Episode row each, then
        ──on commit──> episode_execute_task × N                 (queue = the app id)
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
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from evaluator.agents import LOOPBACK_NETWORKS, make_client
from evaluator.agents.base import AgentClient
from evaluator.oracle_vault import OracleVault
from evaluator.registry import app_ids, get_app
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.types import Query
from submissions.crypto import decrypt_secret, encrypt_secret
from submissions.models import Agent, Episode, Round, Submission, Team

logger = logging.getLogger(__name__)

EPISODE_MAX_ATTEMPTS = 3
REFERENCE_KINDS = ("oracle", "null", "heuristic", "llm")


class SubmissionError(ValueError):
    """A request to create a submission or round was invalid (message is user-facing)."""


def team_create(*, name: str, members: Sequence[Any] = ()) -> Team:
    """Create a team with the given users as members."""
    team = Team.objects.create(name=name)
    team.members.set(members)
    return team


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
) -> Agent:
    """Register an agent endpoint; the API key is encrypted before it is stored.

    Raises:
        SubmissionError: unknown protocol or reference kind.
    """
    if protocol not in Agent.Protocol.values:
        raise SubmissionError(f"unknown protocol {protocol!r}")
    if reference_kind and reference_kind not in REFERENCE_KINDS:
        raise SubmissionError(f"unknown reference kind {reference_kind!r}")
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
        raise SubmissionError(f"unknown or missing apps {unknown or chosen}; known: {app_ids()}")
    if not 1 <= queries_per_app <= 1000:
        raise SubmissionError("queries per app must be between 1 and 1000")
    return chosen


def submission_create(
    *,
    agent: Agent,
    apps: Sequence[str],
    queries_per_app: int,
    seed: int | None = None,
    round: Round | None = None,  # noqa: A002 - the field's name
) -> Submission:
    """Create a queued submission and enqueue its preparation once the transaction commits.

    The seed is secret and fresh unless given (rounds share theirs across agents).

    Raises:
        SubmissionError: unknown app or a query count outside 1..1000.
    """
    chosen = _validate_apps(apps, queries_per_app)
    submission = Submission.objects.create(
        agent=agent,
        round=round,
        seed=seed if seed is not None else secrets.randbits(31),
        apps=chosen,
        queries_per_app=queries_per_app,
    )
    from submissions.tasks import submission_prepare as submission_prepare_task

    transaction.on_commit(
        lambda: submission_prepare_task.apply_async((submission.pk,), queue="control")
    )
    return submission


def round_create(*, apps: Sequence[str], queries_per_app: int, created_by: Any = None) -> Round:
    """Start a round: one submission per active agent, all on the same fresh seed."""
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
    """Generate the submission's queries, store one Episode per query and enqueue them.

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
            Episode.objects.bulk_create(rows, ignore_conflicts=True)
            Submission.objects.filter(pk=submission.pk).update(
                status=Submission.Status.RUNNING, started_at=timezone.now()
            )
    pending = list(
        submission.episodes.filter(
            status__in=[Episode.Status.PENDING, Episode.Status.RUNNING]
        ).values_list("pk", "app")
    )
    from submissions.tasks import episode_execute as episode_execute_task

    def enqueue() -> None:
        for episode_id, app_id in pending:
            episode_execute_task.apply_async((episode_id,), queue=app_id)

    transaction.on_commit(enqueue)


def _episode_row(submission: Submission, query: Query) -> Episode:
    return Episode(
        submission=submission,
        app=query.app_id,
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
    allowed = list(settings.NETARENA["AGENT_ALLOWED_NETWORKS"])
    if agent.is_reference:
        allowed += LOOPBACK_NETWORKS
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
    claimed = Episode.objects.filter(
        pk=episode_id, status__in=[Episode.Status.PENDING, Episode.Status.RUNNING]
    )
    episode = claimed.select_related("submission__agent").first()
    if episode is None:
        return
    if episode.attempts >= EPISODE_MAX_ATTEMPTS:
        _episode_close_error(episode, "evaluator: episode was interrupted too many times")
        return
    claimed.update(
        status=Episode.Status.RUNNING, attempts=episode.attempts + 1, started_at=timezone.now()
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


def _episode_store(episode: Episode, **fields: Any) -> None:
    Episode.objects.filter(pk=episode.pk).update(
        status=Episode.Status.DONE, finished_at=timezone.now(), **fields
    )
    submission_close_if_complete(submission_id=episode.submission_id)


def _episode_close_error(episode: Episode, message: str) -> None:
    Episode.objects.filter(pk=episode.pk).update(
        status=Episode.Status.ERROR,
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
    unfinished = Episode.objects.filter(
        submission_id=submission_id, status__in=[Episode.Status.PENDING, Episode.Status.RUNNING]
    ).exists()
    if unfinished:
        return False
    updated = Submission.objects.filter(pk=submission_id, status=Submission.Status.RUNNING).update(
        status=Submission.Status.FINISHED, finished_at=timezone.now()
    )
    return updated == 1
