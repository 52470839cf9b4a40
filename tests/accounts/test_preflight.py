"""Agent pre-flight against real HTTP endpoints.

Good endpoints are the project's reference agents served over HTTP on each protocol; bad ones
are tiny local servers written here (slow, huge, garbage, redirecting, answering nonsense)
plus a private address. The pre-flight runs through its Celery task function in this process
(the broker path is covered by tests/browser/test_agent_page_browser.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from accounts import services as team_services
from evaluator.agents import LOOPBACK_NETWORKS
from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from evaluator.registry import app_ids
from submissions.errors import QuotaExceededError
from submissions.models import Agent, AgentPreflight, Submission, Team
from submissions.preflight_tasks import agent_preflight
from submissions.services import agents as agent_services
from submissions.services import endpoints as endpoint_services
from submissions.services import preflight
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

#: Canary order of a pre-flight over every app.
CHECK_NAMES = ["guard", "reachable", "protocol", *(f"canary:{a}" for a in app_ids()), "latency"]


@pytest.fixture
def vault(tmp_path: Path, settings: Any) -> Path:
    settings.NETARENA = {**settings.NETARENA, "ORACLE_VAULT_DIR": str(tmp_path / "vault")}
    return tmp_path / "vault"


@pytest.fixture
def reference_server(vault: Path) -> Iterator[Callable[[str, str], RunningServer]]:
    started: list[RunningServer] = []

    def start(kind: str, protocol: str) -> RunningServer:
        agent = make_served_agent(kind, "all", vault_dir=vault)
        server = serve_in_thread(build_asgi_app(agent, protocol))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def team_on_loopback(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Callable[[int], None]:
    """Let team agents use loopback on one port, as they would a public address in production
    (the guard and port rule stay on; only their allow-lists are widened)."""

    def allow(port: int) -> None:
        ports = frozenset({*settings.NETARENA["AGENT_PORTS"], port})
        settings.NETARENA = {**settings.NETARENA, "AGENT_PORTS": ports}
        monkeypatch.setattr(
            endpoint_services,
            "agent_allowed_networks",
            lambda *, reference: list(LOOPBACK_NETWORKS),
        )

    return allow


def _team() -> Team:
    user = User.objects.create_user("mia", "mia@example.org", "pw-mia-12345")
    return team_services.team_create(user=user, name="mia-team")


def _run(agent: Agent) -> AgentPreflight:
    """Start a pre-flight (its queueing left uncommitted) and run the task body on it."""
    run = preflight.preflight_start(agent=agent)
    agent_preflight(run.pk)
    run.refresh_from_db()
    return run


def _checks(run: AgentPreflight) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in run.checks}


def _reference_agent(
    url: str, *, name: str = "n", protocol: str = "http-json", kind: str = "null", **extra: Any
) -> Agent:
    """A reference agent (its own team "ref") of ``kind`` served at ``url``."""
    return Agent.objects.create(
        team=Team.objects.create(name="ref"),
        name=name,
        endpoint_url=url,
        protocol=protocol,
        reference_kind=kind,
        **extra,
    )


@pytest.mark.parametrize(
    ("kind", "protocol"),
    [("null", "http-json"), ("null", "openai-chat"), ("null", "a2a"), ("oracle", "http-json")],
)
def test_reference_agents_pass_every_check(reference_server, kind: str, protocol: str) -> None:
    server = reference_server(kind, protocol)
    agent = _reference_agent(server.url, name=f"{kind}-{protocol}", protocol=protocol, kind=kind)
    run = _run(agent)
    assert [c["name"] for c in run.checks] == CHECK_NAMES
    assert run.status == "passed", run.checks
    assert all(c["status"] == "passed" for c in run.checks)
    checks = _checks(run)
    assert "accepted" in checks["canary:malt"]["message"]
    if protocol == "openai-chat":
        assert "/v1/models lists 1 model(s)" in checks["protocol"]["message"]
    if protocol == "a2a":
        assert "agent card" in checks["protocol"]["message"]
    assert run.latency_s is not None and 0 < run.latency_s < 30
    assert run.finished_at is not None and run.started_at is not None


def test_only_the_agents_apps_get_a_canary(reference_server) -> None:
    server = reference_server("null", "http-json")
    agent = _reference_agent(server.url, apps=[app_ids()[-1]])
    run = _run(agent)
    canaries = [c["name"] for c in run.checks if c["name"].startswith("canary:")]
    assert canaries == [f"canary:{app_ids()[-1]}"] and run.status == "passed"


# -- hostile endpoints ---------------------------------------------------------------------


class _Hostile(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *args: Any) -> None:
        """Quiet."""

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        # read the request first: closing with unread input would reset the connection
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if mode == "slow":
            time.sleep(4)
            self._send(200, b"{}")
        elif mode == "redirect":
            self._send(302, b"", {"Location": "http://169.254.169.254/latest/meta-data/"})
        elif mode == "garbage":
            self._send(200, bytes(range(256)) * 8)
        elif mode == "huge":
            if self.command == "GET":
                self._send(200, b"ok")
                return
            self.send_response(200)
            self.end_headers()  # no length: streamed until the client gives up
            chunk = b"A" * 65536
            try:
                for _ in range(64):  # 4 MiB
                    self.wfile.write(chunk)
            except OSError:
                pass
        elif mode == "keyed":  # a gateway that wants its key in X-API-Key
            if self.headers.get("X-API-Key") != "k-123" or self.headers.get("Authorization"):
                self._send(401, b'{"error": "missing key"}')
            else:
                self._send(200, json.dumps({"text": "done"}).encode())
        elif mode == "nonsense":
            self._send(200, json.dumps({"text": "I am a teapot."}).encode())

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._answer()


@pytest.fixture
def hostile() -> Iterator[Callable[[str], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(mode: str) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
        server.daemon_threads = True
        server.mode = mode  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _team_agent(team: Team, url: str, protocol: str = "http-json", **extra: Any) -> Agent:
    return Agent.objects.create(team=team, name="bot", endpoint_url=url, protocol=protocol, **extra)


@pytest.mark.parametrize(
    ("mode", "failed_check", "says"),
    [
        ("slow", "reachable", "no answer within 1 s"),
        ("redirect", "reachable", "redirecting to 'http://169.254.169.254"),
        ("garbage", "protocol", "no JSON object"),
        ("huge", "protocol", "larger than"),
        ("nonsense", f"canary:{app_ids()[0]}", "reply parser refused the answer"),
    ],
)
def test_hostile_endpoints_fail_a_check_and_never_crash(
    hostile, team_on_loopback, settings, mode: str, failed_check: str, says: str
) -> None:
    limit_s = 1.0 if mode == "slow" else 10.0  # the slow server answers after 4 s
    settings.NETARENA = {
        **settings.NETARENA,
        "PREFLIGHT_PROBE_TIMEOUT_S": limit_s,
        "AGENT_TIMEOUT_S": limit_s,
    }
    url = hostile(mode)
    team_on_loopback(int(url.rsplit(":", 1)[1].strip("/")))
    agent = _team_agent(_team(), url)
    started = time.monotonic()
    run = _run(agent)
    assert time.monotonic() - started < 30
    assert run.status == "failed"
    checks = _checks(run)
    assert checks["guard"]["status"] == "passed"
    assert checks[failed_check]["status"] == "failed", run.checks
    assert says in checks[failed_check]["message"], checks[failed_check]["message"]
    order = [c["name"] for c in run.checks]
    assert order == CHECK_NAMES
    if not failed_check.startswith("canary:"):
        after = order[order.index(failed_check) + 1 :]
        assert all(checks[name]["status"] == "skipped" for name in after)


@pytest.mark.parametrize(
    "url", ["http://10.1.2.3/", "http://169.254.169.254/latest", "http://127.0.0.1:8080/"]
)
def test_private_addresses_fail_the_guard_and_nothing_is_sent(hostile, url: str) -> None:
    run = _run(_team_agent(_team(), url))
    checks = _checks(run)
    assert run.status == "failed"
    assert checks["guard"]["status"] == "failed"
    assert "endpoint refused" in checks["guard"]["message"]
    assert "169.254" not in checks["guard"]["message"]  # the guard's detail is not shown
    assert all(checks[n]["status"] == "skipped" for n in CHECK_NAMES[1:])


def test_openai_server_without_a_model_list_fails_protocol(hostile, team_on_loopback) -> None:
    url = hostile("nonsense")  # answers GET /v1/models with {"text": ...}, not a model list
    team_on_loopback(int(url.rsplit(":", 1)[1].strip("/")))
    run = _run(_team_agent(_team(), url, protocol="openai-chat"))
    check = _checks(run)["protocol"]
    assert check["status"] == "failed" and "without an OpenAI model list" in check["message"]


def test_an_internal_error_closes_the_preflight_as_failed(reference_server, monkeypatch) -> None:
    server = reference_server("null", "http-json")
    agent = _reference_agent(server.url)

    def explode(agent: Agent, app_id: str) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(preflight, "_check_canary", explode)
    run = _run(agent)
    assert run.status == "failed"
    assert run.checks[-1]["name"] == "internal" and "RuntimeError" in run.checks[-1]["message"]


def test_soft_time_limit_closes_the_running_preflight() -> None:
    agent = _team_agent(_team(), "https://93.184.215.14/")
    run = preflight.preflight_start(agent=agent)
    preflight.preflight_time_out(preflight_id=run.pk, limit_s=600)
    run.refresh_from_db()
    assert run.status == "failed" and "longer than 600 s" in run.checks[-1]["message"]


def test_a_stale_running_preflight_counts_as_failed(settings) -> None:
    agent = _team_agent(_team(), "https://93.184.215.14/")
    run = preflight.preflight_start(agent=agent)
    AgentPreflight.objects.filter(pk=run.pk).update(
        created_at=timezone.now() - timedelta(seconds=preflight.stale_after_s() + 1)
    )
    with pytest.raises(preflight.PreflightNotPassedError, match="failed"):
        submission_services.submission_create(agent=agent, apps=["malt"], queries_per_app=1)
    assert not Submission.objects.exists()
    # read outside the refused submission's transaction, the stale run is closed for good
    latest = preflight.preflight_latest(agent=agent)
    assert latest is not None and latest.status == "failed"
    run.refresh_from_db()
    assert run.status == "failed" and "did not finish" in run.checks[-1]["message"]


def test_a_running_preflight_blocks_until_it_finishes() -> None:
    agent = _team_agent(_team(), "https://93.184.215.14/")
    preflight.preflight_start(agent=agent)
    with pytest.raises(preflight.PreflightNotPassedError, match="still running"):
        submission_services.submission_create(agent=agent, apps=["malt"], queries_per_app=1)
    assert not Submission.objects.exists()


# -- the gate ------------------------------------------------------------------------------


def test_failed_preflight_blocks_submission_and_costs_no_quota(
    hostile, reference_server, team_on_loopback, settings, django_capture_on_commit_callbacks
) -> None:
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_TEAM_PER_DAY": 1}
    bad_url = hostile("nonsense")
    good = reference_server("null", "http-json")
    team_on_loopback(int(bad_url.rsplit(":", 1)[1].strip("/")))
    team_on_loopback(good.port)
    team = _team()
    user = team.members.get()
    agent = _team_agent(team, bad_url)
    assert _run(agent).status == "failed"
    for _ in range(3):  # refused every time, and never counted
        with pytest.raises(preflight.PreflightNotPassedError) as info:
            submission_services.submission_create(
                agent=agent, apps=["malt"], queries_per_app=1, actor=user
            )
        assert info.value.code == "preflight" and "no quota was used" in str(info.value)
    assert not Submission.objects.exists()

    # fixed endpoint: the new pre-flight passes and the one submission of the day is free
    with django_capture_on_commit_callbacks(execute=False):
        edited = agent_services.agent_update(
            agent=agent, actor=user, endpoint_url=good.url, model_name="m-2"
        )
    agent_preflight(edited.pk)
    edited.refresh_from_db()
    assert edited.status == "passed", edited.checks
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=1, actor=user
        )
    Submission.objects.update(status="finished")
    with pytest.raises(QuotaExceededError):
        submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=1, actor=user
        )


def test_reference_agents_and_agents_without_a_preflight_are_not_blocked(
    django_capture_on_commit_callbacks,
) -> None:
    team = _team()
    legacy = _team_agent(team, "https://93.184.215.14/")
    reference = Agent.objects.create(
        team=team,
        name="ref",
        endpoint_url="http://127.0.0.1:9/",
        protocol="http-json",
        reference_kind="null",
    )
    AgentPreflight.objects.create(
        agent=reference,
        endpoint_url=reference.endpoint_url,
        protocol="http-json",
        status="failed",
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_create(agent=legacy, apps=["malt"], queries_per_app=1)
        submission_services.submission_create(agent=reference, apps=["malt"], queries_per_app=1)
    assert Submission.objects.count() == 2


def test_api_registration_starts_a_preflight_on_commit(django_capture_on_commit_callbacks):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    team = _team()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=team.members.get())}")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            "/api/v1/agents/",
            {
                "team": team.name,
                "name": "bot",
                "endpoint_url": "https://93.184.215.14/v1",
                "protocol": "openai-chat",
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    run = AgentPreflight.objects.get(agent_id=response.json()["id"])
    assert run.status == "running" and len(callbacks) == 1


def test_a_broker_that_is_down_fails_the_preflight_instead_of_the_request(monkeypatch) -> None:
    from config.celery import app as celery_app

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(celery_app, "send_task", refuse)
    agent = _team_agent(_team(), "https://93.184.215.14/")
    run = preflight.preflight_start(agent=agent)
    preflight._send(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and "could not be queued" in run.checks[0]["message"]


def test_the_key_travels_under_the_registered_header(hostile, team_on_loopback) -> None:
    from submissions.crypto import encrypt_secret

    url = hostile("keyed")
    team_on_loopback(int(url.rsplit(":", 1)[1].strip("/")))
    agent = _team_agent(
        _team(),
        url,
        apps=["k8s"],
        secret_encrypted=encrypt_secret("k-123"),
        auth_header="X-API-Key",
    )
    run = _run(agent)
    assert run.status == "passed", run.checks
    # the same endpoint with the key as Authorization: Bearer is refused by the gateway
    Agent.objects.filter(pk=agent.pk).update(auth_header="")
    agent.refresh_from_db()
    run = _run(agent)
    assert run.status == "failed"
    assert "HTTP 401" in _checks(run)["canary:k8s"]["message"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("", True),
        ("X-API-Key", True),
        ("api-key", True),
        ("Authorization", True),
        ("Host", False),
        ("X-NetArena-Episode", False),
        ("X API Key", False),
        ("a:b", False),
    ],
)
def test_auth_header_names(name: str, ok: bool) -> None:
    from submissions.agent_auth import auth_header_problem

    assert (auth_header_problem(name) is None) is ok


def test_api_submission_of_a_failed_agent_is_409_preflight() -> None:
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    team = _team()
    agent = _team_agent(team, "https://93.184.215.14/")
    AgentPreflight.objects.create(
        agent=agent, endpoint_url=agent.endpoint_url, protocol=agent.protocol, status="failed"
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=team.members.get())}")
    response = client.post(
        "/api/v1/submissions/", {"agent": agent.pk, "apps": ["malt"]}, format="json"
    )
    assert response.status_code == 409 and response.json()["code"] == "preflight"
    assert not Submission.objects.exists()


@pytest.mark.parametrize("app_id", app_ids())
def test_each_apps_parser_accepts_reference_replies_and_refuses_prose(app_id: str) -> None:
    """The canary's verdict is the app's own parser (App.reply_problem), no table per app."""
    from evaluator.registry import get_app

    app = get_app(app_id)
    for query in app.generate(4, preflight.PREFLIGHT_SEED):
        history = [{"role": "user", "content": query.prompt}]
        assert app.reply_problem(app.oracle_reply(query.ground_truth, history)) is None
        assert app.reply_problem(app.null_reply(history)) is None
    for prose in ("", "   ", "Sure! I would be happy to help with your network."):
        problem = app.reply_problem(prose)
        assert isinstance(problem, str) and problem
