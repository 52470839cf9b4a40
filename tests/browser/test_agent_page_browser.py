"""Register agents in the browser; their pre-flight runs on a real Celery worker over a real
Redis broker and shows up on the agent page without a reload (Chromium).

A working endpoint (the null reference agent on openai-chat) passes and can be submitted; a
failing one (a local server answering nonsense) shows the failed canary and the submit form
refuses it. The endpoints live on loopback, so the guard's allow-list for team agents is
widened to loopback in this process and in the worker (``tests/accounts/test_preflight.py``
covers the guard refusing them); everything else is the production path.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from django.contrib.auth.models import User

from accounts import services as team_services
from evaluator.agents import LOOPBACK_NETWORKS
from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import build_asgi_app, serve_in_thread
from submissions.models import Agent, AgentPreflight, Submission
from submissions.services import endpoints as endpoint_services
from tests.browser.helpers import log_in
from tests.submissions.celery_worker import running_worker

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
PASSWORD = "orbit-Lantern-42"
#: How long the page may take to show a finished pre-flight (worker start excluded).
PREFLIGHT_WAIT_MS = 60_000
#: Delay of every answer of the working endpoint (five requests: reachability, /v1/models and
#: three canaries), seconds.
ENDPOINT_DELAY_S = 1.0

#: Started as the worker: widens the team agents' allow-list to loopback once Django is set up
#: (``-P solo``: tasks run in this very process), then runs the Celery command line.
WORKER_BOOT = """
import sys
from celery.signals import worker_init

@worker_init.connect
def _loopback_for_team_agents(**_):
    from submissions.services import endpoints
    endpoints.agent_allowed_networks = lambda *, reference: ["127.0.0.0/8", "::1/128"]

from celery.bin.celery import main
sys.argv = ["celery", *sys.argv[1:]]
main()
"""


class _Nonsense(BaseHTTPRequestHandler):
    """Speaks http-json but answers every prompt with text no app's parser accepts."""

    def log_message(self, *args: Any) -> None:
        """Quiet."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"text": "Have you tried turning it off and on again?"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._answer()


def _slowed(asgi_app: Any, delay_s: float) -> Any:
    """``asgi_app`` answering every HTTP request ``delay_s`` later (so that the page is
    certainly loaded while the pre-flight still runs)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(delay_s)
        await asgi_app(scope, receive, send)

    return app


@pytest.fixture
def endpoints() -> Iterator[dict[str, str]]:
    null_agent = build_asgi_app(make_served_agent("null", "all"), "openai-chat")
    good = serve_in_thread(_slowed(null_agent, ENDPOINT_DELAY_S))
    bad = ThreadingHTTPServer(("127.0.0.1", 0), _Nonsense)
    bad.daemon_threads = True
    threading.Thread(target=bad.serve_forever, daemon=True).start()
    yield {"good": good.url, "bad": f"http://127.0.0.1:{bad.server_address[1]}/"}
    good.stop()
    bad.shutdown()
    bad.server_close()


@pytest.fixture
def worker(
    tmp_path: Path, endpoints: dict[str, str], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A Celery worker on the control queue, sharing the test database and the broker."""
    ports = sorted(
        {
            *settings.NETARENA["AGENT_PORTS"],
            *(int(u.rsplit(":", 1)[1].strip("/")) for u in endpoints.values()),
        }
    )
    settings.NETARENA = {**settings.NETARENA, "AGENT_PORTS": frozenset(ports)}
    monkeypatch.setattr(
        endpoint_services, "agent_allowed_networks", lambda *, reference: list(LOOPBACK_NETWORKS)
    )
    queue = f"control-a10-{os.getpid()}"
    monkeypatch.setattr("submissions.services.preflight.CONTROL_QUEUE", queue)
    with running_worker(
        f"a10-preflight-{os.getpid()}",
        queues=queue,
        log_path=tmp_path / "worker.log",
        env={"NETARENA_AGENT_PORTS": ",".join(str(p) for p in ports)},
        pool="solo",
        boot=WORKER_BOOT,
    ):
        yield


def _register(page: Page, *, name: str, url: str, protocol: str) -> None:
    page.goto("/accounts/team/")
    page.get_by_role("link", name="Register an agent").click()
    page.get_by_label("Team").select_option(label="mia-team")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Endpoint URL").fill(url)
    page.get_by_label("Protocol").select_option(protocol)
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/agents/*/")


def test_preflight_shows_live_then_gates_the_submission(
    page: Page, worker: None, endpoints: dict[str, str]
) -> None:
    from playwright.sync_api import expect

    user = User.objects.create_user("mia", "mia@example.org", PASSWORD)
    team_services.team_create(user=user, name="mia-team")
    log_in(page, "mia", PASSWORD)

    # a working endpoint: the result arrives by polling, on the same page load
    _register(page, name="steady", url=endpoints["good"], protocol="openai-chat")
    rendered = json.loads(page.locator("#preflight-data").text_content() or "{}")
    assert rendered["status"] == "running"  # the server rendered it while it ran
    page.evaluate("window.__sameLoad = true")
    status = page.get_by_test_id("preflight-status")
    expect(status).to_have_text("passed", timeout=PREFLIGHT_WAIT_MS)
    assert page.evaluate("window.__sameLoad === true")  # no reload happened
    checks = page.locator("#preflight-checks tbody tr")
    expect(checks.filter(has_text="Canary prompt (malt)")).to_contain_text("passed")
    expect(checks.filter(has_text="Protocol")).to_contain_text("/v1/models lists")
    steady = Agent.objects.get(name="steady")
    assert AgentPreflight.objects.get(agent=steady).status == "passed"

    with mock.patch("submissions.services.dispatch.task_send"):
        page.get_by_role("navigation").get_by_role("link", name="Submit").click()
        page.get_by_label("Agent").select_option(label="mia-team/steady")
        page.get_by_label("Queries per app").fill("2")
        page.get_by_role("button", name="Submit").click()
        page.wait_for_url("**/submissions/*/")
    assert Submission.objects.filter(agent=steady).count() == 1

    # a failing endpoint: the failed canary is shown, and the submit form refuses the agent
    _register(page, name="flaky", url=endpoints["bad"], protocol="http-json")
    expect(page.get_by_test_id("preflight-status")).to_have_text(
        "failed", timeout=PREFLIGHT_WAIT_MS
    )
    canary = page.locator("#preflight-checks tbody tr").filter(has_text="Canary prompt (malt)")
    expect(canary).to_contain_text("failed")
    expect(canary).to_contain_text("reply parser refused the answer")
    flaky = Agent.objects.get(name="flaky")
    with mock.patch("submissions.services.dispatch.task_send") as send:
        page.get_by_role("navigation").get_by_role("link", name="Submit").click()
        page.get_by_label("Agent").select_option(label="mia-team/flaky")
        page.get_by_label("Queries per app").fill("2")
        page.get_by_role("button", name="Submit").click()
        expect(page.get_by_text("pre-flight check failed")).to_be_visible()
    assert not send.called
    assert not Submission.objects.filter(agent=flaky).exists()
