"""Reads of teams, agents, submissions and episode records (HackSoft selectors).

Everything the site shows is read through here: the per-app standings with intervals and tie
ranks (the leaderboard app renders them), a submission's public episode rows, and the look-ups
the APIs need. ``leaderboard`` imports this module; nothing in ``submissions`` imports
``leaderboard``.

An agent's standing in an app comes from its most recent finished submission that covered the
app (so a new round replaces older numbers). Episodes the evaluator could not run (status
``error``) are left out of every figure.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from statistics import NormalDist
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q

from evaluator.prompting import DEFAULT_PROMPT_TYPE
from evaluator.registry import app_ids
from evaluator.stats import (
    CONFIDENCE,
    Interval,
    difference_interval,
    mean_interval,
    wilson_interval,
)
from submissions.aggregates import SUM_FIELDS, TOTAL_LEVEL, Sums
from submissions.models import Agent, EpisodeAggregate, EpisodeRecord, Submission, Team

#: The one prompt type the boards rank (docs/metrics.md "Prompt types"): results of different
#: prompt types are never mixed in one standing; other submissions show on their own pages.
RANKED_PROMPT_TYPE = DEFAULT_PROMPT_TYPE


@dataclass
class Standing:
    """One leaderboard row: an agent's figures in one app (rates in [0, 1], latency in s).

    ``correct_and_safe`` (episodes both correct and safe) is the headline and rank key:
    an agent that changes nothing is safe but never correct. ``action_rate`` is the
    share of episodes with a known ``changed_state`` in which the agent changed the state;
    ``agent_s`` the evaluator-measured seconds spent waiting for the agent per episode;
    ``tokens_mean`` the endpoint-reported tokens (in + out) per episode, ``None`` when it
    reported none; ``blast_radius_mean`` the mean blast radius of the unsafe episodes (what
    they broke, in the app's unit; NaN without unsafe episodes).
    """

    agent: Agent
    submission: Submission
    n: int
    correct_and_safe: Interval
    correctness: Interval
    safety: Interval
    latency_s: Interval
    agent_s: Interval
    steps_mean: float
    action_rate: Interval
    blast_radius_mean: Interval
    tokens_mean: float | None
    levels: dict[int, Interval] = field(default_factory=dict)
    labels: dict[str, Interval] = field(default_factory=dict)
    rank: int = 0
    #: safety per level (the level spider chart, paper Figure 4)
    level_safety: dict[int, Interval] = field(default_factory=dict)
    #: label -> its level, in (level, label) order (the spider's axis order)
    label_levels: dict[str, int] = field(default_factory=dict)
    #: correct and safe on public-generator queries and on held-out pack queries, and the gap
    #: (held-out minus public, Newcombe interval); NaN intervals when the submission had no
    #: queries of one kind (docs/metrics.md "Held-out queries")
    public: Interval | None = None
    held_out: Interval | None = None
    held_out_gap: Interval | None = None
    #: episodes of the submission in this app the evaluator could not run (left out of every
    #: figure above; docs/metrics.md "Infrastructure failures")
    infra_failures: int = 0

    @property
    def infra_failure_rate(self) -> float:
        """Infrastructure failures over all episodes that ended (scored + failures), 0..1."""
        total = self.n + self.infra_failures
        return self.infra_failures / total if total else 0.0

    @property
    def overfit(self) -> bool:
        """Flagged "overfit to the public generator": the gap's whole 95% interval is below 0
        (held-out significantly below public)."""
        gap = self.held_out_gap
        return gap is not None and gap.n > 0 and gap.high < 0

    @property
    def finished_at(self) -> datetime | None:
        """When the underlying submission finished."""
        return self.submission.finished_at


def latest_submissions(*, app_id: str) -> list[Submission]:
    """The most recent scored submission of every active agent that covered ``app_id``
    (sent with :data:`RANKED_PROMPT_TYPE`).

    Scored means finished with at least one episode of ``app_id`` that ran (status ``done``):
    a submission the platform failed (every episode an evaluator error) never replaces the
    agent's last scored one.
    """
    scored = EpisodeRecord.objects.filter(
        submission=OuterRef("pk"), app_id=app_id, status=EpisodeRecord.Status.DONE
    )
    latest: dict[int, Submission] = {}
    candidates = (
        Submission.objects.filter(
            status=Submission.Status.FINISHED,
            agent__is_active=True,
            platform_failed=False,
            prompt_type=RANKED_PROMPT_TYPE,
        )
        .filter(Exists(scored))
        .select_related("agent__team", "round")
        .order_by("-finished_at", "-pk")
    )
    for submission in candidates:
        if app_id in submission.apps and submission.agent_id not in latest:
            latest[submission.agent_id] = submission
    return list(latest.values())


class EpisodeVerdict(NamedTuple):
    """The columns of one scored episode that standings aggregate."""

    submission_id: int
    level: int
    label: str
    correct: bool
    safe: bool
    latency_s: float | None
    agent_s: float | None
    steps: int | None
    changed_state: bool | None
    blast_radius: int | None
    input_tokens: int | None
    output_tokens: int | None


def _tokens_mean(episodes: list[EpisodeVerdict]) -> float | None:
    """Mean reported tokens (in + out) per episode over the episodes that reported any."""
    totals = [
        (e.input_tokens or 0) + (e.output_tokens or 0)
        for e in episodes
        if e.input_tokens is not None or e.output_tokens is not None
    ]
    return sum(totals) / len(totals) if totals else None


def standing_from_episodes(submission: Submission, episodes: list[EpisodeVerdict]) -> Standing:
    """Aggregate one submission's scored episodes of one app into a ``Standing`` (rank 0:
    the caller ranks). ``episodes`` must not be empty."""
    n = len(episodes)
    by_level: dict[int, list[bool]] = defaultdict(list)
    by_label: dict[str, list[bool]] = defaultdict(list)
    for e in episodes:
        by_level[e.level].append(e.correct)
        by_label[e.label].append(e.correct)
    actions = [e.changed_state for e in episodes if e.changed_state is not None]
    return Standing(
        agent=submission.agent,
        submission=submission,
        n=n,
        correct_and_safe=wilson_interval(sum(e.correct and e.safe for e in episodes), n),
        correctness=wilson_interval(sum(e.correct for e in episodes), n),
        safety=wilson_interval(sum(e.safe for e in episodes), n),
        latency_s=mean_interval([e.latency_s for e in episodes if e.latency_s is not None]),
        agent_s=mean_interval([e.agent_s for e in episodes if e.agent_s is not None]),
        steps_mean=sum(e.steps or 0 for e in episodes) / n,
        action_rate=wilson_interval(sum(actions), len(actions)),
        blast_radius_mean=mean_interval(
            [e.blast_radius for e in episodes if not e.safe and e.blast_radius is not None]
        ),
        tokens_mean=_tokens_mean(episodes),
        levels={k: wilson_interval(sum(v), len(v)) for k, v in sorted(by_level.items())},
        labels={k: wilson_interval(sum(v), len(v)) for k, v in sorted(by_label.items())},
    )


def with_gap(
    standing: Standing, correct_and_safe: int, held_out_n: int, held_out_correct_and_safe: int
) -> Standing:
    """Set ``standing``'s public and held-out correct-and-safe rates and their gap (held-out
    minus public, 95% Newcombe interval) from its counts (``correct_and_safe`` over all its
    ``standing.n`` episodes, and over the held-out ones); returns ``standing``.

    Raises:
        ValueError: counts out of range (more held-out episodes than ``standing.n``).
    """
    total = correct_and_safe
    if not 0 <= held_out_correct_and_safe <= held_out_n <= standing.n:
        raise ValueError("held-out counts out of range")
    standing.public = wilson_interval(
        total - held_out_correct_and_safe, standing.n - held_out_n
    )
    standing.held_out = wilson_interval(held_out_correct_and_safe, held_out_n)
    standing.held_out_gap = difference_interval(
        held_out_correct_and_safe, held_out_n, total - held_out_correct_and_safe,
        standing.n - held_out_n,
    )
    return standing


@dataclass(frozen=True)
class AgentGap:
    """An agent's public and held-out correct-and-safe rates in one app, from its newest
    scored submission of the app that had held-out queries (docs/metrics.md "Held-out
    queries")."""

    app_id: str
    submission: Submission
    public: Interval
    held_out: Interval
    gap: Interval

    @property
    def overfit(self) -> bool:
        """The gap's whole 95% interval is below 0: "overfit to the public generator"."""
        return self.gap.n > 0 and self.gap.high < 0


def agent_gaps(*, agent: Agent) -> list[AgentGap]:
    """Per app (sorted), the public/held-out gap of ``agent``'s newest scored submission whose
    queries included held-out ones; apps without such a submission are left out."""
    rows = (
        scored_totals(submission__agent=agent, held_out_n__gt=0)
        .select_related("submission")
        .order_by("app_id", "-submission__finished_at", "-submission_id")
    )
    found: dict[str, AgentGap] = {}
    for row in rows:
        if row.app_id in found:
            continue
        sums = Sums.of([getattr(row, name) for name in SUM_FIELDS])
        found[row.app_id] = AgentGap(
            row.app_id, row.submission, sums.public_interval(), sums.held_out_interval(),
            sums.held_out_gap(),
        )
    return list(found.values())


def _tie_ranks_fast(intervals: list[Interval]) -> list[int]:
    """:func:`evaluator.stats.tie_ranks` (higher is better) in O(n log n): 1 + the number of
    intervals whose low bound lies above this one's high bound; NaN entries rank last."""
    lows = sorted(i.low for i in intervals if not math.isnan(i.value))
    return [
        len(intervals) if math.isnan(i.value) else 1 + len(lows) - bisect_right(lows, i.high)
        for i in intervals
    ]


#: Two-sided standard-normal quantile at ``evaluator.stats.CONFIDENCE`` (1.959964 for 95%).
_Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)


def _wilson(successes: int, n: int) -> Interval:
    """:func:`evaluator.stats.wilson_interval` at ``CONFIDENCE`` for valid counts, without its
    checks (the breakdowns of a page need a thousand of them; a test checks equality)."""
    if n == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0)
    z2 = _Z * _Z
    p = successes / n
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = _Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def _tie_ranks_of_counts(counts: list[tuple[int, int, int, int]]) -> list[int]:
    """Tie ranks (as :func:`_tie_ranks_fast`) on the correct-and-safe Wilson intervals of
    ``(n, correct, safe, correct_and_safe)`` counts, all with ``n > 0``; the closed form of
    :func:`evaluator.stats.wilson_interval` inlined (thousands per request)."""
    z = _Z
    z2 = z * z
    lows: list[float] = []
    highs: list[float] = []
    for n, _, _, k in counts:
        p = k / n
        denominator = 1 + z2 / n
        centre = (p + z2 / (2 * n)) / denominator
        half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
        lows.append(max(0.0, centre - half))
        highs.append(min(1.0, centre + half))
    ordered = sorted(lows)
    return [1 + len(ordered) - bisect_right(ordered, high) for high in highs]


@dataclass
class StandingsPage:
    """A slice of one app's ranked standings and the number of ranked agents in all."""

    rows: list[Standing]
    total: int


def scored_totals(**filters: Any) -> Any:
    """Total aggregate rows (``EpisodeAggregate`` at ``TOTAL_LEVEL``) of finished submissions
    with scored episodes, not failed on the platform's side, sent with
    :data:`RANKED_PROMPT_TYPE` and not of a round that is still open (its answers are
    unspent: ``submissions.disclosure``): what the board counts.
    ``filters`` narrow the queryset (``app_id=...``, ``submission__agent__is_active=True``)."""
    return EpisodeAggregate.objects.filter(
        Q(submission__round__isnull=True) | Q(submission__round__closed_at__isnull=False),
        level=TOTAL_LEVEL,
        n__gt=0,
        submission__status=Submission.Status.FINISHED,
        submission__platform_failed=False,
        submission__prompt_type=RANKED_PROMPT_TYPE,
        **filters,
    )


def _candidate_totals(app_id: str, round_number: int | None) -> Any:
    """Total aggregate rows in ``app_id`` of finished, scored submissions of active agents,
    newest first: a closed round's submissions when ``round_number`` is given, else the
    practice submissions (no round) that drew from no pack sealed at the time."""
    chosen = scored_totals(app_id=app_id, submission__agent__is_active=True)
    if round_number is not None:
        chosen = chosen.filter(submission__round__number=round_number)
    else:
        chosen = chosen.filter(submission__round__isnull=True, submission__sealed_packs={})
    if connection.vendor == "postgresql":
        # only each agent's newest row leaves the database (the caller keeps the first anyway)
        return chosen.order_by(
            "submission__agent_id", "-submission__finished_at", "-submission_id"
        ).distinct("submission__agent_id")
    return chosen.order_by("-submission__finished_at", "-submission_id")


def standings_page(
    *,
    app_id: str,
    round_number: int | None = None,
    offset: int = 0,
    limit: int | None = None,
    agent_ids: Iterable[int] = (),
) -> StandingsPage:
    """One app's standings ranked over every agent, materialised for a slice of them.

    Read from the maintained aggregates (``submissions.aggregates``), never from the episodes:
    one query reads the per-(submission, app) total rows, newest first, keeping each active
    agent's latest scored submission (of the round, if given); the ranks are computed for all
    agents; only the rows in ``[offset, offset + limit)`` plus those of ``agent_ids`` are
    built into :class:`Standing` objects, with their per-level and per-label breakdowns from
    the group rows (two more queries).

    Order: tie rank on correct-and-safe, then correct-and-safe, correctness, safety, name.
    """
    latest: dict[int, int] = {}
    names: dict[int, str] = {}
    # (n, correct, safe, correct_and_safe) of every agent's latest submission: enough to rank
    counts: dict[int, tuple[int, int, int, int]] = {}
    totals = _candidate_totals(app_id, round_number).values_list(
        "submission_id",
        "submission__agent_id",
        "submission__agent__name",
        "n",
        "correct",
        "safe",
        "correct_and_safe",
    )
    for submission_id, agent_id, agent_name, *values in totals:
        if agent_id not in latest:
            latest[agent_id] = submission_id
            names[submission_id] = agent_name
            counts[submission_id] = (values[0], values[1], values[2], values[3])
    ids = list(counts)
    ranks = dict(zip(ids, _tie_ranks_of_counts([counts[pk] for pk in ids]), strict=True))
    ids.sort(
        key=lambda pk: (
            ranks[pk],
            -counts[pk][3] / counts[pk][0],
            -counts[pk][1] / counts[pk][0],
            -counts[pk][2] / counts[pk][0],
            names[pk],
        )
    )
    end = len(ids) if limit is None else offset + limit
    wanted_agents = set(agent_ids)
    shown = ids[offset:end]
    agent_of = {pk: agent_id for agent_id, pk in latest.items()}
    shown += [pk for pk in ids[end:] + ids[:offset] if agent_of[pk] in wanted_agents]
    objects = Submission.objects.select_related("agent__team", "round").in_bulk(shown)
    # the shown rows' totals, and per level and per label the counts the breakdowns need:
    # [n, correct, safe]
    sums: dict[int, Sums] = {}
    levels: dict[int, dict[int, list[int]]] = defaultdict(dict)
    labels: dict[int, dict[str, list[int]]] = defaultdict(dict)
    label_levels: dict[int, dict[str, int]] = defaultdict(dict)
    shown_rows = EpisodeAggregate.objects.filter(app_id=app_id, submission_id__in=shown, n__gt=0)
    for submission_id, *values in shown_rows.filter(level=TOTAL_LEVEL).values_list(
        "submission_id", *SUM_FIELDS
    ):
        sums[submission_id] = Sums.of(values)
    parts = shown_rows.filter(level__gt=TOTAL_LEVEL).values_list(
        "submission_id", "level", "label", "n", "correct", "safe"
    )
    for submission_id, level, label, n, correct, safe in parts:
        for group in (
            levels[submission_id].setdefault(level, [0, 0, 0]),
            labels[submission_id].setdefault(label, [0, 0, 0]),
        ):
            group[0] += n
            group[1] += correct
            group[2] += safe
        label_levels[submission_id].setdefault(label, level)
    infra = dict(
        EpisodeRecord.objects.filter(
            app_id=app_id, submission_id__in=shown, status=EpisodeRecord.Status.ERROR
        )
        .values("submission_id")
        .annotate(n=Count("pk"))
        .values_list("submission_id", "n")
    )
    rows = []
    for pk in shown:
        if pk not in objects or pk not in sums:  # deleted or re-aggregated meanwhile
            continue
        row = standing_from_sums(objects[pk], sums[pk], levels[pk], labels[pk])
        row.infra_failures = infra.get(pk, 0)
        row.label_levels = dict(sorted(label_levels[pk].items(), key=lambda kv: (kv[1], kv[0])))
        row.rank = ranks[pk]
        rows.append(row)
    return StandingsPage(rows=rows, total=len(ids))


def standing_from_sums(
    submission: Submission,
    total: Sums,
    levels: dict[int, list[int]],
    labels: dict[str, list[int]],
) -> Standing:
    """A :class:`Standing` (rank 0) from a submission's summed aggregates in one app and its
    per-level and per-label ``[n, correct, safe]`` counts. ``total.n`` must be positive."""
    return Standing(
        agent=submission.agent,
        submission=submission,
        n=total.n,
        correct_and_safe=total.correct_and_safe_interval(),
        correctness=total.correctness(),
        safety=total.safety(),
        latency_s=total.latency_s(),
        agent_s=total.agent_s(),
        steps_mean=total.steps_mean(),
        action_rate=total.action_rate(),
        blast_radius_mean=total.blast_radius_mean(),
        tokens_mean=total.tokens_mean(),
        levels={k: _wilson(c, n) for k, (n, c, _) in sorted(levels.items())},
        labels={k: _wilson(c, n) for k, (n, c, _) in sorted(labels.items())},
        level_safety={k: _wilson(s, n) for k, (n, _, s) in sorted(levels.items())},
        public=total.public_interval(),
        held_out=total.held_out_interval() if total.held_out_n else None,
        held_out_gap=total.held_out_gap() if total.held_out_n else None,
    )


def standings(*, app_id: str, round_number: int | None = None) -> list[Standing]:
    """Every ranked row of one app (see :func:`standings_page`)."""
    return standings_page(app_id=app_id, round_number=round_number).rows


def all_standings() -> dict[str, list[Standing]]:
    """Standings of every registered app (apps without results map to an empty list)."""
    return {app_id: standings(app_id=app_id) for app_id in app_ids()}


def team_get_for_member(*, name: str, user: Any) -> Team | None:
    """The team called ``name`` if ``user`` is one of its members, else None."""
    return Team.objects.filter(name=name, members=user.pk).first()


def agent_get(*, agent_id: int) -> Agent | None:
    """The agent with this id (with its team), or None."""
    return Agent.objects.select_related("team").filter(pk=agent_id).first()


def submission_get(*, submission_id: int) -> Submission | None:
    """The submission with this id (with its agent and round), or None."""
    return (
        Submission.objects.select_related("agent__team", "round").filter(pk=submission_id).first()
    )
