"""The agent page: public history and score over time; for its team the pre-flight and editing.

``/agents/<id>/`` is public (name, team, protocol, model, the history of submissions and
rounds with per-app correct-and-safe rates, the models the endpoint reported and a flag when
they changed, the score-over-time chart with intervals and rounds marked, the board rank over
time). Members of the agent's team also see the latest
pre-flight with every check (refreshed by polling ``preflight.json`` while it runs), a
"Run pre-flight again" button and the edit form (the secret is replace-only, never shown).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.agent_plots import rank_history_figure, score_over_time_figure
from accounts.agent_selectors import (
    agent_history,
    agent_rank_history,
    history_apps,
    infra_failure_share,
)
from accounts.forms_agents import AgentEditForm
from submissions.models import Agent, AgentPreflight
from submissions.selectors import agent_gaps
from submissions.services import preflight
from submissions.services.agents import agent_update
from submissions.view_helpers import flash_service_call


def _agent(agent_id: int) -> Agent:
    return get_object_or_404(Agent.objects.select_related("team"), pk=agent_id)


def _is_member(request: HttpRequest, agent: Agent) -> bool:
    user = request.user
    return bool(user.is_authenticated and agent.team.members.filter(pk=user.pk).exists())


def _member_agent(request: HttpRequest, agent_id: int) -> Agent:
    """The agent when the user is a member of its team; 404 for everyone else (a missing and
    a foreign agent look the same)."""
    agent = _agent(agent_id)
    if not _is_member(request, agent):
        raise Http404("no such agent among your teams")
    return agent


def preflight_payload(run: AgentPreflight | None) -> dict[str, Any]:
    """JSON of a pre-flight for the page's polling: status, checks, times (ISO 8601), latency,
    and the apps it cleared for submission and those whose canary failed."""
    if run is None:
        return {"status": "none", "checks": [], "passed_apps": [], "failed_apps": []}
    return {
        "id": run.pk,
        "status": run.status,
        "passed_apps": preflight.preflight_passed_apps(run),
        "failed_apps": preflight.preflight_failed_apps(run),
        "endpoint_url": run.endpoint_url,
        "protocol": run.protocol,
        "checks": list(run.checks or []),
        "latency_s": run.latency_s,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


@require_GET
def agent_page(request: HttpRequest, agent_id: int) -> HttpResponse:
    """The agent page (public; pre-flight and edit form for team members only)."""
    agent = _agent(agent_id)
    rows = agent_history(agent=agent)
    apps = history_apps(rows)
    member = _is_member(request, agent)
    ranks = agent_rank_history(agent=agent, apps=apps) if rows else {}
    context: dict[str, Any] = {
        "agent": agent,
        "member": member,
        "apps": apps,
        "rows": [(row, row.score_list(apps)) for row in reversed(rows)],
        "figure": score_over_time_figure(rows=rows, apps=apps) if rows else None,
        "rank_figure": rank_history_figure(history=ranks) if ranks else None,
        "model_changes": sum(1 for row in rows if row.model_changed),
        "gaps": agent_gaps(agent=agent),
        "infra": infra_failure_share(rows),
    }
    if member:
        latest = preflight.preflight_latest(agent=agent)
        context["preflight"] = latest
        context["preflight_data"] = preflight_payload(latest)
        context["edit_form"] = AgentEditForm(
            initial={
                "endpoint_url": agent.endpoint_url,
                "model_name": agent.model_name,
                "auth_header": agent.auth_header,
            }
        )
    return render(request, "agents/detail.html", context)


@require_GET
def agent_preflight_json(request: HttpRequest, agent_id: int) -> JsonResponse:
    """The latest pre-flight as JSON (team members only; 404 for everyone else)."""
    agent = _member_agent(request, agent_id)
    return JsonResponse(preflight_payload(preflight.preflight_latest(agent=agent)))


@login_required
@require_POST
def agent_preflight_view(request: HttpRequest, agent_id: int) -> HttpResponse:
    """Start a new pre-flight (team members only)."""
    agent = _agent(agent_id)
    flash_service_call(
        request,
        lambda: preflight.preflight_start(agent=agent, actor=request.user),
        success="Pre-flight started.",
    )
    return redirect("agents:detail", agent_id=agent.pk)


@login_required
@require_POST
def agent_edit_view(request: HttpRequest, agent_id: int) -> HttpResponse:
    """Change endpoint, model and (replace-only) API key; starts a new pre-flight."""
    agent = _member_agent(request, agent_id)
    form = AgentEditForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        flash_service_call(
            request,
            lambda: agent_update(
                agent=agent,
                actor=request.user,
                endpoint_url=data["endpoint_url"],
                model_name=data["model_name"],
                api_key=data["api_key"],
                auth_header=data["auth_header"],
            ),
            success="Agent updated; a new pre-flight is running.",
        )
    else:
        for field_name, field_errors in form.errors.items():
            messages.error(request, f"{field_name}: {' '.join(str(e) for e in field_errors)}")
    return redirect("agents:detail", agent_id=agent.pk)
