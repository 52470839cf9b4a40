"""Admin: teams, agents (secrets never shown), rounds (an action starts a new one), submissions.

Writes go through the services so that the admin obeys the same rules as the API: an agent's
endpoint is checked by the outbound guard, a round is started by ``round_create``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from submissions.errors import ServiceError
from submissions.models import (
    Agent,
    EpisodeRecord,
    HeldOutPack,
    PackExposure,
    Round,
    Submission,
    Team,
)
from submissions.services.endpoints import agent_endpoint_check
from submissions.services.rounds import round_create


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams."""

    list_display = ("name", "created_at")
    filter_horizontal = ("members",)


class AgentAdminForm(forms.ModelForm):
    """The agent form; the endpoint must pass the service's outbound guard check."""

    class Meta:
        model = Agent
        exclude = ("secret_encrypted",)

    def clean(self) -> dict[str, Any]:
        """Run ``endpoints.agent_endpoint_check`` on the endpoint (as registration does)."""
        cleaned = super().clean() or {}
        url = cleaned.get("endpoint_url")
        if url:
            try:
                agent_endpoint_check(
                    endpoint_url=url, reference=bool(cleaned.get("reference_kind"))
                )
            except ServiceError as exc:
                self.add_error("endpoint_url", str(exc))
        return cleaned


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Agents; the encrypted secret is not editable here."""

    form = AgentAdminForm
    list_display = ("name", "team", "protocol", "endpoint_url", "reference_kind", "is_active")
    list_filter = ("protocol", "is_active")


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    """Rounds; 'repeat' starts a new round with the same apps and size on a fresh seed."""

    list_display = ("number", "apps", "queries_per_app", "created_at")
    exclude = ("seed",)
    actions = ["repeat_round"]

    @admin.action(description="Start a new round like the selected one (fresh seed)")
    def repeat_round(self, request: HttpRequest, queryset: QuerySet[Round]) -> None:
        """Admin-only: rounds are never started by teams (docs/architecture.md §8)."""
        for template in queryset[:1]:
            try:
                new = round_create(
                    apps=template.apps,
                    queries_per_app=template.queries_per_app,
                    created_by=request.user,
                )
            except ServiceError as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            self.message_user(request, f"started {new}")


@admin.register(Submission)
class SubmissionAdmin(admin.ModelAdmin):
    """Submissions (read mostly)."""

    list_display = ("pk", "agent", "round", "status", "prompt_type", "created_at", "finished_at")
    list_filter = ("status", "prompt_type")
    exclude = ("seed",)


@admin.register(EpisodeRecord)
class EpisodeRecordAdmin(admin.ModelAdmin):
    """Episode records with their verdicts."""

    list_display = (
        "pk",
        "submission",
        "app_id",
        "level",
        "label",
        "status",
        "correct",
        "safe",
        "failure",
    )
    list_filter = ("app_id", "level", "status")


class PackExposureInline(admin.TabularInline):
    """The exposure ledger of one pack: queries sent to each team, per submission."""

    model = PackExposure
    fields = ("created_at", "round", "team", "submission", "queries", "while_sealed")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The ledger is written by the services only."""
        return False


@admin.register(HeldOutPack)
class HeldOutPackAdmin(admin.ModelAdmin):
    """Held-out packs: state (sealed, spent), the round that spent each, its exposure ledger.
    Read-only: packs are recorded by rounds and spent by closing them
    (``submissions.services.packs``)."""

    list_display = ("app_id", "name", "sha256", "state", "sealed_at", "spent_at", "spent_by")
    list_filter = ("app_id", "state")
    readonly_fields = (
        "app_id", "name", "sha256", "description", "state", "sealed_at", "spent_at", "spent_by"
    )
    exclude = ("archive",)
    inlines = [PackExposureInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Recorded by rounds only."""
        return False
