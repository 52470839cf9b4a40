"""The README's "Trying it by hand" walkthrough, step by step, in Chromium.

A visitor signs up, creates a team, serves the route-only ``heuristic`` agent with the README's
own command, registers it as the README says, waits for its pre-flight on the agent page,
submits it from there, and reads the result on the submission page without reloading it.
Everything is real: a Celery worker (real Redis) runs the pre-flight and the route episodes on
Mininet, the agent answers over HTTP. Two departures, both forced by sharing the machine with
other test runs: the agent listens on a free port instead of 8080 (the port is added to the
allowed agent ports, as 8080 is by default), and the control queue has a name of its own.
Team agents may use loopback here, as ``make demo`` allows them (``NETARENA_TEAM_AGENT_NETWORKS``).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from evaluator.registry import app_ids
from submissions.models import Agent, AgentPreflight, Submission, Team
from tests.apps.route.helpers import require_emulator
from tests.submissions.celery_worker import ROOT, running_worker

if TYPE_CHECKING:
    from playwright.sync_api import Page

# root and netns: its worker runs real route episodes (Mininet) beside the route tests' own
pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.netns,
              pytest.mark.django_db(transaction=True)]

PASSWORD = "orbit-Lantern-42"
README = ROOT / "README.md"
#: How long the pre-flight and the two route episodes may take, in milliseconds.
PREFLIGHT_WAIT_MS = 90_000
RESULT_WAIT_MS = 300_000


def _walkthrough() -> str:
    """The README's walkthrough paragraph(s), from "Trying it by hand" to the next heading."""
    text = README.read_text()
    start = text.index("**Trying it by hand**")
    return text[start : text.index("\n## ", start)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the README's agent command exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the README's agent did not listen on port {port} within {timeout_s:g} s")


@pytest.fixture
def readme_agent(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """The agent served by the README's command (its port replaced by a free one); yields the
    port and the endpoint URL the README says to register (same replacement)."""
    steps = _walkthrough()
    command = re.search(r"`(\.venv/bin/python manage\.py serve_agent [^`]+)`", steps)
    url = re.search(r"`(http://127\.0\.0\.1:8080/)`", steps)
    assert command and url, "the README's walkthrough lost its serve command or its URL"
    argv = shlex.split(command.group(1))
    assert argv[-2:] == ["--port", "8080"], argv
    port = _free_port()
    argv = [sys.executable, *argv[1:-1], str(port)]  # the running interpreter is .venv's
    with (tmp_path / "agent.log").open("wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, process, 60.0)
        yield port, url.group(1).replace(":8080/", f":{port}/")
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def worker(
    tmp_path: Path,
    readme_agent: tuple[int, str],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    live_server: Any,
) -> Iterator[Path]:
    """A worker on a private control queue and the route queue; yields its log path (the
    demo's mail goes to the worker's console, i.e. this log)."""
    require_emulator()
    port, _ = readme_agent
    ports = sorted({*settings.NETARENA["AGENT_PORTS"], port})
    settings.NETARENA = {
        **settings.NETARENA,
        "AGENT_PORTS": frozenset(ports),
        "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"],
    }
    control = f"control-readme-{os.getpid()}"
    monkeypatch.setattr("submissions.services.preflight.CONTROL_QUEUE", control)
    monkeypatch.setattr("submissions.services.submissions.CONTROL_QUEUE", control)
    log_path = tmp_path / "worker.log"
    with running_worker(
        f"readme-{os.getpid()}",
        queues=f"{control},route",
        log_path=log_path,
        env={
            "NETARENA_AGENT_PORTS": ",".join(str(p) for p in ports),
            "NETARENA_TEAM_AGENT_NETWORKS": "127.0.0.0/8",
            "NETARENA_SITE_URL": live_server.url,
            "EMAIL_URL": "consolemail://",
        },
        pool="solo",
    ):
        yield log_path


def test_the_readme_walkthrough_works_as_written(
    page: Page, readme_agent: tuple[int, str], worker: Path
) -> None:
    from playwright.sync_api import expect

    steps = _walkthrough()
    said = ("Sign up", "Create team", "Register an agent", "tick `route`", "Submit this agent")
    for words in said:
        assert words in steps, f"the walkthrough no longer says {words!r}"
    _, endpoint_url = readme_agent

    # 1. sign up
    page.goto("/")
    page.get_by_role("link", name="Sign up").click()
    page.get_by_label("Username").fill("walker")
    page.get_by_label("Email").fill("walker@example.org")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    # 2. create a team (sign-up lands on My team)
    page.get_by_label("Team name").fill("walkers")
    page.get_by_role("button", name="Create team").click()
    # 3. (the agent is served by the fixture, with the README's command)
    # 4. register it: the sole team is chosen already; tick route
    page.get_by_test_id("team-walkers").get_by_role("link", name="Register an agent").click()
    expect(page.get_by_label("Team")).to_have_value(str(Team.objects.get(name="walkers").pk))
    page.get_by_label("Name", exact=True).fill("floor")
    page.get_by_label("Endpoint URL").fill(endpoint_url)
    page.get_by_label("Protocol").select_option("http-json")
    page.get_by_label("route", exact=True).check()
    page.get_by_role("button", name="Register").click()
    # 5. its pre-flight, live on the agent page
    expect(page.get_by_test_id("preflight-status")).to_have_text(
        "passed", timeout=PREFLIGHT_WAIT_MS
    )
    guard = page.locator("#preflight-checks tbody tr[data-check=guard]")
    expect(guard).to_contain_text("a loopback address")
    expect(guard).not_to_contain_text("public")
    agent = Agent.objects.get(name="floor")
    assert agent.apps == ["route"]
    assert AgentPreflight.objects.get(agent=agent).status == "passed"
    # ... then submit it from there: route is offered, and only route
    page.get_by_test_id("submit-agent").click()
    route_box = page.get_by_label("route", exact=True)
    expect(route_box).to_be_checked()
    for other in (a for a in app_ids() if a != "route"):
        expect(page.get_by_label(other, exact=True)).to_be_hidden()
    page.get_by_label("Queries per app").fill("2")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/submissions/*/")
    submission = Submission.objects.get(agent=agent)
    assert submission.apps == ["route"]
    # 6. the submission page fills in and states the result, without a reload
    page.evaluate("window.__sameLoad = true")
    result = page.get_by_test_id("result-route")
    expect(result.get_by_test_id("result-correct-and-safe")).to_contain_text(
        re.compile(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]"), timeout=RESULT_WAIT_MS
    )
    expect(page.get_by_test_id("episodes").locator("tbody tr")).to_have_count(2)
    assert page.evaluate("window.__sameLoad === true")
    submission.refresh_from_db()
    assert submission.status == "finished"
    # the team's e-mail, on the worker's console as in the demo
    deadline = time.monotonic() + 30
    while "Subject: NetArena: submission" not in worker.read_text():
        assert time.monotonic() < deadline, "no finish e-mail on the worker's console"
        time.sleep(0.5)
    assert f"/submissions/{submission.pk}/" in worker.read_text()
