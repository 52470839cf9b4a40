"""What a team sees once its submission has finished: the result per app (reads only).

:func:`submission_result` gathers, for each app of a submission, the figures of
docs/metrics.md computed from the submission's own scored episodes (correct and safe,
correctness and safety with 95% Wilson intervals, overall, per level and per label; latency
and agent seconds with Student-t intervals; tokens when the endpoint reported any), its
infrastructure failures with their causes, the rank the agent would take on the board now
(tie rule of docs/metrics.md "Ranks and ties") and the difference from the agent's previous
finished submission of the app (two different sets of queries: an unpaired Newcombe interval).

The submission page (``leaderboard.views``), the API's submission detail
(``submissions.apis``), the downloadable result file (docs/result-format.md, "Submission
result file") and the finish e-mail (``accounts.notifications``) all read it from here.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from evaluator.registry import app_ids, get_app
from evaluator.report import FORMAT_VERSION
from evaluator.stats import (
    Interval,
    difference_interval,
    mean_interval,
    sem_interval,
    wilson_interval,
)
from evaluator.types import JSON
from submissions.aggregates import TOTAL_LEVEL
from submissions.models import EpisodeAggregate, EpisodeRecord, Submission
from submissions.progress import submission_infrastructure_failures
from submissions.selectors import RANKED_PROMPT_TYPE, scored_totals

#: What the difference from the previous submission is, in words (page, API, file, e-mail).
UNPAIRED_NOTE = (
    "unpaired: the two submissions ran different queries; 95% Newcombe interval of the "
    "difference of two independent rates"
)

_OPEN = (Submission.Status.QUEUED, Submission.Status.RUNNING)


class _Row(NamedTuple):
    """The columns of one scored episode the result needs."""

    level: int
    label: str
    correct: bool
    safe: bool
    latency_s: float | None
    agent_s: float | None
    wall_s: float | None
    steps: int | None
    changed_state: bool | None
    blast_radius: int | None
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class Group:
    """Figures of a set of scored episodes (all of an app's, or one level's, or one label's).

    Rates in [0, 1] with 95% Wilson intervals; times in seconds with Student-t intervals.
    """

    n: int
    correct_and_safe: Interval
    correctness: Interval
    safety: Interval
    action_rate: Interval
    action_n: int
    latency_s: Interval
    agent_s: Interval
    wall_s: Interval
    steps_mean: float | None
    blast_radius_mean: Interval
    correctness_sem: Interval
    safety_sem: Interval

    @property
    def correct_and_safe_count(self) -> int:
        """Episodes both correct and safe."""
        return round(self.correct_and_safe.value * self.n) if self.n else 0

    def to_dict(self) -> JSON:
        """The group of the result-file summary (docs/result-format.md), plus ``agent_s``."""
        return {
            "n": self.n,
            "correctness": self.correctness.to_dict(),
            "safety": self.safety.to_dict(),
            "correct_and_safe": self.correct_and_safe.to_dict(),
            "action_rate": self.action_rate.to_dict(),
            "action_n": self.action_n,
            "correctness_sem": self.correctness_sem.to_dict(),
            "safety_sem": self.safety_sem.to_dict(),
            "latency_s": self.latency_s.to_dict(),
            "agent_s": self.agent_s.to_dict(),
            "wall_s": self.wall_s.to_dict(),
            "steps_mean": self.steps_mean,
            "blast_radius_mean": self.blast_radius_mean.to_dict(),
        }


def _group(rows: Sequence[_Row]) -> Group:
    """Aggregate scored episodes (a NULL verdict counts as false, as in the board's sums)."""
    n = len(rows)
    correct = [bool(r.correct) for r in rows]
    safe = [bool(r.safe) for r in rows]
    actions = [r.changed_state for r in rows if r.changed_state is not None]
    radii = [float(r.blast_radius) for r in rows if not r.safe and r.blast_radius is not None]
    return Group(
        n=n,
        correct_and_safe=wilson_interval(sum(bool(r.correct and r.safe) for r in rows), n),
        correctness=wilson_interval(sum(correct), n),
        safety=wilson_interval(sum(safe), n),
        action_rate=wilson_interval(sum(actions), len(actions)),
        action_n=len(actions),
        latency_s=mean_interval([r.latency_s for r in rows if r.latency_s is not None]),
        agent_s=mean_interval([r.agent_s for r in rows if r.agent_s is not None]),
        wall_s=mean_interval([r.wall_s for r in rows if r.wall_s is not None]),
        steps_mean=sum(r.steps or 0 for r in rows) / n if n else None,
        blast_radius_mean=mean_interval(radii),
        correctness_sem=sem_interval(correct),
        safety_sem=sem_interval(safe),
    )


@dataclass(frozen=True)
class Tokens:
    """Tokens the endpoint reported (self-reported cost, never scored).

    Attributes:
        episodes: scored episodes that reported any.
        input_total, output_total: summed over those episodes.
    """

    episodes: int
    input_total: int
    output_total: int

    @property
    def mean_per_episode(self) -> float:
        """Input + output tokens per reporting episode."""
        return (self.input_total + self.output_total) / self.episodes

    def to_dict(self) -> JSON:
        """``{"episodes", "input", "output", "mean_per_episode"}``."""
        return {
            "episodes": self.episodes,
            "input": self.input_total,
            "output": self.output_total,
            "mean_per_episode": self.mean_per_episode,
        }


@dataclass(frozen=True)
class BoardPlace:
    """Where the agent stands on the app's board with this submission's figures, now.

    Attributes:
        rank: 1 + the ranked agents whose correct-and-safe interval lies entirely above this
            one (the board's tie rule, docs/metrics.md "Ranks and ties").
        tied_with: other agents that share ``rank``.
        agents: ranked agents on the board, this one included.
        on_board: this submission is the agent's board row now (False: the board shows
            another of its submissions, and ``rank`` is where this one would stand).
    """

    rank: int
    tied_with: int
    agents: int
    on_board: bool

    def to_dict(self) -> JSON:
        """``{"rank", "tied_with", "agents", "on_board"}``."""
        return asdict(self)


@dataclass(frozen=True)
class PreviousComparison:
    """This submission's correct-and-safe rate against the agent's previous finished one.

    ``difference`` is this rate minus the previous one, with the 95% Newcombe interval of two
    independent rates (:data:`UNPAIRED_NOTE`): the submissions ran different queries, so no
    pairing applies.
    """

    submission_id: int
    finished_at: datetime | None
    correct_and_safe: Interval
    difference: Interval

    def to_dict(self) -> JSON:
        """``{"submission", "finished_at", "correct_and_safe", "difference", "paired",
        "method"}``."""
        return {
            "submission": self.submission_id,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "correct_and_safe": self.correct_and_safe.to_dict(),
            "difference": self.difference.to_dict(),
            "paired": False,
            "method": UNPAIRED_NOTE,
        }


@dataclass
class AppResult:
    """One app's result in a submission (see the module docstring).

    Attributes:
        all: every scored episode of the app.
        levels, labels: the same per level and per label (``label_levels`` gives each
            label's level).
        tokens: None when no episode reported tokens.
        infra_failures: episodes the platform could not run (left out of every figure),
            with their cause (``submissions.progress.submission_infrastructure_failures``).
        board: None when the submission is not ranked (``board_note`` says why).
        previous: None when the agent has no earlier finished submission of the app.
    """

    app_id: str
    title: str
    all: Group
    levels: dict[int, Group] = field(default_factory=dict)
    labels: dict[str, Group] = field(default_factory=dict)
    label_levels: dict[str, int] = field(default_factory=dict)
    tokens: Tokens | None = None
    infra_failures: list[dict[str, Any]] = field(default_factory=list)
    board: BoardPlace | None = None
    board_note: str = ""
    previous: PreviousComparison | None = None

    @property
    def infra_by_kind(self) -> dict[str, int]:
        """Infrastructure failures counted by kind, most frequent first."""
        return dict(Counter(f["kind"] for f in self.infra_failures).most_common())

    @property
    def label_rows(self) -> list[tuple[str, int, Group]]:
        """``(label, its level, group)`` in (level, label) order, for tables."""
        return [(label, self.label_levels[label], g) for label, g in self.labels.items()]

    @property
    def episodes_ended(self) -> int:
        """Scored episodes plus infrastructure failures."""
        return self.all.n + len(self.infra_failures)

    def to_dict(self) -> JSON:
        """The app's entry of the result-file summary (docs/result-format.md)."""
        return {
            "all": self.all.to_dict(),
            "levels": {str(k): g.to_dict() for k, g in self.levels.items()},
            "labels": {k: g.to_dict() for k, g in self.labels.items()},
            "label_levels": dict(self.label_levels),
            "tokens": None if self.tokens is None else self.tokens.to_dict(),
            "infrastructure": {
                "failures": len(self.infra_failures),
                "episodes": self.episodes_ended,
                "by_kind": self.infra_by_kind,
            },
            "board": None if self.board is None else self.board.to_dict(),
            "board_note": self.board_note,
            "previous": None if self.previous is None else self.previous.to_dict(),
        }


@dataclass
class SubmissionResult:
    """A submission's result: ``apps`` in the submission's app order; ``ready`` once it is
    closed (finished, failed or cancelled): an open submission has no result yet."""

    submission: Submission
    ready: bool
    ranked: bool
    note: str
    apps: list[AppResult] = field(default_factory=list)

    def to_dict(self) -> JSON:
        """``{"ready", "ranked", "note", "apps": {app_id: AppResult.to_dict()}}``."""
        return {
            "ready": self.ready,
            "ranked": self.ranked,
            "note": self.note,
            "apps": {app.app_id: app.to_dict() for app in self.apps},
        }


def _ranking_note(submission: Submission) -> str:
    """Why a closed submission is not ranked ("" when it is)."""
    if submission.status == Submission.Status.CANCELLED:
        return "Cancelled: not ranked."
    if submission.status == Submission.Status.FAILED:
        return "Failed on the platform's side: not ranked, no quota used."
    if submission.incomplete or submission.platform_failed:
        return (
            "Incomplete: too many episodes failed on the platform's side; not ranked, no "
            "quota used."
        )
    if submission.prompt_type != RANKED_PROMPT_TYPE:
        return (
            f"Prompt type {submission.prompt_type}: not ranked; the boards rank "
            f"{RANKED_PROMPT_TYPE} submissions only (docs/metrics.md \"Prompt types\")."
        )
    if not submission.agent.is_active:
        return "The agent is inactive: it is not on the board."
    return ""


def _board_counts(app_id: str, exclude_agent_id: int) -> list[tuple[int, int]]:
    """``(n, correct_and_safe)`` of every other active agent's board row in ``app_id``: its
    newest finished, scored submission of the app (as ``selectors.standings_page``)."""
    rows = (
        scored_totals(app_id=app_id, submission__agent__is_active=True)
        .exclude(submission__agent_id=exclude_agent_id)
        .order_by("-submission__finished_at", "-submission_id")
        .values_list("submission__agent_id", "n", "correct_and_safe")
    )
    seen: set[int] = set()
    counts = []
    for agent_id, n, both in rows:
        if agent_id not in seen:
            seen.add(agent_id)
            counts.append((n, both))
    return counts


def board_place(*, submission: Submission, app_id: str, interval: Interval) -> BoardPlace:
    """Rank ``interval`` (this submission's correct-and-safe rate in ``app_id``) among the
    other agents' board rows, with the board's tie rule, and count who shares the rank."""
    others = [wilson_interval(both, n) for n, both in _board_counts(app_id, submission.agent_id)]
    lows = sorted([interval.low, *(o.low for o in others)])

    def rank_of(candidate: Interval) -> int:
        return 1 + len(lows) - bisect_right(lows, candidate.high)

    mine = rank_of(interval)
    newest = (
        EpisodeAggregate.objects.filter(
            app_id=app_id,
            level=TOTAL_LEVEL,
            n__gt=0,
            submission__agent_id=submission.agent_id,
            submission__status=Submission.Status.FINISHED,
            submission__platform_failed=False,
            submission__prompt_type=RANKED_PROMPT_TYPE,
        )
        .order_by("-submission__finished_at", "-submission_id")
        .values_list("submission_id", flat=True)
        .first()
    )
    return BoardPlace(
        rank=mine,
        tied_with=sum(1 for o in others if rank_of(o) == mine),
        agents=len(others) + 1,
        on_board=newest == submission.pk,
    )


def previous_comparison(
    *, submission: Submission, app_id: str, interval: Interval
) -> PreviousComparison | None:
    """The agent's newest finished, scored submission of ``app_id`` with the same prompt type
    created before this one, and this rate minus its rate (unpaired Newcombe interval); None
    without one."""
    previous = (
        EpisodeAggregate.objects.filter(
            app_id=app_id,
            level=TOTAL_LEVEL,
            n__gt=0,
            submission__agent_id=submission.agent_id,
            submission__status=Submission.Status.FINISHED,
            submission__platform_failed=False,
            submission__prompt_type=submission.prompt_type,
            submission__created_at__lte=submission.created_at,
        )
        .exclude(submission_id__gte=submission.pk)
        .select_related("submission")
        .order_by("-submission__created_at", "-submission_id")
        .first()
    )
    if previous is None or interval.n == 0:
        return None
    mine = round(interval.value * interval.n)
    return PreviousComparison(
        submission_id=previous.submission_id,
        finished_at=previous.submission.finished_at,
        correct_and_safe=wilson_interval(previous.correct_and_safe, previous.n),
        difference=difference_interval(mine, interval.n, previous.correct_and_safe, previous.n),
    )


def _scored_rows(submission: Submission) -> dict[str, list[_Row]]:
    """The submission's scored episodes by app, in (app, index) order."""
    by_app: dict[str, list[_Row]] = defaultdict(list)
    rows = (
        EpisodeRecord.objects.filter(submission=submission, status=EpisodeRecord.Status.DONE)
        .order_by("app_id", "index", "pk")
        .values_list("app_id", *_Row._fields)
    )
    for app_id, *values in rows:
        by_app[app_id].append(_Row(*values))
    return by_app


def _tokens(rows: Sequence[_Row]) -> Tokens | None:
    reporting = [r for r in rows if r.input_tokens is not None or r.output_tokens is not None]
    if not reporting:
        return None
    return Tokens(
        episodes=len(reporting),
        input_total=sum(r.input_tokens or 0 for r in reporting),
        output_total=sum(r.output_tokens or 0 for r in reporting),
    )


def submission_result(*, submission: Submission) -> SubmissionResult:
    """The result of ``submission`` per app (module docstring); for an open submission an
    empty, not-ready result (its figures are not final)."""
    if submission.status in _OPEN:
        return SubmissionResult(submission, ready=False, ranked=False, note="", apps=[])
    note = _ranking_note(submission)
    ranked = not note
    scored = _scored_rows(submission)
    failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for failure in submission_infrastructure_failures(submission=submission):
        failures[failure["app_id"]].append(failure)
    known = set(app_ids())
    apps = []
    for app_id in submission.apps:
        rows = scored.get(app_id, [])
        by_level: dict[int, list[_Row]] = defaultdict(list)
        by_label: dict[str, list[_Row]] = defaultdict(list)
        label_levels: dict[str, int] = {}
        for row in rows:
            by_level[row.level].append(row)
            by_label[row.label].append(row)
            label_levels.setdefault(row.label, row.level)
        ordered_labels = sorted(by_label, key=lambda label: (label_levels[label], label))
        result = AppResult(
            app_id=app_id,
            title=get_app(app_id).title if app_id in known else app_id,
            all=_group(rows),
            levels={level: _group(by_level[level]) for level in sorted(by_level)},
            labels={label: _group(by_label[label]) for label in ordered_labels},
            label_levels={label: label_levels[label] for label in ordered_labels},
            tokens=_tokens(rows),
            infra_failures=failures.get(app_id, []),
        )
        if result.all.n and submission.status == Submission.Status.FINISHED:
            interval = result.all.correct_and_safe
            if ranked:
                result.board = board_place(
                    submission=submission, app_id=app_id, interval=interval
                )
            result.previous = previous_comparison(
                submission=submission, app_id=app_id, interval=interval
            )
        result.board_note = note if rows else "No scored episode in this app: not ranked."
        apps.append(result)
    return SubmissionResult(submission, ready=True, ranked=ranked, note=note, apps=apps)


def submission_result_document(*, submission: Submission) -> JSON:
    """The downloadable result file of a submission (docs/result-format.md, "Submission
    result file"); callers serve it only where ``submissions.disclosure`` shows verdicts: the
    layout of ``evaluate --json`` with the public episode columns only
    (never the query, its seed, replies or details) and a summary per app extended with the
    board rank, the previous submission and the infrastructure failures."""
    from submissions.disclosure import SPENT_EPISODE_FIELDS

    result = submission_result(submission=submission)
    known = set(app_ids())
    episodes = list(submission.episodes.values(*SPENT_EPISODE_FIELDS))
    wall_s = None
    if submission.started_at and submission.finished_at:
        wall_s = max(0.0, (submission.finished_at - submission.started_at).total_seconds())
    return {
        "format_version": FORMAT_VERSION,
        "kind": "submission",
        "submission": {
            "id": submission.pk,
            "status": submission.status,
            "incomplete": submission.incomplete,
            "round": submission.round.number if submission.round is not None else None,
            "created_at": submission.created_at.isoformat(),
        },
        "agent": {
            "id": submission.agent_id,
            "name": submission.agent.name,
            "team": submission.agent.team.name,
            "protocol": submission.agent.protocol,
            "model_name": submission.agent.model_name,
        },
        "apps": [
            {
                "app_id": app_id,
                "version": get_app(app_id).version,
                "levels": list(get_app(app_id).levels),
            }
            for app_id in submission.apps
            if app_id in known
        ],
        "run": {
            "queries_per_app": submission.queries_per_app,
            "trials": 1,
            "prompt_type": submission.prompt_type,
            "started_at": submission.started_at.isoformat() if submission.started_at else None,
            "finished_at": submission.finished_at.isoformat() if submission.finished_at else None,
            "wall_s": wall_s,
            "infrastructure_failures": sum(len(a.infra_failures) for a in result.apps),
        },
        "episodes": episodes,
        "ranked": result.ranked,
        "note": result.note,
        "summary": {app.app_id: app.to_dict() for app in result.apps},
    }


def rate_text(interval: Interval) -> str:
    """A rate with its interval in words: ``"83.3% [55.2, 95.3]"`` (``"–"`` without data)."""
    if interval.n == 0 or math.isnan(interval.value):
        return "–"
    return f"{100 * interval.value:.1f}% [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"
