"""Password guessing and reset e-mail are limited (accounts.login_limits): the log-in
page, the admin's and the API's token endpoint refuse a client after repeated failures; reset
e-mails are capped per address and per client."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client, RequestFactory

from accounts import login_limits

pytestmark = pytest.mark.django_db

PASSWORD = "orbit-Lantern-42"


@pytest.fixture(autouse=True)
def limits(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    settings.NETARENA = {
        **settings.NETARENA,
        "LOGIN_FAILURES_MAX": 3,
        "LOGIN_FAILURES_PER_CLIENT_MAX": 5,
        "PASSWORD_RESETS_PER_EMAIL": 2,
        "PASSWORD_RESETS_PER_CLIENT": 3,
    }


@pytest.fixture
def ada() -> User:
    return User.objects.create_user("ada", "ada@example.org", PASSWORD, is_staff=True)


def _log_in(client: Client, username: str, password: str, address: str = "127.0.0.1") -> str:
    response = client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )
    return response.content.decode() if response.status_code == 200 else "logged in"


def test_the_nth_failure_blocks_the_account_from_that_address(ada) -> None:
    client = Client()
    for _ in range(2):
        assert "correct username and password" in _log_in(client, "ada", "wrong")
    assert _log_in(client, "ada", PASSWORD) == "logged in"  # a success clears the count
    client.logout()
    for _ in range(3):
        assert "correct username and password" in _log_in(client, "ADA", "wrong")
    refused = _log_in(client, "ada", PASSWORD)  # the right password, too late
    assert "Too many failed log-ins" in refused and "15 minutes" in refused
    assert "_auth_user_id" not in client.session
    # the API's token endpoint and the admin's log-in obey the same count
    token = client.post("/api/v1/token/", {"username": "ada", "password": PASSWORD})
    assert token.status_code == 400 and "token" not in token.json()
    admin = client.post("/admin/login/", {"username": "ada", "password": PASSWORD})
    assert "Too many failed log-ins" in admin.content.decode()
    # nobody can lock ada out from another address
    assert _log_in(Client(), "ada", PASSWORD, address="192.0.2.7") == "logged in"


def test_one_address_guessing_many_accounts_is_blocked(ada) -> None:
    client = Client()
    for name in ("bob", "cy", "dee", "eve", "fay"):
        _log_in(client, name, "guess")
    assert "Too many failed log-ins" in _log_in(client, "ada", PASSWORD)
    token = Client().post(
        "/api/v1/token/", {"username": "ada", "password": PASSWORD}, REMOTE_ADDR="192.0.2.8"
    )
    assert token.status_code == 200 and token.json()["token"]


def test_api_token_failures_count_too(ada) -> None:
    client = Client()
    for _ in range(3):
        response = client.post("/api/v1/token/", {"username": "ada", "password": "x"})
        assert response.status_code == 400
    assert "Too many failed log-ins" in _log_in(client, "ada", PASSWORD)


def test_password_reset_mails_are_capped_per_address_and_per_client(ada) -> None:
    User.objects.create_user("bo", "bo@example.org", PASSWORD)
    client = Client()
    for _ in range(4):
        response = client.post("/accounts/password_reset/", {"email": "ada@example.org"})
        assert response.status_code == 302  # the same answer whether or not a mail went
    assert [m.to for m in mail.outbox] == [["ada@example.org"]] * 2
    # the client has now asked 4 times (cap 3): nothing more from it, any address
    client.post("/accounts/password_reset/", {"email": "bo@example.org"})
    assert len(mail.outbox) == 2
    other = Client(REMOTE_ADDR="192.0.2.9")
    other.post("/accounts/password_reset/", {"email": "bo@example.org"})
    assert mail.outbox[-1].to == ["bo@example.org"]


def test_the_client_address_behind_trusted_proxies(settings) -> None:
    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.5"
    )
    assert login_limits.client_address(request) == "10.0.0.2"  # no proxy trusted: spoofable
    settings.NETARENA = {**settings.NETARENA, "CLIENT_PROXY_HOPS": 1}
    assert login_limits.client_address(request) == "203.0.113.5"
