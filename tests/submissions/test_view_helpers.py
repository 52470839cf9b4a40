"""``submissions.view_helpers.flash_service_call``: a refusal becomes an error message, a
success its note, and anything else is raised (never shown as a message)."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.signed_cookies import SessionStore
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.test import RequestFactory

from accounts.services import TeamError
from submissions.errors import NotTeamMemberError
from submissions.view_helpers import flash_service_call


def _request() -> HttpRequest:
    request = RequestFactory().post("/")
    request.session = SessionStore()
    request._messages = FallbackStorage(request)  # type: ignore[attr-defined]
    return request


def _flashed(request: HttpRequest) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(request)]


def _refuse(error: Exception) -> None:
    raise error


def test_success_and_refusal_are_flashed() -> None:
    calls: list[int] = []
    request = _request()
    assert flash_service_call(request, lambda: calls.append(1), success="Done.") is True
    assert calls == [1]
    refused = NotTeamMemberError("you are not a member of this team")
    assert flash_service_call(request, lambda: _refuse(refused), success="Done.") is False
    assert _flashed(request) == [
        ("success", "Done."),
        ("error", "you are not a member of this team"),
    ]


def test_only_the_named_errors_are_refusals() -> None:
    request = _request()
    denied = PermissionDenied("only staff")
    assert not flash_service_call(
        request, lambda: _refuse(denied), success="Done.", errors=(PermissionDenied,)
    )
    with pytest.raises(PermissionDenied):  # not a ServiceError: a fault for the default errors
        flash_service_call(request, lambda: _refuse(denied), success="Done.")
    with pytest.raises(RuntimeError):
        flash_service_call(request, lambda: _refuse(RuntimeError("boom")), success="Done.")
    assert _flashed(request) == [("error", "only staff")]


def test_team_errors_are_refusals_by_default() -> None:
    request = _request()
    team_error = TeamError("only owners may remove members")  # a ServiceError, like every rule
    assert not flash_service_call(request, lambda: _refuse(team_error), success="Removed.")
    assert _flashed(request) == [("error", "only owners may remove members")]
