"""Account pages: sign up (then logged in) and the signed-in user's teams.

Log in, log out and the password-reset flow are Django's own views (``django.contrib.auth.urls``)
with this project's templates under ``templates/registration/``.
"""

from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from accounts.forms import SignUpForm


@require_http_methods(["GET", "POST"])
def signup_page(request: HttpRequest) -> HttpResponse:
    """GET: the sign-up form. POST: create the user, log them in, go to their team page."""
    if request.user.is_authenticated:
        return redirect("accounts:team")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("accounts:team")
    return render(request, "accounts/signup.html", {"form": form})


@login_required
def team_page(request: HttpRequest) -> HttpResponse:
    """The teams the signed-in user belongs to, with their members and agents."""
    teams = request.user.teams.prefetch_related("members", "agents").order_by("name")  # type: ignore[union-attr]
    return render(request, "accounts/team.html", {"teams": teams})
