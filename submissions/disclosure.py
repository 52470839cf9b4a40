"""Who may see what of a query's answer, and when: the one rule every page, API, result file
and e-mail reads (docs/security.md, "What each audience sees").

A query's answer is **unspent** while any agent could still use it:

* its submission is queued or running;
* its submission belongs to a round that is not closed (the round's agents share its queries);
* one of the held-out packs its submission drew from is still sealed
  (``submissions.services.packs``; a practice submission stored before packs had a life).

Audiences: the **public** (anyone, including other teams), the **team** that owns the
submission's agent, and **staff** (operators, who run the rounds and hold the packs).

==========================  ===========================  =====================================
what                        unspent                      spent
==========================  ===========================  =====================================
progress counts             everyone                     everyone
episode identity (app,      everyone                     everyone
index, query id, status)
label, level, verdicts,     staff                        everyone
steps, changed state,
blast radius, failure,
times; result and result
file; per-label breakdowns
transcript (prompt and      team (its own agent's        everyone
replies)                    replies only, without the
                            judge's step facts), staff
numeric verdict details     staff                        everyone
ground truth and full       staff                        team, staff
verdict details
==========================  ===========================  =====================================

Everything else that names a query's answer (the hidden ``query`` column, replays) is never
shown outside the admin.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from submissions.models import HeldOutPack, Submission

#: Episode columns anyone may see at any time: which query of which app, and how far it is.
PROGRESS_EPISODE_FIELDS = ("id", "app_id", "index", "query_id", "status")
#: Every public episode column once the answer is spent, in display order.
SPENT_EPISODE_FIELDS = (
    "id",
    "app_id",
    "index",
    "query_id",
    "level",
    "label",
    "status",
    "correct",
    "safe",
    "latency_s",
    "agent_s",
    "steps",
    "changed_state",
    "blast_radius",
    "failure",
)


class Audience(enum.StrEnum):
    """Who is looking (module docstring)."""

    PUBLIC = "public"
    TEAM = "team"
    STAFF = "staff"


@dataclass(frozen=True)
class Disclosure:
    """What one audience may see of one submission's episodes now.

    Attributes:
        audience: who is looking.
        spent: False while the answer is unspent (module docstring).
    """

    audience: Audience
    spent: bool

    @property
    def shows_verdicts(self) -> bool:
        """Labels, levels, verdicts and measures per episode; results, result files and
        breakdowns per level and label."""
        return self.spent or self.audience is Audience.STAFF

    @property
    def episode_fields(self) -> tuple[str, ...]:
        """The episode columns this audience may read (:data:`SPENT_EPISODE_FIELDS` or
        :data:`PROGRESS_EPISODE_FIELDS`)."""
        return SPENT_EPISODE_FIELDS if self.shows_verdicts else PROGRESS_EPISODE_FIELDS

    @property
    def shows_transcript(self) -> bool:
        """The prompt and the agent's replies (while unspent: the owner team's own)."""
        return self.shows_verdicts or self.audience is Audience.TEAM

    @property
    def shows_step_facts(self) -> bool:
        """The judge's per-step facts (safety of a step, loss, mismatches) and the numeric
        verdict details."""
        return self.shows_verdicts

    @property
    def shows_ground_truth(self) -> bool:
        """The hidden ground truth (injected faults, the intended operation) and the full
        verdict details, which can name expected values."""
        if self.audience is Audience.STAFF:
            return True
        return self.spent and self.audience is Audience.TEAM


def audience_of(user: Any, submission: Submission) -> Audience:
    """The audience ``user`` (a Django user or anonymous, or None) belongs to for
    ``submission``."""
    if user is not None and getattr(user, "is_staff", False) and user.is_active:
        return Audience.STAFF
    if user is None or not getattr(user, "is_authenticated", False):
        return Audience.PUBLIC
    if submission.agent.team.members.filter(pk=user.pk).exists():
        return Audience.TEAM
    return Audience.PUBLIC


def submission_is_spent(submission: Submission) -> bool:
    """True once nothing of the submission's queries' answers can help any agent (module
    docstring): it is closed, its round (if any) is closed, and none of its packs is sealed."""
    return bool(spent_ids([submission]))


def spent_ids(submissions: Sequence[Submission]) -> set[int]:
    """The ids of the spent ones among ``submissions`` (:func:`submission_is_spent`), with one
    query for the packs of all of them. A pack version the site never recorded (stored before
    packs had a life) counts as sealed for a practice submission, and as published for a
    closed round's (closing a round published its packs then too)."""
    closed = [
        s
        for s in submissions
        if s.status not in (Submission.Status.QUEUED, Submission.Status.RUNNING)
        and (s.round is None or s.round.closed_at is not None)
    ]
    recorded = {
        s.pk: [(app, name, digest) for app, named in (s.packs or {}).items()
               for name, digest in named.items()]
        for s in closed
    }
    digests = {digest for items in recorded.values() for _, _, digest in items}
    states = {
        (app_id, name, digest): state
        for app_id, name, digest, state in HeldOutPack.objects.filter(
            sha256__in=digests
        ).values_list("app_id", "name", "sha256", "state")
    } if digests else {}
    spent = set()
    for submission in closed:
        unknown = HeldOutPack.State.SEALED if submission.round_id is None else None
        if not any(
            states.get(item, unknown) == HeldOutPack.State.SEALED
            for item in recorded[submission.pk]
        ):
            spent.add(submission.pk)
    return spent


def disclosure_for(user: Any, submission: Submission) -> Disclosure:
    """What ``user`` may see of ``submission`` now."""
    return Disclosure(audience_of(user, submission), submission_is_spent(submission))


def public_disclosure(submission: Submission) -> Disclosure:
    """What the public may see of ``submission`` now (boards, e-mails to a whole team are
    written for this audience too: a team's inbox is not a secure channel)."""
    return Disclosure(Audience.PUBLIC, submission_is_spent(submission))


def episode_rows(submission: Submission, disclosure: Disclosure) -> list[dict[str, object]]:
    """The columns of the submission's episodes ``disclosure`` allows, in (app, index)
    order."""
    return list(submission.episodes.values(*disclosure.episode_fields))
