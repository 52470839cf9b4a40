"""Team services: create a team, invite by link, join, remove members.

One person may belong to at most ``TEAMS_PER_USER`` teams (owned or joined, default 3): every
team's quota would otherwise multiply one person's exposure to the benchmark's queries
(docs/security.md). Removing a member rotates the team's invitation link.

Every rule lives here so that pages and the API obey the same ones; this is the site's one
``team_create``. Rule violations raise :class:`TeamError` subclasses of the services' one error
root, ``submissions.errors.ServiceError`` (never a bare ``PermissionDenied``), whose message is
fit for users. Whether a user is a member of a team is ``submissions.services.teams``.
"""

from __future__ import annotations

import secrets
import unicodedata

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import TeamInvitation, TeamOwnership
from submissions.errors import ServiceError
from submissions.models import Team

#: Random bytes in an invitation token (``secrets.token_urlsafe``): 256 bits.
TOKEN_BYTES = 32
#: Default of ``NETARENA["TEAMS_PER_USER"]`` (docs/security.md).
DEFAULT_TEAMS_PER_USER = 3


class TeamError(ServiceError):
    """A team rule was broken; ``str(error)`` is shown to the user."""

    code = "team"
    http_status = 400


class TeamNameTakenError(TeamError):
    """Another team already has this name."""

    code = "team_name_taken"
    http_status = 400


class NotTeamOwnerError(TeamError):
    """The acting user does not own the team."""

    code = "not_team_owner"
    http_status = 403


class InvitationInvalidError(TeamError):
    """The invitation link is unknown or expired."""

    code = "invitation_invalid"
    http_status = 404


class LastOwnerError(TeamError):
    """The team's only owner cannot be removed."""

    code = "last_owner"
    http_status = 409


class TeamLimitError(TeamError):
    """The user already belongs to ``TEAMS_PER_USER`` teams (owned or joined)."""

    code = "team_limit"
    http_status = 409


def teams_per_user() -> int:
    """How many teams one user may belong to, owned or joined (``NETARENA["TEAMS_PER_USER"]``,
    ``NETARENA_TEAMS_PER_USER``, default 3)."""
    return int(settings.NETARENA.get("TEAMS_PER_USER", DEFAULT_TEAMS_PER_USER))


def _team_limit_check(user: User) -> None:
    """Refuse a new team for ``user`` once they belong to :func:`teams_per_user` teams.

    Call inside a transaction: the user's row is locked so that concurrent creations and
    joins of one user are counted one after another.

    Raises:
        TeamLimitError: the limit is reached.
    """
    User.objects.select_for_update().filter(pk=user.pk).first()
    limit = teams_per_user()
    if Team.objects.filter(members=user).count() >= limit:
        raise TeamLimitError(
            f"you already belong to {limit} teams, the most one person may own or join; "
            "leave one (ask its owner to remove you) before creating or joining another"
        )


def is_owner(team: Team, user: User) -> bool:
    """True when ``user`` owns ``team``."""
    return TeamOwnership.objects.filter(team=team, user_id=user.pk).exists()


#: Longest team name (characters): the column's length (``Team.name``), which PostgreSQL
#: enforces and SQLite does not.
TEAM_NAME_MAX_CHARS = int(Team._meta.get_field("name").max_length or 100)


def team_name_problem(name: str) -> str | None:
    """Why ``name`` (already stripped) cannot be a team name, or ``None``: empty, longer than
    :data:`TEAM_NAME_MAX_CHARS`, or holding a control character (NUL, which PostgreSQL refuses
    in text, line breaks, ...) or a lone surrogate (not Unicode text). The same on every
    database, so that SQLite never stores what PostgreSQL would refuse with a 500."""
    if not name:
        return "A team needs a name."
    if len(name) > TEAM_NAME_MAX_CHARS:
        return (
            f"A team name has at most {TEAM_NAME_MAX_CHARS} characters "
            f"(this one has {len(name)})."
        )
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in name):
        return "A team name cannot contain control characters (such as NUL) or lone surrogates."
    return None


def team_create(*, user: User, name: str) -> Team:
    """Create team ``name`` (surrounding spaces dropped) with ``user`` as member and owner.

    Raises:
        TeamError: the name is refused (:func:`team_name_problem`: empty, too long, control
            characters).
        TeamNameTakenError: the name (case-insensitive) is in use.
        TeamLimitError: ``user`` already belongs to :func:`teams_per_user` teams.
    """
    name = name.strip()
    problem = team_name_problem(name)
    if problem is not None:
        raise TeamError(problem)
    try:
        with transaction.atomic():
            _team_limit_check(user)
            if Team.objects.filter(name__iexact=name).exists():
                raise TeamNameTakenError(f"A team named {name!r} already exists.")
            team = Team.objects.create(name=name)
            team.members.add(user)
            TeamOwnership.objects.create(team=team, user=user)
    except IntegrityError:
        raise TeamNameTakenError(f"A team named {name!r} already exists.") from None
    return team


def invitation_renew(*, team: Team, by: User) -> TeamInvitation:
    """Issue a fresh invitation link for ``team``; the previous link stops working.

    Raises :class:`NotTeamOwnerError` unless ``by`` owns the team.
    """
    if not is_owner(team, by):
        raise NotTeamOwnerError("Only a team owner can invite members.")
    return _invitation_issue(team=team, by=by)


def _invitation_issue(*, team: Team, by: User) -> TeamInvitation:
    """Store a fresh token (valid :data:`~accounts.models.INVITATION_TTL` from now) for
    ``team``, replacing its previous one."""
    invitation, _ = TeamInvitation.objects.update_or_create(
        team=team,
        defaults={
            "token": secrets.token_urlsafe(TOKEN_BYTES),
            "created_by": by,
            "created_at": timezone.now(),
        },
    )
    return invitation


def invitation_get(token: str) -> TeamInvitation:
    """The valid invitation with ``token``; raises :class:`InvitationInvalidError` otherwise."""
    invitation = TeamInvitation.objects.select_related("team").filter(token=token).first()
    if invitation is None or not invitation.is_valid:
        raise InvitationInvalidError("This invitation link is unknown or has expired.")
    return invitation


def team_join(*, user: User, token: str) -> Team:
    """Add ``user`` to the team of invitation ``token`` (joining twice is a no-op).

    Raises :class:`InvitationInvalidError` for an unknown or expired token,
    :class:`TeamLimitError` when ``user`` already belongs to :func:`teams_per_user` teams.
    """
    team = invitation_get(token).team
    with transaction.atomic():
        if not team.members.filter(pk=user.pk).exists():
            _team_limit_check(user)
            team.members.add(user)
    return team


def member_remove(*, team: Team, by: User, member: User) -> None:
    """Remove ``member`` (and their ownership) from ``team`` and rotate the team's
    invitation link, if it has one: a link the removed member saw no longer joins (the owners
    see the new one on the team page).

    Raises :class:`NotTeamOwnerError` unless ``by`` owns the team, :class:`LastOwnerError`
    when ``member`` is the team's only owner (a team always keeps one).
    """
    with transaction.atomic():
        owners = list(
            TeamOwnership.objects.select_for_update()
            .filter(team=team)
            .values_list("user_id", flat=True)
        )
        if by.pk not in owners:
            raise NotTeamOwnerError("Only a team owner can remove members.")
        if owners == [member.pk]:
            raise LastOwnerError("The team's only owner cannot be removed.")
        TeamOwnership.objects.filter(team=team, user_id=member.pk).delete()
        team.members.remove(member)
        if TeamInvitation.objects.filter(team=team).exists():
            _invitation_issue(team=team, by=by)
