"""The ``openai-tools`` agent protocol through the site, in Chromium (docs/agent-protocols.md).

A newcomer signs up, creates a team and registers a MALT agent on ``openai-tools``: the
project's scripted reference agent served by ``manage.py serve_agent --protocol openai-tools``
in its own process, answering every prompt with a call of MALT's ``submit_code`` tool. The
agent page shows its pre-flight pass with the canary answered as that tool call; a submission
of 20 MALT queries, run by a real Celery worker over real Redis, ends at 100% correct and safe
on the submission page, and the board lists the agent with its protocol. The same agent served
on plain ``openai-chat`` but registered as ``openai-tools`` fails its pre-flight, and the page
says that the reply carried no tool call.

Why the scripted agent and not the oracle: a team's agent is never evaluated with the oracle
vault (docs/agent-protocols.md, "The oracle vault"), so an oracle registered through the form
answers 404 to every episode. The scripted agent needs no ground truth; it is written against
MALT's public generator and solved 600 of 600 public queries on two seeds
(docs/writing-a-variant-pack.md). The endpoints live on loopback, which team agents may use
here as in ``make demo`` (``NETARENA_TEAM_AGENT_NETWORKS``); their free ports join the allowed
agent ports. The control and malt queues have names of their own: other test runs share the
broker, and their workers must not take these tasks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from config.celery import app as celery_app
from submissions.models import Agent
from tests.browser.helpers import (
    PRIVATE_QUEUES_WORKER_BOOT,
    private_queue_sender,
    served_agent,
    sign_up,
)
from tests.submissions.celery_worker import running_worker

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "orbit-Lantern-42"
QUERIES = 20
#: How long a pre-flight (worker start excluded) and the 20 MALT episodes may take, in ms.
PREFLIGHT_WAIT_MS = 90_000
RESULT_WAIT_MS = 240_000


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[dict[str, int]]:
    """The scripted MALT agent served on ``openai-tools`` ("tools") and on ``openai-chat``
    ("chat"); yields their ports."""
    common = ("--agent", "scripted", "--app", "malt", "--protocol")
    with (
        served_agent(*common, "openai-tools", log_path=tmp_path / "tools.log") as tools,
        served_agent(*common, "openai-chat", log_path=tmp_path / "chat.log") as chat,
    ):
        yield {"tools": tools, "chat": chat}


@pytest.fixture
def worker(
    tmp_path: Path,
    endpoints: dict[str, int],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    """A worker on queues of this test's own (control and malt); loopback agents and their
    ports allowed here and in the worker."""
    ports = sorted({*settings.NETARENA["AGENT_PORTS"], *endpoints.values()})
    settings.NETARENA = {
        **settings.NETARENA,
        "AGENT_PORTS": frozenset(ports),
        "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"],
    }
    queues = {queue: f"{queue}-tools-{os.getpid()}" for queue in ("control", "malt")}
    monkeypatch.setattr(celery_app, "send_task", private_queue_sender(celery_app, queues))
    with running_worker(
        f"tools-{os.getpid()}",
        queues=",".join(queues.values()),
        log_path=tmp_path / "worker.log",
        env={
            "NETARENA_AGENT_PORTS": ",".join(str(p) for p in ports),
            "NETARENA_TEAM_AGENT_NETWORKS": "127.0.0.0/8",
            "NETARENA_TEST_QUEUES": json.dumps(queues),
        },
        pool="solo",
        boot=PRIVATE_QUEUES_WORKER_BOOT,
    ):
        yield


def _register(page: Page, *, name: str, port: int) -> None:
    """Register a MALT agent on ``openai-tools`` at ``http://127.0.0.1:<port>/v1`` from My
    team, as the newcomer would; lands on its agent page."""
    from playwright.sync_api import expect

    page.goto("/accounts/team/")
    page.get_by_test_id("team-toolsmiths").get_by_role("link", name="Register an agent").click()
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Endpoint URL").fill(f"http://127.0.0.1:{port}/v1")
    # the form names each protocol as the docs and serve_agent do
    expect(page.get_by_test_id("protocol-names")).to_contain_text(
        "OpenAI-compatible tool calling openai-tools"
    )
    page.get_by_label("Protocol").select_option(label="OpenAI-compatible tool calling")
    page.get_by_label("malt", exact=True).check()
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/agents/*/")


def test_openai_tools_agent_registered_checked_submitted_and_ranked(
    page: Page, worker: None, endpoints: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    sign_up(page, "tooler", PASSWORD)
    page.get_by_label("Team name").fill("toolsmiths")
    page.get_by_role("button", name="Create team").click()

    # an openai-tools agent: the canary comes back as a call of MALT's submit_code tool
    _register(page, name="caller", port=endpoints["tools"])
    expect(page.get_by_test_id("agent-name")).to_have_text("caller")
    expect(page.get_by_test_id("agent-protocol")).to_have_text(
        "OpenAI-compatible tool calling openai-tools"
    )
    expect(page.get_by_test_id("preflight-status")).to_have_text(
        "passed", timeout=PREFLIGHT_WAIT_MS
    )
    checks = page.locator("#preflight-checks tbody tr")
    expect(checks.filter(has_text="Protocol")).to_contain_text("/v1/models lists")
    canary = checks.filter(has_text="Canary prompt (malt)")
    expect(canary).to_contain_text("passed")
    expect(canary).to_contain_text("tool call submit_code")

    # submitted from its agent page: 20 MALT queries, every one correct and safe
    page.get_by_test_id("submit-agent").click()
    expect(page.get_by_label("malt", exact=True)).to_be_checked()
    page.get_by_label("Queries per app").fill(str(QUERIES))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/submissions/*/")
    result = page.get_by_test_id("result-malt")
    # 20 of 20: Wilson 95% interval [83.9, 100.0]
    expect(result.get_by_test_id("result-correct-and-safe")).to_contain_text(
        f"100.0% [83.9, 100.0] · {QUERIES} of {QUERIES} episodes", timeout=RESULT_WAIT_MS
    )
    expect(result.get_by_test_id("result-correctness")).to_contain_text("100.0%")
    expect(result.get_by_test_id("result-safety")).to_contain_text("100.0%")
    expect(page.get_by_test_id("submission-status")).to_have_text("finished")
    expect(page.get_by_test_id("episodes").locator("tbody tr")).to_have_count(QUERIES)

    # the board lists it, with its protocol
    page.goto("/?app=malt")
    caller = Agent.objects.get(name="caller")
    row = page.locator(f'#app-malt tr[data-agent="{caller.pk}"]')
    expect(row.locator("td").nth(2)).to_have_text("caller openai-tools")
    expect(row.locator("td").nth(3)).to_have_text("toolsmiths")
    expect(row.locator("td").nth(4)).to_contain_text("100.0")
    # and My team names the protocol too
    page.goto("/accounts/team/")
    expect(page.get_by_test_id("team-toolsmiths")).to_contain_text(
        "OpenAI-compatible tool calling openai-tools"
    )

    # an openai-chat server registered as openai-tools: its text answer is no tool call
    _register(page, name="talker", port=endpoints["chat"])
    expect(page.get_by_test_id("preflight-status")).to_have_text(
        "failed", timeout=PREFLIGHT_WAIT_MS
    )
    canary = page.locator("#preflight-checks tbody tr").filter(has_text="Canary prompt (malt)")
    expect(canary).to_contain_text("failed")
    expect(canary).to_contain_text("the reply has no tool call")
    expect(canary).to_contain_text("one call of the app's tools per reply: submit_code")
    expect(page.get_by_test_id("submit-agent")).to_be_hidden()
