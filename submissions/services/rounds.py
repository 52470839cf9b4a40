"""Rounds: an admin starts one evaluation of every active agent on one shared fresh seed, and
closes it once its submissions are finished (docs/architecture.md, docs/glossary.md).

A round commits to its seed, app versions, salt and held-out packs when it starts
(``evaluator.commitment``); the seed and salt become public when it closes, and its sealed
packs are spent then (docs/operating-rounds.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from evaluator.commitment import new_salt, round_commitment
from evaluator.registry import get_app
from evaluator.types import new_seed
from submissions.errors import RoundClosedError, RoundNotFinishedError
from submissions.models import Agent, Round
from submissions.services.packs import packs_spend, round_packs_now
from submissions.services.submissions import (
    OPEN_STATUSES,
    ROUND_QUERIES_PER_APP_MAX,
    apps_validate,
    submission_create,
)


def round_create(
    *,
    apps: Sequence[str],
    queries_per_app: int,
    created_by: Any = None,
    force_spent: bool = False,
) -> Round:
    """Start a round: one submission per active agent (on the apps it takes part in), all on
    the same fresh seed, drawing its held-out share from the configured packs that are sealed
    (``submissions.services.packs.round_packs_now``); ``force_spent`` also draws from spent
    ones, recorded in ``Round.forced_packs`` (their queries are not held out).

    Raises:
        InvalidInputError: unknown app or a query count outside
            ``1..ROUND_QUERIES_PER_APP_MAX``.
        PackSpentError: every configured pack of an app is spent and ``force_spent`` is False.
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
    """
    chosen = apps_validate(apps, queries_per_app, max_queries=ROUND_QUERIES_PER_APP_MAX)
    with transaction.atomic():
        number = (Round.objects.aggregate(n=Max("number"))["n"] or 0) + 1
        seed, salt = new_seed(), new_salt()
        versions = {app_id: get_app(app_id).version for app_id in chosen}
        packs, share, forced = round_packs_now(chosen, force_spent=force_spent)
        evaluation_round = Round.objects.create(
            number=number,
            seed=seed,
            apps=chosen,
            queries_per_app=queries_per_app,
            versions=versions,
            salt=salt,
            packs=packs,
            held_out_share=share,
            forced_packs=forced,
            commitment=round_commitment(seed, versions, salt, packs, share),
            created_by=created_by,
        )
        for agent in Agent.objects.filter(is_active=True):
            apps_of_agent = [a for a in chosen if not agent.apps or a in agent.apps]
            if not apps_of_agent:
                continue
            submission_create(
                agent=agent,
                apps=apps_of_agent,
                queries_per_app=queries_per_app,
                seed=evaluation_round.seed,
                round=evaluation_round,
            )  # the default prompt type, zeroshot_base: the one the boards rank
    return evaluation_round


def round_close(*, round_id: int) -> Round:
    """Close a round whose submissions are all finished: its seed and salt become public and
    the sealed packs it drew from are spent (published: ``submissions.services.packs``).

    Raises:
        RoundClosedError: the round is closed already.
        RoundNotFinishedError: a submission of the round is still queued or running.
    """
    with transaction.atomic():
        evaluation_round = Round.objects.select_for_update().get(pk=round_id)
        if evaluation_round.is_closed:
            raise RoundClosedError(f"{evaluation_round} is closed already")
        open_count = evaluation_round.submissions.filter(status__in=OPEN_STATUSES).count()
        if open_count:
            raise RoundNotFinishedError(
                f"{evaluation_round} still has {open_count} submission(s) queued or running"
            )
        evaluation_round.closed_at = timezone.now()
        evaluation_round.save(update_fields=["closed_at"])
        packs_spend(evaluation_round)
    return evaluation_round
