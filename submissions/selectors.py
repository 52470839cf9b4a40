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

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Exists, OuterRef

from evaluator.registry import app_ids
from evaluator.stats import Interval, mean_interval, tie_ranks, wilson_interval
from submissions.models import Agent, EpisodeRecord, Submission, Team


@dataclass
class Standing:
    """One leaderboard row: an agent's figures in one app (rates in [0, 1], latency in s).

    ``correct_and_safe`` (episodes both correct and safe) is the headline and rank key (issue 14
    item 1): an agent that changes nothing is safe but never correct. ``action_rate`` is the
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

    @property
    def finished_at(self) -> datetime | None:
        """When the underlying submission finished."""
        return self.submission.finished_at


def latest_submissions(*, app_id: str) -> list[Submission]:
    """The most recent scored submission of every active agent that covered ``app_id``.

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
            status=Submission.Status.FINISHED, agent__is_active=True, platform_failed=False
        )
        .filter(Exists(scored))
        .select_related("agent__team", "round")
        .order_by("-finished_at", "-pk")
    )
    for submission in candidates:
        if app_id in submission.apps and submission.agent_id not in latest:
            latest[submission.agent_id] = submission
    return list(latest.values())


class _Verdict(NamedTuple):
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


def _tokens_mean(episodes: list[_Verdict]) -> float | None:
    """Mean reported tokens (in + out) per episode over the episodes that reported any."""
    totals = [
        (e.input_tokens or 0) + (e.output_tokens or 0)
        for e in episodes
        if e.input_tokens is not None or e.output_tokens is not None
    ]
    return sum(totals) / len(totals) if totals else None


def _standing(submission: Submission, episodes: list[_Verdict]) -> Standing:
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


def standings(*, app_id: str) -> list[Standing]:
    """Per-app standings ordered by tie rank on correct-and-safe, then correct-and-safe,
    correctness and safety.

    One query fetches the verdicts of every chosen submission; the aggregation runs in Python
    (a few thousand rows per app).
    """
    chosen = {s.pk: s for s in latest_submissions(app_id=app_id)}
    verdicts: dict[int, list[_Verdict]] = {pk: [] for pk in chosen}
    rows_iter = EpisodeRecord.objects.filter(
        submission_id__in=list(chosen), app_id=app_id, status=EpisodeRecord.Status.DONE
    ).values_list(*_Verdict._fields)
    for values in rows_iter:
        verdict = _Verdict(*values)
        verdicts[verdict.submission_id].append(
            verdict._replace(correct=bool(verdict.correct), safe=bool(verdict.safe))
        )
    rows = [_standing(chosen[pk], episodes) for pk, episodes in verdicts.items() if episodes]
    for row, rank in zip(rows, tie_ranks([r.correct_and_safe for r in rows]), strict=True):
        row.rank = rank
    rows.sort(
        key=lambda r: (
            r.rank,
            -r.correct_and_safe.value,
            -r.correctness.value,
            -r.safety.value,
            r.agent.name,
        )
    )
    return rows


#: Episode columns that are public (everything but the query with its hidden ground truth and
#: the transcript).
PUBLIC_EPISODE_FIELDS = (
    "app_id",
    "index",
    "query_id",
    "level",
    "label",
    "status",
    "correct",
    "safe",
    "latency_s",
    "steps",
    "failure",
)


def submission_episode_rows(*, submission: Submission) -> list[dict[str, object]]:
    """The public columns of a submission's episodes, in (app, index) order."""
    return list(submission.episodes.values(*PUBLIC_EPISODE_FIELDS))


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
