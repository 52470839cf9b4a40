"""Team ownership and invitation links (the team and its members live in ``submissions``).

A team's **owners** invite people by a link and remove members. The creator of a team is its
first owner. One invitation link per team is active at a time; a new link replaces the old one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

#: How long an invitation link stays valid.
INVITATION_TTL = timedelta(days=7)


class TeamOwnership(models.Model):
    """``user`` owns ``team``: may invite and remove members."""

    team = models.ForeignKey(
        "submissions.Team", on_delete=models.CASCADE, related_name="ownerships"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_ownerships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_team_owner")]


class TeamInvitation(models.Model):
    """An invitation link ``/accounts/join/<token>/`` into ``team``, valid for 7 days."""

    team = models.OneToOneField(
        "submissions.Team", on_delete=models.CASCADE, related_name="invitation"
    )
    token = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    @property
    def expires_at(self) -> datetime:
        """When the link stops working (``created_at`` + :data:`INVITATION_TTL`)."""
        return self.created_at + INVITATION_TTL

    @property
    def is_valid(self) -> bool:
        """True until :attr:`expires_at`."""
        return timezone.now() < self.expires_at


class NotificationSetting(models.Model):
    """A user's e-mail preferences; a user without a row gets every notification.

    ``submission_emails``: an e-mail when a submission of one of the user's teams finishes or
    fails (``accounts.notifications``).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_setting"
    )
    submission_emails = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"notifications of {self.user_id}: submissions {self.submission_emails}"
