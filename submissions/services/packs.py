"""Held-out packs through their life: sealed, then spent (docs/operating-rounds.md).

The rule (docs/metrics.md, "The ranking of record"):

* a pack configured on this site (``NETARENA_VARIANT_DIRS``) is recorded as **sealed** the
  first time the site sees it (:func:`packs_record`), with its archive;
* a **round** draws its held-out share from sealed packs only; staff may force spent ones
  (``force_spent``), which the round records in ``Round.forced_packs`` and whose queries are
  not held out;
* closing a round **spends** its packs (:func:`packs_spend`): their archives become
  downloadable by digest and their queries' ground truth shows on the episode pages;
* a **practice** (team) submission draws from the public pack and spent packs only, so it
  never exposes a sealed pack;
* the **exposure ledger** (``PackExposure``) records, per submission, how many queries of
  each pack a team's agent was sent (:func:`exposures_record`).

A submission fixes the names and digests of its packs when it is created (a round's
submissions: the round's), and which of them were sealed then (``Submission.sealed_packs``):
only those count as held out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.utils import timezone

from evaluator.types import Query
from evaluator.variants import (
    VariantPack,
    find_pack,
    held_out_packs,
    held_out_share,
    pack_archive,
    packs_commitment,
)
from submissions.errors import PackSpentError
from submissions.models import HeldOutPack, PackExposure, Round, Submission


def pack_record(pack: VariantPack) -> HeldOutPack:
    """The site's row of ``pack`` (app, name, digest), created sealed with its archive the
    first time the site sees that version.

    Raises:
        VariantPackError: the pack has no directory to archive.
    """
    found = HeldOutPack.objects.filter(
        app_id=pack.app_id, name=pack.name, sha256=pack.sha256
    ).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return HeldOutPack.objects.create(
                app_id=pack.app_id,
                name=pack.name,
                sha256=pack.sha256,
                description=pack.description[:300],
                archive=pack_archive(pack),
            )
    except IntegrityError:  # recorded by a concurrent caller meanwhile
        return HeldOutPack.objects.get(app_id=pack.app_id, name=pack.name, sha256=pack.sha256)


def packs_record(apps: Sequence[str]) -> list[tuple[VariantPack, HeldOutPack]]:
    """Every configured held-out pack of ``apps`` with its site row (recorded sealed when new).

    Raises:
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
    """
    return [(pack, pack_record(pack)) for app_id in apps for pack in held_out_packs(app_id)]


def _chosen(
    pairs: Sequence[tuple[VariantPack, HeldOutPack]],
) -> tuple[dict[str, dict[str, str]], float]:
    packs = packs_commitment([pack for pack, _ in pairs])
    return packs, (held_out_share() if packs else 0.0)


def practice_packs_now(apps: Sequence[str]) -> tuple[dict[str, dict[str, str]], float]:
    """The packs a practice submission of ``apps`` draws from: the configured packs that are
    spent (never a sealed one), as ``{app: {name: sha256}}``, and the held-out share (0.0
    without packs).

    Raises:
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
    """
    return _chosen([(p, row) for p, row in packs_record(apps) if row.is_spent])


def round_packs_now(
    apps: Sequence[str], *, force_spent: bool = False
) -> tuple[dict[str, dict[str, str]], float, dict[str, list[str]]]:
    """The packs a round of ``apps`` draws from: the configured sealed packs, plus the spent
    ones when staff force them. Returns ``(packs, share, forced)`` with ``forced`` the spent
    pack names per app (empty unless ``force_spent``).

    Raises:
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
        PackSpentError: every configured pack of an app is spent and ``force_spent`` is False
            (a round would silently hold nothing out; write and configure a fresh pack).
    """
    pairs = packs_record(apps)
    spent_only = sorted(
        {p.app_id for p, _ in pairs}
        - {p.app_id for p, row in pairs if not row.is_spent}
    )
    if spent_only and not force_spent:
        raise PackSpentError(
            "every held-out pack configured for "
            + ", ".join(spent_only)
            + " is spent: configure a fresh pack (docs/operating-rounds.md), or force spent "
            "packs (their queries are then not held out)"
        )
    chosen = [(p, row) for p, row in pairs if force_spent or not row.is_spent]
    packs, share = _chosen(chosen)
    forced: dict[str, list[str]] = {}
    for pack, row in chosen:
        if row.is_spent:
            forced.setdefault(pack.app_id, []).append(pack.name)
    return packs, share, {app: sorted(names) for app, names in sorted(forced.items())}


def sealed_of(packs: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """The names among ``packs`` (``{app: {name: sha256}}``) whose site row is sealed now; a
    version the site never recorded counts as sealed."""
    sealed: dict[str, list[str]] = {}
    for app_id, named in packs.items():
        spent = set(
            HeldOutPack.objects.filter(
                app_id=app_id, state=HeldOutPack.State.SPENT
            ).values_list("name", "sha256")
        )
        names = sorted(n for n, digest in named.items() if (n, digest) not in spent)
        if names:
            sealed[app_id] = names
    return sealed


def submission_packs(submission: Submission, app_id: str) -> list[VariantPack]:
    """The loaded packs the submission recorded for ``app_id`` (exact name and digest).

    Raises:
        VariantPackError: one of them is not loaded in this process (or changed since).
    """
    recorded = submission.packs.get(app_id) or {}
    return [find_pack(app_id, {"name": n, "sha256": d}) for n, d in sorted(recorded.items())]


def query_is_sealed(submission: Submission, query: Query) -> bool:
    """True when ``query`` came from a pack that was sealed when ``submission`` was created."""
    return query.pack in (submission.sealed_packs.get(query.app_id) or [])


def exposures_record(submission: Submission, queries: Sequence[Query]) -> int:
    """Write the exposure ledger of ``submission``: per held-out pack, how many of ``queries``
    its team's agent is sent. Idempotent (one row per pack and submission). Returns the number
    of rows written."""
    counts = Counter((q.app_id, q.pack) for q in queries if q.pack and q.pack != "public")
    written = 0
    for (app_id, name), count in sorted(counts.items()):
        digest = (submission.packs.get(app_id) or {}).get(name)
        row = HeldOutPack.objects.filter(app_id=app_id, name=name, sha256=digest).first()
        if row is None:
            continue  # recorded before the site kept pack rows
        _, created = PackExposure.objects.get_or_create(
            pack=row,
            submission=submission,
            defaults={
                "round": submission.round,
                "team_id": submission.agent.team_id,
                "queries": count,
                "while_sealed": name in (submission.sealed_packs.get(app_id) or []),
            },
        )
        written += created
    return written


def packs_spend(evaluation_round: Round) -> list[HeldOutPack]:
    """Spend the sealed packs ``evaluation_round`` drew from (call when it closes): they are
    published from now on. Returns the packs spent now."""
    spent: list[HeldOutPack] = []
    for app_id, named in evaluation_round.packs.items():
        for name, digest in named.items():
            row = HeldOutPack.objects.filter(
                app_id=app_id, name=name, sha256=digest, state=HeldOutPack.State.SEALED
            ).first()
            if row is None:
                continue
            row.state = HeldOutPack.State.SPENT
            row.spent_at = timezone.now()
            row.spent_by = evaluation_round
            row.save(update_fields=["state", "spent_at", "spent_by"])
            spent.append(row)
    return spent
