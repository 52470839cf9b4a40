"""Register an agent and submit it from the browser; the submission page opens (Chromium).

Queueing is replaced by a recorder here (no broker in this test): the pipeline itself is covered
by tests/submissions/test_pipeline_e2e.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from unittest import mock

import pytest
from django.contrib.auth.models import User

from accounts import services
from evaluator.registry import app_ids
from submissions.crypto import decrypt_secret
from submissions.models import Agent, AgentPreflight, Submission
from tests.browser.helpers import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

PASSWORD = "orbit-Lantern-42"


@pytest.mark.django_db(transaction=True)
def test_register_agent_then_submit_it(page: Page) -> None:
    from playwright.sync_api import expect

    user = User.objects.create_user("mia", "mia@example.org", PASSWORD)
    services.team_create(user=user, name="mia-team")
    log_in(page, "mia", PASSWORD)

    page.get_by_role("link", name="Register an agent").click()
    page.get_by_label("Team").select_option(label="mia-team")
    page.get_by_label("Name", exact=True).fill("probe")
    page.get_by_label("Endpoint URL").fill("https://93.184.215.14/v1")
    page.get_by_label("Protocol").select_option("openai-chat")
    page.get_by_label("Model name").fill("m-1")
    page.get_by_label("API key").fill("sk-browser-secret")
    page.get_by_role("button", name="Register").click()
    expect(page.get_by_test_id("agent-name")).to_have_text("probe")  # its agent page
    page.get_by_role("navigation").get_by_role("link", name="My team").click()
    expect(page.get_by_test_id("team-mia-team")).to_contain_text("probe")
    assert "sk-browser-secret" not in page.content()
    agent = Agent.objects.get(name="probe")
    assert decrypt_secret(bytes(agent.secret_encrypted)) == "sk-browser-secret"
    # what a worker's passed pre-flight stores (tests/browser/test_agent_page_browser.py runs it)
    AgentPreflight.objects.filter(agent=agent).update(status="passed")

    with mock.patch("submissions.services.dispatch.task_send") as send:
        page.get_by_role("navigation").get_by_role("link", name="Submit").click()
        for app_id in app_ids():
            expect(page.get_by_label(app_id)).to_be_checked()
        page.get_by_label("Queries per app").fill("2")
        page.get_by_role("button", name="Submit").click()
        page.wait_for_url("**/submissions/*/")
    submission = Submission.objects.get(agent=agent)
    assert page.url.endswith(f"/submissions/{submission.pk}/")
    assert submission.queries_per_app == 2 and submission.apps == app_ids()
    assert send.call_args.kwargs["queue"] == "control"
