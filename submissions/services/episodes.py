"""The episode runtime of the workers: claim, heartbeat, execute, retry, store, requeue.

Each episode is claimed by one delivery at a time and scored at most once, up to
:data:`EPISODE_MAX_ATTEMPTS` attempts. Infrastructure failures are retried by the task with
back-off and then close the episode as ``error`` (excluded from statistics; too many make the
submission ``incomplete``); a worker lost mid-episode is noticed by its stale heartbeat and
the episode requeued (:func:`episodes_requeue`, Celery beat), and a message it had reserved
comes back through the broker (``acks_late``); tasks a broker lost with its data (a Redis
restart) are sent again (:func:`tasks_resend_after_broker_loss`). The last episode to finish
closes its submission (``submissions.services.submissions.submission_close_if_complete``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db import connections as db_connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from evaluator.oracle_vault import OracleVault
from evaluator.prompting import with_prompt_type
from evaluator.registry import CONTROL_QUEUE, get_app
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.types import Query
from submissions.aggregates import aggregate_refresh
from submissions.models import Agent, EpisodeRecord, Submission
from submissions.services import dispatch
from submissions.services.endpoints import agent_client_build
from submissions.services.storage import storable
from submissions.services.submissions import submission_close_if_complete

logger = logging.getLogger(__name__)

#: Attempts of one episode (deliveries that claimed it) before it closes as an error.
EPISODE_MAX_ATTEMPTS = 3


def _netarena(name: str) -> Any:
    return settings.NETARENA[name]


class EpisodeRetry(Exception):  # noqa: N818 - a signal to the task, not a failure
    """Raised by :func:`episode_execute` (with ``retry_infrastructure=True``) when an
    infrastructure failure should be retried later: the episode is pending again and the
    Celery task re-sends itself after ``countdown_s`` seconds (back-off)."""

    def __init__(self, countdown_s: float, reason: str) -> None:
        super().__init__(reason)
        self.countdown_s = countdown_s


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
        # finished already. Also the retry of a task whose verdict was stored but whose
        # closing of the submission failed (the database went away in between): close it now
        submission_close_if_complete(submission_id=episode.submission_id)
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


def _mine(episode: EpisodeRecord) -> QuerySet[EpisodeRecord]:
    """The rows of ``episode`` as long as this attempt still owns it (running, same attempt)."""
    return EpisodeRecord.objects.filter(
        pk=episode.pk, status=EpisodeRecord.Status.RUNNING, attempts=episode.attempts
    )


@contextlib.contextmanager
def _heartbeat(episode: EpisodeRecord) -> Iterator[None]:
    """Refresh ``heartbeat_at`` every ``EPISODE_HEARTBEAT_S`` seconds from a thread while the
    body runs, so that the requeue job can tell a live run from one whose worker died."""
    interval_s = float(_netarena("EPISODE_HEARTBEAT_S"))
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(interval_s):
                try:
                    _mine(episode).update(heartbeat_at=timezone.now())
                except DatabaseError:  # e.g. the database restarting: beat again next time
                    logger.warning("heartbeat of episode %s failed", episode.pk, exc_info=True)
                    db_connections.close_all()  # a broken connection is reopened next time
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


def _agent_as_submitted(submission: Submission) -> Agent:
    """The submission's agent with the endpoint the submission recorded at creation (the URL
    and protocol its pre-flight passed: ``Submission.endpoint_url``, ``protocol``) in place
    of the agent's current one, so that editing the agent never redirects an accepted
    submission. The row is changed in memory only (never saved); a submission older than those
    fields (blank) keeps the agent's."""
    agent = submission.agent
    if submission.endpoint_url:
        agent.endpoint_url = submission.endpoint_url
        agent.protocol = submission.protocol or agent.protocol
    return agent


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
    agent = _agent_as_submitted(episode.submission)
    try:
        query = Query.from_dict(episode.query)
        # the submission's prompt type, applied as ``evaluate --prompt-type`` applies it
        client = with_prompt_type(agent_client_build(agent=agent), episode.submission.prompt_type)
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


def _verdict_write(episode: EpisodeRecord, clean: dict[str, Any]) -> int:
    """Write a verdict and its leaderboard sums in one transaction, retrying while the
    database is unreachable (``OperationalError``/``InterfaceError``: a restart, a dropped
    connection) for up to half of ``EPISODE_STALE_S`` (so no requeue can take over meanwhile;
    the heartbeat has stopped); returns the rows updated (0: this attempt lost the episode).

    Raises:
        DatabaseError: the database stayed unreachable, or any other database error.
    """
    deadline = time.monotonic() + float(_netarena("EPISODE_STALE_S")) / 2
    pause_s = 0.5
    retried = False
    while True:
        try:
            with transaction.atomic():
                stored = _mine(episode).update(
                    status=EpisodeRecord.Status.DONE, finished_at=timezone.now(), **clean
                )
                aggregate_refresh(episode_id=episode.pk)  # leaderboard sums (aggregates)
            if not stored and retried:
                # the failed try may have committed before its connection broke: done with
                # this attempt's number is that commit (another delivery claims a new number)
                stored = EpisodeRecord.objects.filter(
                    pk=episode.pk, status=EpisodeRecord.Status.DONE, attempts=episode.attempts
                ).count()
            return stored
        except (OperationalError, InterfaceError):
            retried = True
            if time.monotonic() + pause_s > deadline:
                raise
            logger.warning(
                "storing the verdict of episode %s: database unreachable, retry in %.1f s",
                episode.pk,
                pause_s,
                exc_info=True,
            )
            db_connections.close_all()  # reopened by the next query
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 5.0)


def _episode_store(episode: EpisodeRecord, **fields: Any) -> None:
    """Store a verdict if this attempt still owns the episode (else discard it: the episode
    was requeued or cancelled meanwhile and is never scored twice). A database that is
    unreachable for a moment (a restart) is waited for (:func:`_verdict_write`); any other
    storage error closes the episode as an error (never left running)."""
    clean = {name: storable(value) for name, value in fields.items()}
    try:
        stored = _verdict_write(episode, clean)
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
        dispatch.task_send(dispatch.EPISODE_EXECUTE_TASK, (pk,), queue=app_id, task_id=None)
    return len(requeued)


def tasks_resend_after_broker_loss() -> int:
    """Send again the tasks a broker that lost its data held (Celery beat, with
    :func:`episodes_requeue`).

    Redis keeps queued messages in memory only: after it restarts, pending episodes and
    queued submissions would wait for a message that no longer exists until
    ``submissions_expire`` failed them hours later. Once per loss
    (:func:`~submissions.services.dispatch.broker_data_lost`) this sends the task of every
    pending episode of an open submission and the preparation of every queued submission
    again. A message that did survive (or was sent after the restart) makes a duplicate,
    which is harmless: a delivery claims an episode only while it is pending, and a
    preparation enqueues only what is unfinished. Running episodes need nothing: their
    workers finish them (or, dead, :func:`episodes_requeue` requeues them).

    Returns the number of tasks sent.
    """
    if not dispatch.broker_data_lost():
        return 0
    episodes = EpisodeRecord.objects.filter(
        status=EpisodeRecord.Status.PENDING, submission__status=Submission.Status.RUNNING
    ).values_list("pk", "app_id")
    queued = Submission.objects.filter(status=Submission.Status.QUEUED).values_list(
        "pk", flat=True
    )
    sent = 0
    try:
        for submission_id in queued:
            dispatch.task_send(
                dispatch.SUBMISSION_PREPARE_TASK, (submission_id,), queue=CONTROL_QUEUE
            )
            sent += 1
        for pk, app_id in episodes:
            dispatch.task_send(dispatch.EPISODE_EXECUTE_TASK, (pk,), queue=app_id)
            sent += 1
    except Exception:
        dispatch.broker_mark_forget()  # the next run sends them all again
        raise
    if sent:
        logger.warning("the broker lost its messages: %d task(s) sent again", sent)
    return sent
