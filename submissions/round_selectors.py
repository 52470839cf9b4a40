"""Reads of rounds: the list, one round's progress and its standings with paired comparisons.

Agents in a round answer the same queries (one seed), so a round's standings add a *paired*
rank (McNemar's exact test on shared queries, ``evaluator.stats.paired_ranks``) and, per agent,
the agents it is statistically tied with. The seed and salt are only ever read from a closed
round (the pages show the commitment before).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Q

from evaluator.stats import paired_ranks
from submissions.models import EpisodeRecord, HeldOutPack, Round, Submission
from submissions.selectors import EpisodeVerdict, Standing, standing_from_episodes, with_gap


@dataclass
class RoundStanding:
    """One agent's row in a round's app table.

    Attributes:
        standing: the figures (``Standing``), ranked by paired comparisons here.
        paired_rank: 1 + the number of agents significantly better on the shared queries.
        tied_with: names of the agents not significantly different from this one.
    """

    standing: Standing
    paired_rank: int = 1
    tied_with: list[str] = field(default_factory=list)


@dataclass
class RoundProgress:
    """Episodes done (scored or errored) out of all episodes of a round, and per app."""

    done: int
    total: int
    by_app: dict[str, tuple[int, int]]
    open_submissions: int

    @property
    def percent(self) -> float:
        """Share done in percent (100 for an empty round)."""
        return 100.0 if self.total == 0 else 100.0 * self.done / self.total


def rounds_list() -> list[Round]:
    """Every round, newest first, with its submission count (``submission_count``)."""
    return list(
        Round.objects.annotate(submission_count=Count("submissions")).order_by("-number")
    )


def ranking_of_record() -> int | None:
    """The number of the latest closed round: the board's default standings (docs/metrics.md,
    "The ranking of record"); None before any round closed (the board then shows practice)."""
    return (
        Round.objects.filter(closed_at__isnull=False)
        .order_by("-closed_at", "-number")
        .values_list("number", flat=True)
        .first()
    )


def round_get(*, number: int) -> Round | None:
    """The round with this number, or None."""
    return Round.objects.filter(number=number).first()


def round_progress(*, evaluation_round: Round) -> RoundProgress:
    """Count the round's episodes by app and state (one aggregate query)."""
    rows = (
        EpisodeRecord.objects.filter(submission__round=evaluation_round)
        .values("app_id")
        .annotate(
            total=Count("pk"),
            done=Count("pk", filter=Q(status__in=[EpisodeRecord.Status.DONE, "error"])),
        )
    )
    by_app = {row["app_id"]: (row["done"], row["total"]) for row in rows}
    open_submissions = evaluation_round.submissions.filter(
        status__in=[Submission.Status.QUEUED, Submission.Status.RUNNING]
    ).count()
    return RoundProgress(
        done=sum(d for d, _ in by_app.values()),
        total=sum(t for _, t in by_app.values()),
        by_app=dict(sorted(by_app.items())),
        open_submissions=open_submissions,
    )


def round_standings(*, evaluation_round: Round, app_id: str) -> list[RoundStanding]:
    """Standings of one app in a round, ordered by paired rank, then correct-and-safe.

    Every finished submission of the round that covered ``app_id`` is included (platform-failed
    ones are left out, as on the board). Success for the paired test is *correct and safe*.
    """
    submissions = {
        s.pk: s
        for s in evaluation_round.submissions.filter(
            status=Submission.Status.FINISHED, platform_failed=False
        ).select_related("agent__team")
        if app_id in s.apps
    }
    episodes: dict[int, list[EpisodeVerdict]] = defaultdict(list)
    outcomes: dict[int, dict[str, bool]] = defaultdict(dict)
    # per submission: [held-out n, held-out correct and safe]
    held_out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    rows = EpisodeRecord.objects.filter(
        submission_id__in=list(submissions), app_id=app_id, status=EpisodeRecord.Status.DONE
    ).values_list(*EpisodeVerdict._fields, "query_id", "sealed")
    for *values, query_id, sealed in rows:
        verdict = EpisodeVerdict(*values)
        verdict = verdict._replace(correct=bool(verdict.correct), safe=bool(verdict.safe))
        episodes[verdict.submission_id].append(verdict)
        outcomes[verdict.submission_id][query_id] = verdict.correct and verdict.safe
        if sealed:
            tally = held_out[verdict.submission_id]
            tally[0] += 1
            tally[1] += verdict.correct and verdict.safe
    chosen = [pk for pk in submissions if episodes[pk]]
    table = []
    for pk in chosen:
        standing = standing_from_episodes(submissions[pk], episodes[pk])
        if held_out[pk][0]:
            both = sum(e.correct and e.safe for e in episodes[pk])
            with_gap(standing, both, *held_out[pk])
        table.append(RoundStanding(standing))
    ranks, tied_with = paired_ranks([outcomes[pk] for pk in chosen])
    for row, rank, tied in zip(table, ranks, tied_with, strict=True):
        row.paired_rank = rank
        row.standing.rank = rank
        row.tied_with = sorted(table[i].standing.agent.name for i in tied)
    table.sort(
        key=lambda r: (r.paired_rank, -r.standing.correct_and_safe.value, r.standing.agent.name)
    )
    return table


def pack_archive(*, app_id: str, name: str, sha256: str) -> bytes | None:
    """The published archive of held-out pack ``name`` at digest ``sha256``: only once it is
    spent (None while sealed or when the site never recorded that version)."""
    row = (
        HeldOutPack.objects.filter(
            app_id=app_id, name=name, sha256=sha256, state=HeldOutPack.State.SPENT
        )
        .only("archive")
        .first()
    )
    return None if row is None else bytes(row.archive)


def spent_pack_by_digest(*, sha256: str) -> HeldOutPack | None:
    """The spent pack whose content digest is ``sha256`` (None while sealed or unknown)."""
    return HeldOutPack.objects.filter(sha256=sha256, state=HeldOutPack.State.SPENT).first()


def packs_list() -> list[HeldOutPack]:
    """Every pack version the site recorded, with its state (no archives loaded)."""
    return list(HeldOutPack.objects.defer("archive").select_related("spent_by"))
