"""Rejudging stored episodes: replay each one's stored replies in a fresh
emulator through :func:`evaluator.rejudge.rejudge` and report whether every verdict holds.

Used by ``python manage.py rejudge``. Only episodes that ran (status ``done``) are replayed;
an episode scored by another generator version than the registered app's, or without a replay
record, is reported as not replayable instead of being judged on different terms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db.models import QuerySet

from evaluator.registry import get_app
from evaluator.rejudge import NotReplayableError, Rejudgement, rejudge
from evaluator.types import Query
from submissions.models import EpisodeRecord

#: The stored columns compared with the replay (as ``evaluator.rejudge.VERDICT_FIELDS``).
_STORED_FIELDS = (
    "correct", "safe", "failure", "steps", "changed_state", "blast_radius", "replay"
)


@dataclass(frozen=True)
class EpisodeRejudgement:
    """One stored episode and what its replay found.

    Attributes:
        episode: the stored record.
        outcome: the replay's comparison, or ``None`` when the episode is not replayable.
        reason: why it is not replayable (empty otherwise).
    """

    episode: EpisodeRecord
    outcome: Rejudgement | None
    reason: str = ""

    @property
    def reproduced(self) -> bool:
        """True when the replay ran and gave the stored verdict."""
        return self.outcome is not None and self.outcome.reproduced


def episodes_to_rejudge(
    *,
    episode_ids: Iterable[int] = (),
    submission_id: int | None = None,
    round_number: int | None = None,
) -> QuerySet[EpisodeRecord]:
    """The finished episodes chosen by id, by submission or by round, in a stable order."""
    chosen = EpisodeRecord.objects.filter(status=EpisodeRecord.Status.DONE)
    ids = list(episode_ids)
    if ids:
        chosen = chosen.filter(pk__in=ids)
    if submission_id is not None:
        chosen = chosen.filter(submission_id=submission_id)
    if round_number is not None:
        chosen = chosen.filter(submission__round__number=round_number)
    return chosen.order_by("submission_id", "app_id", "index")


def _stored(episode: EpisodeRecord) -> dict[str, object]:
    return {name: getattr(episode, name) for name in _STORED_FIELDS} | {
        "failure": episode.failure or None
    }


def rejudge_episodes(episodes: Iterable[EpisodeRecord]) -> Iterator[EpisodeRejudgement]:
    """Replay every episode in turn (one fresh emulator each; yields as it goes)."""
    for episode in episodes:
        app = get_app(episode.app_id)
        if episode.app_version != app.version:
            yield EpisodeRejudgement(
                episode,
                None,
                f"scored by {episode.app_id} version {episode.app_version}, "
                f"registered version is {app.version}",
            )
            continue
        try:
            outcome = rejudge(app, Query.from_dict(episode.query), _stored(episode))
        except NotReplayableError as exc:
            yield EpisodeRejudgement(episode, None, str(exc))
            continue
        yield EpisodeRejudgement(episode, outcome)
