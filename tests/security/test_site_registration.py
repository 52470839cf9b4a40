"""Agent registration and stale submissions: generic refusals, private
networks only for reference agents, the port set, the agent cap, expiry without a worker."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evaluator.testing import GuessApp, registered_app
from submissions.errors import AgentLimitError, EndpointRefusedError
from submissions.models import Submission, Team
from submissions.services import agents as agent_services
from submissions.services import endpoints as endpoint_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return Team.objects.create(name="registrars")


def _create(team: Team, url: str, name: str = "a", **kwargs: Any):
    return agent_services.agent_create(
        team=team, name=name, endpoint_url=url, protocol="http-json", **kwargs
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/act",  # loopback
        "http://10.1.2.3/act",  # private
        "http://169.254.169.254/latest/meta-data",  # link-local metadata service
        "http://localhost/act",
        "http://no-such-host.invalid/act",  # does not resolve
        "https://93.184.215.14:22/act",  # public, but not an agent port
        "ftp://93.184.215.14/act",
    ],
)
def test_refusals_are_generic_and_the_detail_goes_to_the_log(team, url, caplog):
    with caplog.at_level(logging.WARNING), pytest.raises(EndpointRefusedError) as refused:
        _create(team, url)
    assert str(refused.value) == endpoint_services.ENDPOINT_REFUSED_MESSAGE
    for leak in ("127.0.0.1", "10.1.2.3", "169.254", "resolve", "allow-list", "network"):
        assert leak not in str(refused.value)
    assert "refused" in caplog.text  # the reason is logged for the operators


def test_configured_private_networks_apply_to_reference_agents_only(team, settings):
    settings.NETARENA = {**settings.NETARENA, "AGENT_ALLOWED_NETWORKS": ["10.0.0.0/8"]}
    with pytest.raises(EndpointRefusedError):
        _create(team, "http://10.1.2.3:8000/act")
    reference = _create(team, "http://10.1.2.3:8000/act", name="ref", reference_kind="oracle")
    assert reference.is_reference
    # reference agents may also use loopback and any port (they are served by the project)
    _create(team, "http://127.0.0.1:39123/act", name="ref2", reference_kind="null")


def test_team_agent_networks_open_a_private_network_to_team_agents_only_when_set(team, settings):
    with pytest.raises(EndpointRefusedError):
        _create(team, "http://127.0.0.1:8080/act", name="local")
    settings.NETARENA = {**settings.NETARENA, "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"]}
    assert _create(team, "http://127.0.0.1:8080/act", name="local").endpoint_url.endswith("/act")
    with pytest.raises(EndpointRefusedError):  # the port rule still holds
        _create(team, "http://127.0.0.1:39124/act", name="local-odd-port")
    with pytest.raises(EndpointRefusedError):  # and only the listed networks open
        _create(team, "http://10.1.2.3:8080/act", name="private")


def test_the_agent_port_set_is_a_setting(team, settings):
    _create(team, "https://93.184.215.14:8443/act", name="ok")
    settings.NETARENA = {**settings.NETARENA, "AGENT_PORTS": frozenset({9443})}
    with pytest.raises(EndpointRefusedError):
        _create(team, "https://93.184.215.14:8443/act", name="now-refused")
    _create(team, "https://93.184.215.14:9443/act", name="allowed-now")


def test_a_team_has_at_most_agents_per_team_agents(team, settings):
    settings.NETARENA = {**settings.NETARENA, "AGENTS_PER_TEAM": 2}
    _create(team, "https://93.184.215.14/a", name="one")
    _create(team, "https://93.184.215.14/b", name="two")
    with pytest.raises(AgentLimitError):
        _create(team, "https://93.184.215.14/c", name="three")
    _create(team, "http://127.0.0.1:39124/act", name="ref", reference_kind="oracle")  # exempt


def test_a_submission_no_worker_took_expires_as_the_platforms_failure(
    team, django_capture_on_commit_callbacks
):
    with registered_app({"guess": GuessApp}):
        agent = _create(team, "https://93.184.215.14/a", apps=["guess"])
        with django_capture_on_commit_callbacks(execute=False):  # the task is never run
            submission = submission_services.submission_create(
                agent=agent, apps=["guess"], queries_per_app=2
            )
        assert submission_services.submissions_expire(max_wait_s=60) == 0  # still young
        Submission.objects.filter(pk=submission.pk).update(
            created_at=timezone.now() - timedelta(seconds=120)
        )
        assert submission_services.submissions_expire(max_wait_s=60) == 1
        submission.refresh_from_db()
        assert submission.status == Submission.Status.FAILED and submission.platform_failed
        assert "no worker" in submission.error
        # the agent is not locked out: a new submission opens
        with django_capture_on_commit_callbacks(execute=False):
            submission_services.submission_create(agent=agent, apps=["guess"], queries_per_app=2)
