"""Team membership: who may act for a team and its agents.

A team's life (create, invite, join, remove a member) is ``accounts.services``, which owns the
ownership and invitation rows; the submission services only ask whether a user belongs to a
team, here, so that ``submissions`` never imports ``accounts``.
"""

from __future__ import annotations

from typing import Any

from submissions.errors import NotTeamMemberError
from submissions.models import Team


def team_member_is(*, team: Team, user: Any) -> bool:
    """True when ``user`` is an authenticated member of ``team``."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return team.members.filter(pk=user.pk).exists()


def team_member_check(*, team: Team, user: Any) -> None:
    """Refuse ``user`` unless they are a member of ``team``.

    Raises:
        NotTeamMemberError: not a member (or an anonymous user).
    """
    if not team_member_is(team=team, user=user):
        raise NotTeamMemberError("you are not a member of this team")
