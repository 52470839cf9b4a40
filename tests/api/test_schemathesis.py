"""Schemathesis against the site's own OpenAPI schema: every operation, with generated
(valid and invalid) inputs, sent through the real WSGI application with a member's token;
no answer may be a server error (5xx). Runs in CI with the rest of tests/api (~30 s)."""

from __future__ import annotations

from typing import Any, cast

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token

from submissions.models import Agent, Team
from submissions.services import agents as agent_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

#: Generated cases per operation: enough to hit every parameter's edge cases (ids that do not
#: exist, empty and oversized bodies, wrong types) within the suite's time budget.
MAX_EXAMPLES = 25


@pytest.fixture
def member_token(db, django_user_model, django_capture_on_commit_callbacks, settings):
    """A team member's token, with an agent, an open submission and a round to find."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": "100000/min", "user": "100000/min"},
    }
    user = django_user_model.objects.create_user("fuzz", password="pw-fuzz-12345")
    team = Team.objects.create(name="fuzzers")
    team.members.add(user)
    agent = Agent.objects.create(
        team=team, name="bot", endpoint_url="https://93.184.215.14/v1", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_create(agent=agent, apps=["malt"], queries_per_app=1)
        round_services.round_create(apps=["malt"], queries_per_app=1)
    return Token.objects.create(user=user).key


def test_no_operation_answers_a_server_error(member_token, monkeypatch):
    # agent registration resolves the endpoint's host: never ask DNS about generated names
    monkeypatch.setattr(
        agent_services, "agent_endpoint_check", lambda *, endpoint_url, reference=False: None
    )
    # As Django's test client does: the WSGI handler must not close the test's connection
    # (and with it the test transaction) at the end of each request.
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        _exercise_every_operation(member_token)
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


def _exercise_every_operation(member_token: str) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
    headers = {"Authorization": f"Token {member_token}"}
    # an invalid operation (Err) has no .ok() and fails the test here, as it should
    operations = [cast(Any, result).ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    server_errors: list[str] = []
    calls: dict[str, int] = {}

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def exercise(case: Any) -> None:
            response = case.call(headers=headers)
            calls[case.operation.label] = calls.get(case.operation.label, 0) + 1
            if response.status_code >= 500:
                server_errors.append(
                    f"{case.method} {case.formatted_path} -> {response.status_code}: "
                    f"{response.text[:300]}"
                )

        exercise()
    assert server_errors == []
    assert set(calls) == {op.label for op in operations}  # every operation was called
