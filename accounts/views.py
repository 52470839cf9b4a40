"""Account pages: sign up (then logged in) and the signed-in user's teams.

Log in, log out and the password-reset flow are Django's own views (``django.contrib.auth.urls``)
with this project's templates under ``templates/registration/``.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services
from accounts.forms import NotificationForm, SignUpForm
from accounts.forms_agents import AgentForm, SubmitForm
from accounts.models import TeamOwnership
from accounts.notifications import notification_settings_get, notification_settings_set
from submissions.errors import ServiceError
from submissions.models import AgentPreflight, Team
from submissions.services.agents import agent_register
from submissions.services.submissions import submission_create
from submissions.view_helpers import flash_service_call


@require_http_methods(["GET", "POST"])
def signup_page(request: HttpRequest) -> HttpResponse:
    """GET: the sign-up form. POST: create the user, log them in, go to ``next`` (a same-site
    path, e.g. an invitation link) or else their team page."""
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    if request.user.is_authenticated:
        return redirect(next_url or "accounts:team")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect(next_url or "accounts:team")
    return render(request, "accounts/signup.html", {"form": form, "next": next_url})


@login_required
def team_page(request: HttpRequest) -> HttpResponse:
    """The user's teams (members, agents; for owners the invitation link) and a create form."""
    teams = list(request.user.teams.prefetch_related("members", "agents").order_by("name"))  # type: ignore[union-attr]
    owned = set(
        TeamOwnership.objects.filter(user_id=int(request.user.pk or 0)).values_list(
            "team_id", flat=True
        )
    )
    rows = []
    for team in teams:
        invitation = getattr(team, "invitation", None) if team.pk in owned else None
        link = None
        if invitation is not None and invitation.is_valid:
            link = request.build_absolute_uri(reverse("accounts:join", args=[invitation.token]))
        rows.append(
            {
                "team": team,
                "is_owner": team.pk in owned,
                "invite_link": link,
                "invitation": invitation,
            }
        )
    preflights: dict[int, str] = {}
    for agent_id, status in (
        AgentPreflight.objects.filter(agent__team__in=teams)
        .order_by("agent_id", "-created_at", "-pk")
        .values_list("agent_id", "status")
    ):
        preflights.setdefault(agent_id, status)  # the newest per agent
    for team in teams:
        for agent in team.agents.all():  # the prefetched objects the template renders
            agent.preflight_status = preflights.get(agent.pk, "")
    return render(request, "accounts/team.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    """GET: the user's e-mail preferences. POST: save them (``accounts.notifications``)."""
    user = request.user
    current = notification_settings_get(user=user)  # type: ignore[arg-type]
    form = NotificationForm(
        request.POST if request.method == "POST" else None,  # an unticked box posts nothing
        initial={"submission_emails": current.submission_emails},
    )
    if request.method == "POST" and form.is_valid():
        notification_settings_set(
            user=user,  # type: ignore[arg-type]
            submission_emails=form.cleaned_data["submission_emails"],
        )
        messages.success(request, "Settings saved.")
        return redirect("accounts:settings")
    return render(request, "accounts/settings.html", {"form": form})


@login_required
@require_POST
def team_create_view(request: HttpRequest) -> HttpResponse:
    """Create a team owned by the user."""
    try:
        team = services.team_create(user=request.user, name=request.POST.get("name", ""))  # type: ignore[arg-type]
    except ServiceError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Team {team.name} created.")
    return redirect("accounts:team")


@login_required
@require_POST
def invitation_renew_view(request: HttpRequest, team_id: int) -> HttpResponse:
    """Issue a new invitation link (owners only; the old link stops working)."""
    team = get_object_or_404(Team, pk=team_id)
    try:
        services.invitation_renew(team=team, by=request.user)  # type: ignore[arg-type]
    except ServiceError as error:
        messages.error(request, str(error))
    return redirect("accounts:team")


@login_required
@require_POST
def member_remove_view(request: HttpRequest, team_id: int, user_id: int) -> HttpResponse:
    """Remove a member (owners only)."""
    team = get_object_or_404(Team, pk=team_id)
    member = get_object_or_404(get_user_model(), pk=user_id)
    flash_service_call(
        request,
        lambda: services.member_remove(team=team, by=request.user, member=member),  # type: ignore[arg-type]
        success=(
            f"{member.get_username()} removed from {team.name}; its invitation link, if it "
            "had one, was replaced."
        ),
    )
    return redirect("accounts:team")


@require_http_methods(["GET", "POST"])
def join_page(request: HttpRequest, token: str) -> HttpResponse:
    """GET: which team the link invites to (log in first). POST: join it."""
    try:
        invitation = services.invitation_get(token)
    except services.InvitationInvalidError as error:
        return render(request, "accounts/join.html", {"error": str(error)}, status=404)
    if request.method == "POST" and request.user.is_authenticated:
        try:
            team = services.team_join(user=request.user, token=token)
        except ServiceError as error:
            messages.error(request, str(error))
        else:
            messages.success(request, f"You joined {team.name}.")
        return redirect("accounts:team")
    return render(request, "accounts/join.html", {"team": invitation.team})


@login_required
@require_http_methods(["GET", "POST"])
def agent_new_page(request: HttpRequest) -> HttpResponse:
    """Register an agent of one of the user's teams and start its pre-flight (every rule:
    ``submissions.services.agents.agent_register``), then open its agent page."""
    form = AgentForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            agent, _ = agent_register(
                team=data["team"],
                actor=request.user,
                name=data["name"],
                endpoint_url=data["endpoint_url"],
                protocol=data["protocol"],
                model_name=data["model_name"],
                api_key=data["api_key"],
                auth_header=data["auth_header"],
                apps=data["apps"],
            )
        except ServiceError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Agent {agent.name} registered; its pre-flight is running.")
            return redirect("agents:detail", agent_id=agent.pk)
    return render(request, "accounts/agent_form.html", {"form": form})


@login_required
@require_http_methods(["GET", "POST"])
def submit_page(request: HttpRequest) -> HttpResponse:
    """Submit an agent for evaluation (``?agent=<id>`` chooses it); on success go to the
    submission's page. The apps offered follow the agent's pre-flight (``SubmitForm``)."""
    raw_agent = request.GET.get("agent", "")
    form = SubmitForm(
        request.POST or None,
        user=request.user,
        agent_id=int(raw_agent) if raw_agent.isdigit() else None,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            submission = submission_create(
                agent=data["agent"],
                apps=data["apps"],
                queries_per_app=data["queries_per_app"],
                prompt_type=data["prompt_type"],
                actor=request.user,
            )
        except ServiceError as error:
            form.add_error(None, str(error))
        else:
            return redirect("leaderboard:submission", submission_id=submission.pk)
    return render(request, "accounts/submit.html", {"form": form, "offered": form.offered})
