"""Submissions: create, prepare, cancel, close, expire.

The evaluation pipeline::

    submission_create ──on commit──> submission_prepare task   (queue "control")
        generates the queries of every app, one EpisodeRecord row each, then
        ──on commit──> episode_execute task × N                 (queue = the app id)
            runs one episode (``submissions.services.episodes``), stores its verdict
            atomically, and the last one to finish closes the submission.

Nothing here can leave a submission stuck: generation errors fail the submission with a
message; a submission or an episode no worker took is expired (:func:`submissions_expire`,
Celery beat); a team member may cancel an open submission (:func:`submission_cancel`). Every
refusal raises a typed error from ``submissions.errors``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from evaluator.prompting import DEFAULT_PROMPT_TYPE, check_prompt_type
from evaluator.registry import CONTROL_QUEUE, app_ids, get_app
from evaluator.types import Query, new_seed
from evaluator.variants import generate_batch
from submissions.errors import (
    InvalidInputError,
    NotYourAgentError,
    NotYourSubmissionError,
    QuotaExceededError,
    SubmissionClosedError,
    SubmissionInProgressError,
    UserQuotaExceededError,
)
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team
from submissions.services import dispatch
from submissions.services.packs import (
    exposures_record,
    practice_packs_now,
    query_is_sealed,
    sealed_of,
    submission_packs,
)
from submissions.services.preflight import preflight_gate_check
from submissions.services.storage import storable
from submissions.services.teams import team_member_is

logger = logging.getLogger(__name__)

#: A submission is open (may still run episodes) in these states.
OPEN_STATUSES = (Submission.Status.QUEUED, Submission.Status.RUNNING)
#: Most queries per app of a team's submission (the submit form and the API mirror it).
TEAM_QUERIES_PER_APP_MAX = 200
#: Most queries per app of a round's submissions (the round form mirrors it).
ROUND_QUERIES_PER_APP_MAX = 1000


def apps_validate(apps: Sequence[str], queries_per_app: int, *, max_queries: int) -> list[str]:
    """``apps`` without repeats, in the given order, once every app is registered and
    ``queries_per_app`` is in ``1..max_queries``.

    Raises:
        InvalidInputError: no app, an unknown app, or a query count out of range.
    """
    chosen = list(dict.fromkeys(apps))
    unknown = [a for a in chosen if a not in app_ids()]
    if not chosen or unknown:
        raise InvalidInputError(f"unknown or missing apps {unknown or chosen}; known: {app_ids()}")
    if not 1 <= queries_per_app <= max_queries:
        raise InvalidInputError(f"queries per app must be between 1 and {max_queries}")
    return chosen


def prompt_type_validate(prompt_type: str, apps: Sequence[str]) -> str:
    """``prompt_type`` once it is one of NetArena's four (``evaluator.prompting``) and, for a
    few-shot type, every app of ``apps`` has worked examples (``App.few_shot_examples``;
    every shipped app has).

    Raises:
        InvalidInputError: an unknown prompt type (``check_prompt_type``'s message), or a
            few-shot type for an app without examples.
    """
    try:
        check_prompt_type(prompt_type)
    except ValueError as error:
        raise InvalidInputError(str(error)) from None
    if prompt_type.startswith("fewshot"):
        bare = [app_id for app_id in apps if not get_app(app_id).few_shot_examples()]
        if bare:
            raise InvalidInputError(
                f"{prompt_type} sends worked examples and {', '.join(bare)} has none; "
                "choose a zeroshot prompt type"
            )
    return prompt_type


def _team_submission_rules_check(*, agent: Agent, apps: list[str]) -> None:
    """One open submission per agent and the team's daily quota (team submissions only; the
    pre-flight gate, :func:`~submissions.services.preflight.preflight_gate_check`, comes
    first).

    Call inside a transaction that holds the team row lock. Submissions the platform failed
    (``platform_failed``) are not charged to the quota.

    Raises:
        SubmissionInProgressError: the agent has a queued or running submission.
        QuotaExceededError: the team used ``SUBMISSIONS_PER_TEAM_PER_DAY`` in the last 24 hours.
    """
    if Submission.objects.filter(agent=agent, status__in=OPEN_STATUSES).exists():
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


def _user_quota_check(*, user: Any) -> None:
    """One person's daily quota across all their teams (team submissions only).

    Charged to ``user``: every team submission of the last 24 hours that they created
    (``Submission.created_by``, whichever team it was for and whether or not they still belong
    to it) or that belongs to an agent of a team they are a member of now (they see its
    results). A new team therefore starts with the person's quota already used, and leaving a
    team does not give back what one submitted through it. Platform failures are free, as for
    the team's quota; round submissions never count.

    Call inside the transaction that creates the submission: the user's row is locked, so that
    concurrent submissions of one user (to several teams) are counted one after another.

    Raises:
        UserQuotaExceededError: ``SUBMISSIONS_PER_USER_PER_DAY`` are used.
    """
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    since = timezone.now() - timedelta(days=1)
    teams = Team.objects.filter(members=user).values("pk")
    used = (
        Submission.objects.filter(round__isnull=True, created_at__gte=since, platform_failed=False)
        .filter(Q(created_by_id=user.pk) | Q(agent__team_id__in=teams))
        .count()
    )
    limit = settings.NETARENA["SUBMISSIONS_PER_USER_PER_DAY"]
    if used >= limit:
        raise UserQuotaExceededError(
            f"your personal daily quota of {limit} submissions across all your teams is used up "
            "(it counts the submissions you made and those of the teams you belong to)"
        )


def submission_create(
    *,
    agent: Agent,
    apps: Sequence[str],
    queries_per_app: int,
    seed: int | None = None,
    round: Round | None = None,  # noqa: A002 - the field's name
    actor: Any = None,
    prompt_type: str = DEFAULT_PROMPT_TYPE,
) -> Submission:
    """Create a queued submission and enqueue its preparation once the transaction commits.

    Its queries are drawn from the public generator and, at the held-out share, from the
    operator's held-out variant packs: a round's submissions from the round's packs and share;
    a practice (team) submission from the configured packs that are spent only, never a sealed
    one (``submissions.services.packs``). The packs' names and digests, and which of them are
    sealed now, are fixed here, so the queries cannot change between creation and
    preparation. So is the endpoint its episodes are sent to: the URL and protocol the
    agent's passing pre-flight checked (recorded with it), or, without one (reference agents,
    rounds), the agent's at creation; editing the agent afterwards never redirects the
    submission.

    A team submission (``round`` is None) obeys the pre-flight gate, one open submission per
    agent, the team's daily quota, the acting user's daily quota across all their teams
    (:func:`_user_quota_check`, when ``actor`` is given) and at most
    :data:`TEAM_QUERIES_PER_APP_MAX` queries per app; a round's submissions are started by an
    admin, count against none of them and may have up to :data:`ROUND_QUERIES_PER_APP_MAX`.
    The seed is secret and fresh unless given (rounds share theirs across agents).

    Args:
        actor: the user acting (API, pages); when given the agent must belong to one of their
            teams, and a team submission is charged to them (``created_by``). Internal callers
            (rounds, commands) pass ``None``.
        prompt_type: NetArena's prompt type its tasks are sent with
            (``evaluator.prompting``; rounds keep the default). Only ``zeroshot_base``
            submissions are ranked on the boards (docs/metrics.md "Prompt types").

    Raises:
        NotYourAgentError: ``actor`` is not a member of the agent's team.
        InvalidInputError: unknown app, a query count out of range, an unknown prompt type or
            a few-shot one for an app without worked examples (:func:`prompt_type_validate`).
        PreflightNotPassedError: the agent's pre-flight has not cleared ``apps``.
        SubmissionInProgressError: the agent already has an open submission.
        QuotaExceededError: the team's daily quota is used up.
        UserQuotaExceededError: the acting user's daily quota is used up.
    """
    if actor is not None and not agent.team.members.filter(pk=actor.pk).exists():
        raise NotYourAgentError("no such agent among your teams")
    limit = TEAM_QUERIES_PER_APP_MAX if round is None else ROUND_QUERIES_PER_APP_MAX
    chosen = apps_validate(apps, queries_per_app, max_queries=limit)
    prompt_type_validate(prompt_type, chosen)
    try:
        with transaction.atomic():
            preflight = None  # what cleared a team submission: the endpoint it records
            if round is None:
                # Lock the team row: concurrent submissions of one team run these checks one
                # after another; the partial unique constraint
                # ``one_open_submission_per_agent`` backs the first rule in the database.
                Team.objects.select_for_update().filter(pk=agent.team_id).first()
                submissions_expire(agent=agent)
                preflight = preflight_gate_check(agent=agent, apps=chosen)
                if actor is not None:
                    _user_quota_check(user=actor)
                _team_submission_rules_check(agent=agent, apps=chosen)
                packs, share = practice_packs_now(chosen)
            else:
                packs = {a: p for a, p in round.packs.items() if a in chosen}
                share = round.held_out_share
            sealed = sealed_of(packs)
            submission = Submission.objects.create(
                agent=agent,
                created_by=actor if round is None else None,
                endpoint_url=preflight.endpoint_url if preflight else agent.endpoint_url,
                protocol=preflight.protocol if preflight else agent.protocol,
                preflight=preflight,
                round=round,
                seed=seed if seed is not None else new_seed(),
                apps=chosen,
                queries_per_app=queries_per_app,
                packs=packs,
                held_out_share=share if packs else 0.0,
                sealed_packs=sealed,
                prompt_type=prompt_type,
            )
            transaction.on_commit(
                lambda: dispatch.task_send(
                    dispatch.SUBMISSION_PREPARE_TASK, (submission.pk,), queue=CONTROL_QUEUE
                )
            )
    except IntegrityError:
        raise SubmissionInProgressError("this agent already has a submission in progress") from None
    return submission


def submission_prepare(*, submission_id: int) -> None:
    """Generate the submission's queries, store one EpisodeRecord per query and enqueue them.

    Idempotent: a submission that already has episodes only re-enqueues the unfinished ones,
    and of two deliveries preparing it at once only one starts it and enqueues its episodes.
    """
    submission = Submission.objects.get(pk=submission_id)
    if submission.status not in OPEN_STATUSES:
        return  # finished, failed or cancelled meanwhile
    if not submission.episodes.exists():
        try:
            rows: list[EpisodeRecord] = []
            queries: list[Query] = []
            for app_id in submission.apps:
                batch = generate_batch(
                    get_app(app_id),
                    submission.queries_per_app,
                    submission.seed,
                    packs=submission_packs(submission, app_id),
                    share=submission.held_out_share,
                )
                queries.extend(batch)
                rows.extend(_episode_row(submission, query) for query in batch)
        except Exception as exc:  # noqa: BLE001 - any generator failure fails the submission
            logger.exception("generation failed for submission %s", submission.pk)
            if Submission.objects.filter(pk=submission.pk, status__in=OPEN_STATUSES).update(
                status=Submission.Status.FAILED,
                platform_failed=True,
                error=storable(f"query generation failed: {exc}"[:2000]),
                finished_at=timezone.now(),
            ):
                dispatch.submission_closed_announce(submission.pk)
            return
        with transaction.atomic():
            EpisodeRecord.objects.bulk_create(rows, ignore_conflicts=True)
            exposures_record(submission, queries)
            if not Submission.objects.filter(
                pk=submission.pk, status=Submission.Status.QUEUED
            ).update(status=Submission.Status.RUNNING, started_at=timezone.now()):
                if Submission.objects.filter(
                    pk=submission.pk, status=Submission.Status.CANCELLED
                ).exists():
                    # cancelled while its queries were generated: none of them runs
                    submission.episodes.filter(status=EpisodeRecord.Status.PENDING).update(
                        status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now()
                    )
                # else a concurrent delivery of this task (a duplicate) started it and
                # enqueues its episodes
                return
    pending = list(
        submission.episodes.filter(
            status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING]
        ).values_list("pk", "app_id")
    )

    def enqueue() -> None:
        for episode_id, app_id in pending:
            dispatch.task_send(dispatch.EPISODE_EXECUTE_TASK, (episode_id,), queue=app_id)

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
        sealed=query_is_sealed(submission, query),
    )


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
    max_share = float(settings.NETARENA["INFRA_FAILURE_MAX_SHARE"])
    incomplete = scored == 0 or share > max_share
    updated = Submission.objects.filter(pk=submission_id, status=Submission.Status.RUNNING).update(
        status=Submission.Status.FINISHED,
        finished_at=timezone.now(),
        platform_failed=incomplete,
        incomplete=incomplete,
    )
    if updated == 1:
        dispatch.submission_closed_announce(submission_id)  # the finish e-mail (accounts)
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
    member = team_member_is(team=submission.agent.team, user=actor)
    if not is_staff and (not member or submission.round_id is not None):
        raise NotYourSubmissionError("you may not cancel this submission")
    with transaction.atomic():
        updated = Submission.objects.filter(pk=submission.pk, status__in=OPEN_STATUSES).update(
            status=Submission.Status.CANCELLED, finished_at=timezone.now()
        )
        if not updated:
            raise SubmissionClosedError("this submission is no longer queued or running")
        pending = EpisodeRecord.objects.filter(
            submission=submission, status=EpisodeRecord.Status.PENDING
        )
        revoked = [dispatch.episode_task_id(pk) for pk in pending.values_list("pk", flat=True)]
        pending.update(status=EpisodeRecord.Status.CANCELLED, finished_at=timezone.now())
        transaction.on_commit(lambda: dispatch.tasks_revoke(revoked))
    submission.refresh_from_db()
    return submission


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
            dispatch.submission_closed_announce(submission_id)
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
