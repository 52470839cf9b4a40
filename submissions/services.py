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
message; infrastructure failures are retried by the task with back-off and then close the
episode as ``error`` (excluded from statistics; too many make the submission ``incomplete``);
a worker lost mid-episode is noticed by its stale heartbeat and the episode requeued
(``episodes_requeue``, Celery beat), and a message it had reserved comes back through the
broker (``acks_late``). Each episode is claimed by one delivery at a time and scored at most
once, up to ``EPISODE_MAX_ATTEMPTS`` attempts. A team member may cancel an open submission
(``submission_cancel``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db import connections as db_connections
from django.db.models import Max, Q
from django.utils import timezone

from evaluator.agents import LOOPBACK_NETWORKS, PROTOCOLS, make_client
from evaluator.agents.base import AgentClient
from evaluator.agents.guard import OutboundGuard, RefusedAddressError, ResolveError
from evaluator.commitment import new_salt, round_commitment
from evaluator.oracle_vault import OracleVault
from evaluator.registry import CONTROL_QUEUE, app_ids, get_app
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.types import Query, new_seed
from evaluator.variants import (
    VariantPack,
    find_pack,
    generate_batch,
    held_out_packs,
    held_out_share,
    packs_commitment,
)
from submissions.agent_auth import auth_options
from submissions.aggregates import aggregate_refresh
from submissions.crypto import encrypt_secret
from submissions.errors import (
    AgentLimitError,
    DuplicateAgentError,
    EndpointRefusedError,
    InvalidInputError,
    NotTeamMemberError,
    NotYourAgentError,
    NotYourSubmissionError,
    QuotaExceededError,
    RoundClosedError,
    RoundNotFinishedError,
    SubmissionClosedError,
    SubmissionInProgressError,
)
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team
from submissions.signals import submission_closed

logger = logging.getLogger(__name__)

EPISODE_MAX_ATTEMPTS = 3
#: A submission is open (may still run episodes) in these states.
_OPEN_STATUSES = (Submission.Status.QUEUED, Submission.Status.RUNNING)
#: What a refused registration says (the guard's detail is logged, never shown).
ENDPOINT_REFUSED_MESSAGE = (
    "endpoint refused: it must be a public http(s) address on an allowed port "
    "(see the documentation of agent endpoints)"
)
REFERENCE_KINDS = ("oracle", "null", "heuristic", "scripted", "llm")

#: Celery task names (the tasks live in ``submissions.tasks``, which imports this module;
#: services send by name so that nothing here imports the tasks).
SUBMISSION_PREPARE_TASK = "submissions.submission_prepare"
EPISODE_EXECUTE_TASK = "submissions.episode_execute"


def _announce_closed(submission_id: int) -> None:
    """Send :data:`submissions.signals.submission_closed` once the current transaction
    commits (at once outside one); a receiver's error is logged, never raised into the
    worker or the request that closed the submission."""

    def send() -> None:
        for receiver, result in submission_closed.send_robust(
            sender=Submission, submission_id=submission_id
        ):
            if isinstance(result, Exception):
                logger.error(
                    "receiver %r of submission_closed failed for submission %s: %r",
                    receiver,
                    submission_id,
                    result,
                )

    transaction.on_commit(send)


def _send_task(
    name: str, args: tuple[Any, ...], *, queue: str, task_id: str | None = None
) -> None:
    """Send a Celery task by name to ``queue`` (called from ``transaction.on_commit``);
    episode tasks get the id :func:`episode_task_id` so that a cancel can revoke them."""
    from config.celery import app as celery_app

    if task_id is None and name == EPISODE_EXECUTE_TASK:
        task_id = episode_task_id(int(args[0]))
    celery_app.send_task(name, args=args, queue=queue, task_id=task_id)


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

    Public addresses are always allowed. Only the project's reference agents (served on
    loopback by the project itself) may use ``LOOPBACK_NETWORKS`` and ``AGENT_ALLOWED_NETWORKS``
    (``NETARENA_AGENT_ALLOWED_NETWORKS``); a team's agent gets no private network at all
    unless the operator lists some in ``TEAM_AGENT_NETWORKS``
    (``NETARENA_TEAM_AGENT_NETWORKS``: the single-machine demo, a closed lab).
    """
    if not reference:
        return list(settings.NETARENA.get("TEAM_AGENT_NETWORKS", []))
    return list(settings.NETARENA["AGENT_ALLOWED_NETWORKS"]) + list(LOOPBACK_NETWORKS)


def agent_endpoint_check(*, endpoint_url: str, reference: bool = False) -> None:
    """Check an agent endpoint with the outbound guard and the port rule before it is stored.

    A team's agent must use one of ``AGENT_PORTS`` (``NETARENA_AGENT_PORTS``, default 80, 443,
    8000, 8080, 8443; docs/security.md); reference agents listen on free loopback ports.
    The guard's full explanation (what the host resolved to, the allow-list) is logged; the
    error shown to the user is generic so that it reveals nothing about the server's network.

    Raises:
        EndpointRefusedError: bad URL, a port outside the set, an unresolvable host or a
            refused address.
    """
    guard = OutboundGuard(agent_allowed_networks(reference=reference))
    try:
        parsed = guard.check_syntax(endpoint_url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if not reference and port not in settings.NETARENA["AGENT_PORTS"]:
            raise RefusedAddressError(f"port {port} is not one of the allowed agent ports")
        guard.check_url(endpoint_url)
    except (RefusedAddressError, ResolveError, ValueError) as exc:
        logger.warning("agent endpoint %r refused: %s", endpoint_url[:200], exc)
        raise EndpointRefusedError(ENDPOINT_REFUSED_MESSAGE) from None


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
        AgentLimitError: the team has ``AGENTS_PER_TEAM`` agents already (reference agents
            are exempt).
        EndpointRefusedError: the outbound guard or the port rule refuses the endpoint.
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
    agent_endpoint_check(endpoint_url=endpoint_url, reference=bool(reference_kind))
    with transaction.atomic():
        # The team row lock serialises concurrent registrations of one team (cap and names).
        Team.objects.select_for_update().filter(pk=team.pk).first()
        if Agent.objects.filter(team=team, name=name).exists():
            raise DuplicateAgentError("this team already has an agent of that name")
        cap = settings.NETARENA["AGENTS_PER_TEAM"]
        if not reference_kind and Agent.objects.filter(team=team).count() >= cap:
            raise AgentLimitError(f"a team may register at most {cap} agents")
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


def _team_submission_rules_check(*, agent: Agent, apps: list[str]) -> None:
    """The pre-flight gate for ``apps``, one open submission per agent and the team's daily
    quota (team submissions only).

    Call inside a transaction that holds the team row lock. Submissions the platform failed
    (``platform_failed``) are not charged to the quota.

    Raises:
        PreflightNotPassedError: the agent's pre-flight has not cleared ``apps``.
        SubmissionInProgressError: the agent has a queued or running submission.
        QuotaExceededError: the team used ``SUBMISSIONS_PER_TEAM_PER_DAY`` in the last 24 hours.
    """
    from submissions.preflight import preflight_gate_check  # pre-flight must have passed

    preflight_gate_check(agent=agent, apps=apps)
    open_statuses = [Submission.Status.QUEUED, Submission.Status.RUNNING]
    if Submission.objects.filter(agent=agent, status__in=open_statuses).exists():
        raise SubmissionInProgressError("this agent already has a submission in progress")
    since = timezone.now() - timedelta(days=1)
    used = Submission.objects.filter(
        agent__team_id=agent.team_id,
        round__isnull=True,
        created_at__gte=since,
        platform_failed=False,
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

    Its queries are drawn from the public generator and, at the held-out share, from the
    operator's held-out variant packs (a round's submissions: the round's packs and share;
    others: the packs configured now). The packs' names and digests are fixed here, so the
    queries cannot change between creation and preparation.

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
    try:
        with transaction.atomic():
            if round is None:
                # Lock the team row: concurrent submissions of one team run these checks one
                # after another; the partial unique constraint
                # ``one_open_submission_per_agent`` backs the first rule in the database.
                Team.objects.select_for_update().filter(pk=agent.team_id).first()
                submissions_expire(agent=agent)
                _team_submission_rules_check(agent=agent, apps=chosen)
            if round is not None:
                packs = {a: p for a, p in round.packs.items() if a in chosen}
                share = round.held_out_share
            else:
                packs, share = _held_out_packs_now(chosen)
            submission = Submission.objects.create(
                agent=agent,
                round=round,
                seed=seed if seed is not None else new_seed(),
                apps=chosen,
                queries_per_app=queries_per_app,
                packs=packs,
                held_out_share=share if packs else 0.0,
            )
            transaction.on_commit(
                lambda: _send_task(SUBMISSION_PREPARE_TASK, (submission.pk,), queue=CONTROL_QUEUE)
            )
    except IntegrityError:
        raise SubmissionInProgressError("this agent already has a submission in progress") from None
    return submission


def _held_out_packs_now(apps: Sequence[str]) -> tuple[dict[str, dict[str, str]], float]:
    """The configured held-out packs of ``apps`` (``{app: {name: sha256}}``) and the share.

    Raises:
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
    """
    packs = packs_commitment([p for app_id in apps for p in held_out_packs(app_id)])
    return packs, (held_out_share() if packs else 0.0)


def _packs_of(submission: Submission, app_id: str) -> list[VariantPack]:
    """The loaded packs the submission recorded for ``app_id`` (exact name and digest).

    Raises:
        VariantPackError: one of them is not loaded in this process (or changed since).
    """
    recorded = submission.packs.get(app_id) or {}
    return [find_pack(app_id, {"name": n, "sha256": d}) for n, d in sorted(recorded.items())]


def round_create(*, apps: Sequence[str], queries_per_app: int, created_by: Any = None) -> Round:
    """Start a round: one submission per active agent, all on the same fresh seed.

    Raises:
        InvalidInputError: unknown app or a query count outside 1..1000.
    """
    chosen = _validate_apps(apps, queries_per_app)
    with transaction.atomic():
        number = (Round.objects.aggregate(n=Max("number"))["n"] or 0) + 1
        seed, salt = new_seed(), new_salt()
        versions = {app_id: get_app(app_id).version for app_id in chosen}
        packs, share = _held_out_packs_now(chosen)
        evaluation_round = Round.objects.create(
            number=number,
            seed=seed,
            apps=chosen,
            queries_per_app=queries_per_app,
            versions=versions,
            salt=salt,
            packs=packs,
            held_out_share=share,
            commitment=round_commitment(seed, versions, salt, packs, share),
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


def round_close(*, round_id: int) -> Round:
    """Close a round whose submissions are all finished: its seed and salt become public.

    Raises:
        RoundClosedError: the round is closed already.
        RoundNotFinishedError: a submission of the round is still queued or running.
    """
    with transaction.atomic():
        evaluation_round = Round.objects.select_for_update().get(pk=round_id)
        if evaluation_round.is_closed:
            raise RoundClosedError(f"{evaluation_round} is closed already")
        open_count = evaluation_round.submissions.filter(
            status__in=[Submission.Status.QUEUED, Submission.Status.RUNNING]
        ).count()
        if open_count:
            raise RoundNotFinishedError(
                f"{evaluation_round} still has {open_count} submission(s) queued or running"
            )
        evaluation_round.closed_at = timezone.now()
        evaluation_round.save(update_fields=["closed_at"])
    return evaluation_round


def submission_prepare(*, submission_id: int) -> None:
    """Generate the submission's queries, store one EpisodeRecord per query and enqueue them.

    Idempotent: a submission that already has episodes only re-enqueues the unfinished ones.
    """
    submission = Submission.objects.get(pk=submission_id)
    if submission.status not in (Submission.Status.QUEUED, Submission.Status.RUNNING):
        return  # finished, failed or cancelled meanwhile
    if not submission.episodes.exists():
        try:
            rows: list[EpisodeRecord] = []
            for app_id in submission.apps:
                batch = generate_batch(
                    get_app(app_id),
                    submission.queries_per_app,
                    submission.seed,
                    packs=_packs_of(submission, app_id),
                    share=submission.held_out_share,
                )
                rows.extend(_episode_row(submission, query) for query in batch)
        except Exception as exc:  # noqa: BLE001 - any generator failure fails the submission
            logger.exception("generation failed for submission %s", submission.pk)
            if Submission.objects.filter(pk=submission.pk, status__in=_OPEN_STATUSES).update(
                status=Submission.Status.FAILED,
                platform_failed=True,
                error=storable(f"query generation failed: {exc}"[:2000]),
                finished_at=timezone.now(),
            ):
                _announce_closed(submission.pk)
            return
        with transaction.atomic():
            EpisodeRecord.objects.bulk_create(rows, ignore_conflicts=True)
            if not Submission.objects.filter(
                pk=submission.pk, status=Submission.Status.QUEUED
            ).update(status=Submission.Status.RUNNING, started_at=timezone.now()):
                # cancelled while its queries were generated: none of them runs
                submission.episodes.filter(status=EpisodeRecord.Status.PENDING).update(
                    status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now()
                )
                return
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
        **auth_options(agent),  # key as Bearer or under the agent's auth header
        model=agent.model_name or None,
        timeout_s=settings.NETARENA["AGENT_TIMEOUT_S"],
        allowed_networks=allowed,
    )


class EpisodeRetry(Exception):  # noqa: N818 - a signal to the task, not a failure
    """Raised by :func:`episode_execute` (with ``retry_infrastructure=True``) when an
    infrastructure failure should be retried later: the episode is pending again and the
    Celery task re-sends itself after ``countdown_s`` seconds (back-off)."""

    def __init__(self, countdown_s: float, reason: str) -> None:
        super().__init__(reason)
        self.countdown_s = countdown_s


def _netarena(name: str) -> Any:
    return settings.NETARENA[name]


def _episode_claim(episode_id: int) -> EpisodeRecord | None:
    """Take an episode for this worker, or return None when it must not run here.

    One conditional UPDATE decides between concurrent deliveries of the same episode (a
    duplicate message, a broker redelivery, a requeue): a pending episode, or a running one
    whose heartbeat is older than ``EPISODE_STALE_S`` (its worker died), is claimed by exactly
    one caller; a finished one, or one another live worker is running, is left alone. Pending
    episodes of a cancelled submission are closed as ``cancelled`` instead.
    """
    episode = (
        EpisodeRecord.objects.select_related("submission__agent").filter(pk=episode_id).first()
    )
    if episode is None:
        return None
    if episode.status not in (EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING):
        return None
    if episode.submission.status == Submission.Status.CANCELLED:
        EpisodeRecord.objects.filter(
            pk=episode.pk, status=EpisodeRecord.Status.PENDING
        ).update(status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now())
        return None
    now = timezone.now()
    guard = EpisodeRecord.objects.filter(
        pk=episode.pk, status=episode.status, attempts=episode.attempts
    )
    if episode.status == EpisodeRecord.Status.RUNNING:
        beat = episode.heartbeat_at or episode.started_at
        if beat is not None and now - beat < timedelta(seconds=_netarena("EPISODE_STALE_S")):
            return None  # a live worker runs it; the requeue job takes over if it dies
        guard = guard.filter(heartbeat_at=episode.heartbeat_at)
    if episode.attempts >= EPISODE_MAX_ATTEMPTS:
        if guard.update(status=EpisodeRecord.Status.RUNNING, heartbeat_at=now):
            episode.status = EpisodeRecord.Status.RUNNING
            _episode_close_error(episode, "evaluator: episode was interrupted too many times")
        return None
    if not guard.update(
        status=EpisodeRecord.Status.RUNNING,
        attempts=episode.attempts + 1,
        started_at=now,
        heartbeat_at=now,
    ):
        return None  # another delivery claimed it first
    episode.status = EpisodeRecord.Status.RUNNING
    episode.attempts += 1
    return episode


def _mine(episode: EpisodeRecord) -> Any:
    """The rows of ``episode`` as long as this attempt still owns it (running, same attempt)."""
    return EpisodeRecord.objects.filter(
        pk=episode.pk, status=EpisodeRecord.Status.RUNNING, attempts=episode.attempts
    )


@contextlib.contextmanager
def _heartbeat(episode: EpisodeRecord) -> Any:
    """Refresh ``heartbeat_at`` every ``EPISODE_HEARTBEAT_S`` seconds from a thread while the
    body runs, so that the requeue job can tell a live run from one whose worker died."""
    interval_s = float(_netarena("EPISODE_HEARTBEAT_S"))
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(interval_s):
                _mine(episode).update(heartbeat_at=timezone.now())
        except DatabaseError:
            logger.warning("heartbeat of episode %s failed", episode.pk, exc_info=True)
        finally:
            db_connections.close_all()

    thread = threading.Thread(target=beat, name=f"heartbeat-{episode.pk}", daemon=True)
    if interval_s > 0:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=interval_s + 5)


def _infrastructure_retry(
    episode: EpisodeRecord, message: str, *, retry_infrastructure: bool
) -> None:
    """Give an infrastructure failure back to the queue while attempts remain.

    Raises:
        EpisodeRetry: the episode is pending again; the task re-sends itself after the
            back-off ``EPISODE_RETRY_BACKOFF_S * 2**(attempts - 1)`` seconds.
    """
    if not retry_infrastructure or episode.attempts >= EPISODE_MAX_ATTEMPTS:
        return
    if _mine(episode).update(status=EpisodeRecord.Status.PENDING):
        countdown_s = float(_netarena("EPISODE_RETRY_BACKOFF_S")) * 2 ** (episode.attempts - 1)
        logger.warning(
            "episode %s attempt %d: infrastructure failure, retry in %.0f s: %s",
            episode.pk,
            episode.attempts,
            countdown_s,
            message[:300],
        )
        raise EpisodeRetry(countdown_s, message)


def episode_execute(*, episode_id: int, retry_infrastructure: bool = False) -> None:
    """Run one episode and store its verdict; close the submission when it was the last.

    Idempotent by episode id: a finished episode is left as it is, one another live worker
    runs is left to it, and a redelivered or requeued one is claimed by exactly one delivery
    (``_episode_claim``) and run from scratch (its emulator state is per-episode) until
    ``EPISODE_MAX_ATTEMPTS``. A verdict is stored only while this attempt still owns the
    episode, so an episode is never scored twice (a late run whose episode was requeued is
    discarded). While it runs, a heartbeat thread refreshes ``heartbeat_at``.

    Args:
        retry_infrastructure: the Celery task passes True: an infrastructure failure (the
            emulator failed after the engine's own retries, or the evaluator crashed) puts
            the episode back to pending and raises :class:`EpisodeRetry` while attempts remain.
            Direct callers get the failure recorded at once.

    Raises:
        EpisodeRetry: see ``retry_infrastructure``.
    """
    episode = _episode_claim(episode_id)
    if episode is None:
        return
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
        with _heartbeat(episode), deposit:
            result = run_episode_guarded(
                get_app(query.app_id), query, client, episode_id=episode_token
            )
    except Exception as exc:  # noqa: BLE001 - evaluator bug: close the episode, keep the worker
        logger.exception("episode %s crashed the evaluator", episode_id)
        message = f"evaluator: {type(exc).__name__}: {exc}"
        _infrastructure_retry(episode, message, retry_infrastructure=retry_infrastructure)
        _episode_close_error(episode, message)
        return
    finally:
        client.close()
    if result.infrastructure is not None:
        _infrastructure_retry(
            episode, result.infrastructure.error, retry_infrastructure=retry_infrastructure
        )
        _episode_close_error(
            episode, result.infrastructure.error, evidence=result.details.get("evidence")
        )
        return
    _episode_store(
        episode,
        correct=result.correct,
        safe=result.safe,
        latency_s=result.latency_s,
        wall_s=result.wall_s,
        agent_s=result.agent_s,
        steps=result.steps,
        changed_state=result.changed_state,
        blast_radius=result.blast_radius,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        served_model=result.served_model or "",
        replay=result.replay,
        failure=(result.failure or "")[:200],
        details=result.details,
        transcript=result.transcript,
    )


#: Deepest nesting of a stored JSON value; deeper parts are replaced by a marker.
STORED_JSON_MAX_DEPTH = 64


def storable(value: Any, *, depth: int = 0) -> Any:
    """Return ``value`` made storable in every supported database.

    PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb``, lone UTF-16 surrogates in
    both, and NaN/Infinity in JSON. Strings lose NUL (replaced by U+FFFD) and lone
    surrogates (replaced by ``?``); non-finite floats become their ``repr`` string; tuples
    become lists; any other non-JSON value becomes its ``str``; nesting deeper than
    :data:`STORED_JSON_MAX_DEPTH` is replaced by ``"<clipped: too deep>"``.
    """
    if depth > STORED_JSON_MAX_DEPTH:
        return "<clipped: too deep>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        cleaned = value.replace("\x00", "\ufffd")
        return cleaned.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {
            storable(str(k), depth=depth + 1): storable(v, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable(v, depth=depth + 1) for v in value]
    return storable(str(value), depth=depth + 1)


def _episode_store(episode: EpisodeRecord, **fields: Any) -> None:
    """Store a verdict if this attempt still owns the episode (else discard it: the episode
    was requeued or cancelled meanwhile and is never scored twice); a storage error closes the
    episode as an error (never left running)."""
    clean = {name: storable(value) for name, value in fields.items()}
    try:
        with transaction.atomic():
            stored = _mine(episode).update(
                status=EpisodeRecord.Status.DONE, finished_at=timezone.now(), **clean
            )
            aggregate_refresh(episode_id=episode.pk)  # leaderboard sums (submissions.aggregates)
    except (DatabaseError, TypeError, ValueError) as exc:
        logger.exception("storing the verdict of episode %s failed", episode.pk)
        _episode_close_error(
            episode, f"evaluator: storing the verdict failed: {type(exc).__name__}"
        )
        return
    if not stored:
        logger.warning(
            "episode %s attempt %d: verdict discarded (requeued or cancelled meanwhile)",
            episode.pk,
            episode.attempts,
        )
        return
    logger.info("episode %s scored (attempt %d)", episode.pk, episode.attempts)
    submission_close_if_complete(submission_id=episode.submission_id)


def infrastructure_error_kind(message: str) -> str:
    """The kind of an infrastructure failure from its stored message.

    ``"EmulatorError: mininet did not start"`` -> ``"EmulatorError"``;
    ``"evaluator: RuntimeError: boom"`` -> ``"RuntimeError"``;
    ``"evaluator: expired: ..."`` -> ``"expired"``; anything else -> ``"error"``.
    """
    text = message.removeprefix("evaluator: ")
    head, sep, _ = text.partition(":")
    return head.strip() if sep and head.strip().replace(".", "").isidentifier() else "error"


def _episode_close_error(
    episode: EpisodeRecord, message: str, *, evidence: Any = None
) -> None:
    """Close an episode as an evaluator error (excluded from statistics), if this attempt
    still owns it; ``evidence`` is the emulator's bounded JSON detail (e.g. both
    connectivity matrices of a failed cross-check). ``details`` gets ``error`` (the message)
    and ``error_kind`` (:func:`infrastructure_error_kind`)."""
    text = storable(message)
    details: dict[str, Any] = {
        "error": text[:2000],
        "error_kind": infrastructure_error_kind(text),
        "attempts": episode.attempts,
    }
    if evidence:
        details["evidence"] = storable(evidence)
    closed = _mine(episode).update(
        status=EpisodeRecord.Status.ERROR,
        failure=text[:200],
        details=details,
        finished_at=timezone.now(),
    )
    if closed:
        submission_close_if_complete(submission_id=episode.submission_id)


def submission_close_if_complete(*, submission_id: int) -> bool:
    """Mark the submission finished once no episode is pending or running.

    Infrastructure failures are kept apart from the agent's: when more than
    ``INFRA_FAILURE_MAX_SHARE`` (``NETARENA_INFRA_FAILURE_MAX_SHARE``, default 0.1) of its
    episodes ended as evaluator errors, the submission is ``incomplete`` (and
    ``platform_failed``): not ranked, not charged to the quota, never shown as zeros. A
    submission without a single scored episode is always such a case.
    The conditional UPDATE makes exactly one caller win when episodes finish concurrently
    (a cancelled submission stays cancelled). Returns True for that caller.
    """
    episodes = EpisodeRecord.objects.filter(submission_id=submission_id)
    unfinished = episodes.filter(
        status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING]
    ).exists()
    if unfinished:
        return False
    scored = episodes.filter(status=EpisodeRecord.Status.DONE).count()
    errors = episodes.filter(status=EpisodeRecord.Status.ERROR).count()
    share = errors / (scored + errors) if scored + errors else 1.0
    incomplete = scored == 0 or share > float(_netarena("INFRA_FAILURE_MAX_SHARE"))
    updated = Submission.objects.filter(pk=submission_id, status=Submission.Status.RUNNING).update(
        status=Submission.Status.FINISHED,
        finished_at=timezone.now(),
        platform_failed=incomplete,
        incomplete=incomplete,
    )
    if updated == 1:
        _announce_closed(submission_id)  # the finish e-mail (accounts.notifications)
    return updated == 1


def submission_cancel(*, submission: Submission, actor: Any) -> Submission:
    """Cancel a queued or running submission.

    Its pending episodes are closed as ``cancelled`` at once (and their tasks revoked; a
    worker that still receives one checks the submission first and skips it); episodes
    already running finish and their verdicts are stored whole, never half-written. A
    cancelled submission is never ranked. Quota rule: a cancelled team submission still counts
    against the team's daily quota (the quota counts submissions started; only platform
    failures are free), so cancelling cannot be used to try more batches than the quota.

    Raises:
        NotYourSubmissionError: ``actor`` is not a member of the agent's team, or the
            submission belongs to a round and ``actor`` is not staff.
        SubmissionClosedError: the submission is no longer queued or running.
    """
    is_staff = bool(getattr(actor, "is_staff", False))
    member = (
        actor is not None
        and getattr(actor, "is_authenticated", False)
        and submission.agent.team.members.filter(pk=actor.pk).exists()
    )
    if not is_staff and (not member or submission.round_id is not None):
        raise NotYourSubmissionError("you may not cancel this submission")
    with transaction.atomic():
        updated = Submission.objects.filter(
            pk=submission.pk, status__in=[Submission.Status.QUEUED, Submission.Status.RUNNING]
        ).update(status=Submission.Status.CANCELLED, finished_at=timezone.now())
        if not updated:
            raise SubmissionClosedError("this submission is no longer queued or running")
        pending = EpisodeRecord.objects.filter(
            submission=submission, status=EpisodeRecord.Status.PENDING
        )
        revoked = [episode_task_id(pk) for pk in pending.values_list("pk", flat=True)]
        pending.update(status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now())
        transaction.on_commit(lambda: _revoke(revoked))
    submission.refresh_from_db()
    return submission


def episode_task_id(episode_id: int) -> str:
    """The Celery task id of an episode's task (stable, so that a cancel can revoke it)."""
    return f"episode-{episode_id}"


def _revoke(task_ids: list[str]) -> None:
    """Ask the workers to drop these tasks (best effort: workers check the status anyway)."""
    if not task_ids:
        return
    from config.celery import app as celery_app

    try:
        celery_app.control.revoke(task_ids)
    except Exception:  # noqa: BLE001 - the broker may be down; the workers' check suffices
        logger.warning("revoking %d episode task(s) failed", len(task_ids), exc_info=True)


def episodes_requeue(*, stale_s: float | None = None) -> int:
    """Requeue running episodes whose worker died (Celery beat).

    An episode ``running`` with a heartbeat (``heartbeat_at``, else ``started_at``) older than
    ``stale_s`` (default ``EPISODE_STALE_S``, ``NETARENA_EPISODE_STALE_S``) has no live task:
    the worker refreshes it every ``EPISODE_HEARTBEAT_S`` while the episode runs. It is set
    back to ``pending`` (conditional on the stale heartbeat, so a run that comes back to life
    cannot store its verdict any more) and its task sent again; one of a cancelled submission
    is closed as ``cancelled`` instead. Pending episodes whose message a dead worker had
    reserved come back through the broker (``acks_late``: the message was never
    acknowledged; Redis redelivers it after ``visibility_timeout``).

    Returns the number of episodes requeued.
    """
    wait_s = float(_netarena("EPISODE_STALE_S")) if stale_s is None else stale_s
    cutoff = timezone.now() - timedelta(seconds=wait_s)
    stale = EpisodeRecord.objects.filter(status=EpisodeRecord.Status.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    requeued: list[tuple[int, str]] = []
    for pk, app_id, attempts, beat, submission_status in stale.values_list(
        "pk", "app_id", "attempts", "heartbeat_at", "submission__status"
    ):
        rows = EpisodeRecord.objects.filter(
            pk=pk, status=EpisodeRecord.Status.RUNNING, attempts=attempts, heartbeat_at=beat
        )
        if submission_status == Submission.Status.CANCELLED:
            rows.update(status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now())
        elif rows.update(status=EpisodeRecord.Status.PENDING):
            logger.warning("episode %s lost its worker (attempt %d): requeued", pk, attempts)
            requeued.append((pk, app_id))
    for pk, app_id in requeued:
        _send_task(EPISODE_EXECUTE_TASK, (pk,), queue=app_id, task_id=None)
    return len(requeued)


def submissions_expire(*, max_wait_s: float | None = None, agent: Agent | None = None) -> int:
    """Close submissions that no worker took within ``max_wait_s``.

    A queued submission older than ``max_wait_s`` (the control queue had no worker) fails;
    pending episodes of a running submission that were never started within ``max_wait_s``
    of the submission's start (their app's queue had no worker) close as evaluator errors.
    Either way the platform, not the agent, failed: ``platform_failed`` frees the quota and
    the agent's open-submission slot. Runs from Celery beat and before every team submission.

    Args:
        max_wait_s: default ``SUBMISSION_MAX_WAIT_S`` (``NETARENA_SUBMISSION_MAX_WAIT_S``).
        agent: restrict to this agent's submissions.

    Returns the number of submissions closed.
    """
    wait_s = settings.NETARENA["SUBMISSION_MAX_WAIT_S"] if max_wait_s is None else max_wait_s
    cutoff = timezone.now() - timedelta(seconds=wait_s)
    submissions = Submission.objects.all() if agent is None else agent.submissions.all()
    closed = 0
    for submission_id in submissions.filter(
        status=Submission.Status.QUEUED, created_at__lt=cutoff
    ).values_list("pk", flat=True):
        # one conditional update each: one the control worker started meanwhile stays open
        if Submission.objects.filter(pk=submission_id, status=Submission.Status.QUEUED).update(
            status=Submission.Status.FAILED,
            platform_failed=True,
            error=f"expired: no worker took the submission within {wait_s:g} s",
            finished_at=timezone.now(),
        ):
            closed += 1
            _announce_closed(submission_id)
    stale = submissions.filter(status=Submission.Status.RUNNING, started_at__lt=cutoff)
    for submission_id in stale.values_list("pk", flat=True):
        never_started = EpisodeRecord.objects.filter(
            submission_id=submission_id, status=EpisodeRecord.Status.PENDING
        )
        message = f"evaluator: expired: no worker took the episode within {wait_s:g} s"
        if never_started.update(
            status=EpisodeRecord.Status.ERROR,
            failure=message[:200],
            details={"error": message},
            finished_at=timezone.now(),
        ):
            closed += int(submission_close_if_complete(submission_id=submission_id))
    return closed
