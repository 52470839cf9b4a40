"""Admin: teams, agents (secrets never shown), rounds (an action starts a new one), submissions."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from submissions.models import Agent, Episode, Round, Submission, Team
from submissions.services import SubmissionError, round_create


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams."""

    list_display = ("name", "created_at")
    filter_horizontal = ("members",)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Agents; the encrypted secret is not editable here."""

    list_display = ("name", "team", "protocol", "endpoint_url", "reference_kind", "is_active")
    list_filter = ("protocol", "is_active")
    exclude = ("secret_encrypted",)


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    """Rounds; 'repeat' starts a new round with the same apps and size on a fresh seed."""

    list_display = ("number", "apps", "queries_per_app", "created_at")
    exclude = ("seed",)
    actions = ["repeat_round"]

    @admin.action(description="Start a new round like the selected one (fresh seed)")
    def repeat_round(self, request: HttpRequest, queryset: QuerySet[Round]) -> None:
        """Admin-only: rounds are never started by teams (DESIGN.md §8)."""
        for template in queryset[:1]:
            try:
                new = round_create(
                    apps=template.apps,
                    queries_per_app=template.queries_per_app,
                    created_by=request.user,
                )
            except SubmissionError as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            self.message_user(request, f"started {new}")


@admin.register(Submission)
class SubmissionAdmin(admin.ModelAdmin):
    """Submissions (read mostly)."""

    list_display = ("pk", "agent", "round", "status", "created_at", "finished_at")
    list_filter = ("status",)
    exclude = ("seed",)


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    """Episodes with their verdicts."""

    list_display = (
        "pk",
        "submission",
        "app",
        "level",
        "label",
        "status",
        "correct",
        "safe",
        "failure",
    )
    list_filter = ("app", "level", "status")
