"""Accounts: sign up, log in, log out, password reset, the navigation and the team page."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.urls import reverse

from submissions.models import Agent, Team

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db
PASSWORD = "orbit-Lantern-42"


def _signup(
    client: Client, username: str = "ada", email: str = "ada@example.org"
) -> Response:
    return client.post(
        reverse("accounts:signup"),
        {"username": username, "email": email, "password1": PASSWORD, "password2": PASSWORD},
    )


def test_signup_creates_user_logs_in_and_nav_shows_them(client: Client) -> None:
    response = _signup(client)
    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:team")
    assert User.objects.get(username="ada").email == "ada@example.org"
    page = client.get(reverse("leaderboard:index")).content.decode()
    assert re.search(r'data-testid="username">ada<', page)
    for label in ("Leaderboard", "My team", "Log out"):
        assert label in page


def test_signup_refuses_mismatched_passwords_and_taken_email(client: Client) -> None:
    User.objects.create_user("grace", "grace@example.org", PASSWORD)
    taken = _signup(client, "grace2", "GRACE@example.org")
    assert taken.status_code == 200
    assert "already exists" in taken.content.decode()
    mismatch = client.post(
        reverse("accounts:signup"),
        {"username": "lin", "email": "lin@example.org", "password1": PASSWORD, "password2": "x"},
    )
    assert mismatch.status_code == 200
    assert not User.objects.filter(username__in=["grace2", "lin"]).exists()


def test_login_and_logout(client: Client) -> None:
    User.objects.create_user("alan", "alan@example.org", PASSWORD)
    anonymous = client.get(reverse("leaderboard:index")).content.decode()
    assert "Log in" in anonymous and 'data-testid="username"' not in anonymous
    bad = client.post(reverse("login"), {"username": "alan", "password": "wrong"})
    assert bad.status_code == 200 and "_auth_user_id" not in client.session
    good = client.post(reverse("login"), {"username": "alan", "password": PASSWORD})
    assert good.status_code == 302 and good["Location"] == reverse("accounts:team")
    assert client.session["_auth_user_id"] == str(User.objects.get(username="alan").pk)
    out = client.post(reverse("logout"))
    assert out.status_code == 302 and out["Location"] == reverse("leaderboard:index")
    assert "_auth_user_id" not in client.session


def test_password_reset_by_email_link(client: Client) -> None:
    User.objects.create_user("joan", "joan@example.org", PASSWORD)
    response = client.post(reverse("password_reset"), {"email": "joan@example.org"})
    assert response.status_code == 302
    assert len(mail.outbox) == 1
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", str(mail.outbox[0].body))
    assert link is not None
    form_page = client.get(link.group(1), follow=True)
    assert b"Choose a new password" in form_page.content
    new_password = "harbour-Quartz-77"
    done = client.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": new_password, "new_password2": new_password},
    )
    assert done.status_code == 302
    assert User.objects.get(username="joan").check_password(new_password)
    # The link works once.
    assert b"no longer valid" in client.get(link.group(1), follow=True).content


def test_password_reset_for_unknown_address_sends_nothing(client: Client) -> None:
    response = client.post(reverse("password_reset"), {"email": "nobody@example.org"})
    assert response.status_code == 302  # same answer: no account enumeration
    assert mail.outbox == []


def test_team_page_needs_login_and_lists_own_teams_only(client: Client) -> None:
    assert client.get(reverse("accounts:team"))["Location"].startswith(reverse("login"))
    user = User.objects.create_user("ken", "ken@example.org", PASSWORD)
    mine = Team.objects.create(name="packet-pushers")
    mine.members.add(user)
    Agent.objects.create(
        team=mine, name="probe", endpoint_url="http://agent.example.org/", protocol="a2a"
    )
    Team.objects.create(name="someone-else")
    client.force_login(user)
    page = client.get(reverse("accounts:team")).content.decode()
    assert "packet-pushers" in page and "probe" in page
    assert "someone-else" not in page


def test_signup_returns_to_a_same_site_next_only(client: Client) -> None:
    url = reverse("accounts:signup")
    data = {"email": "x@example.org", "password1": PASSWORD, "password2": PASSWORD}
    ok = client.post(url, {**data, "username": "x1", "next": "/accounts/join/abc/"})
    assert ok["Location"] == "/accounts/join/abc/"
    other = Client().post(
        url,
        {**data, "username": "x2", "email": "y@example.org", "next": "https://evil.example/"},
    )
    assert other["Location"] == reverse("accounts:team")
