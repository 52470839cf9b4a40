"""Live progress and Cancel on the submission page, in Chromium, against a real Celery worker
(real Redis), the real MALT app and the served oracle reference agent over HTTP.

A member submits an agent from the Submit page and watches the progress bar reach the end
without the page reloading, the episodes table fill in and the result (correct and safe with
its interval, the board rank) appear; then submits another agent to an app no worker serves
(so it stays open) and cancels it with the page's Cancel button.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User

from accounts import services as account_services
from submissions.models import Agent, EpisodeRecord, Submission
from submissions.reference_agents import serve_reference_agent
from tests.browser.helpers import log_in
from tests.submissions.celery_worker import broker_url, start_worker, stop_worker

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "orbit-Lantern-42"
QUERIES = 4


def _submit(page: Page, agent_label: str, app_id: str) -> int:
    page.get_by_role("navigation").get_by_role("link", name="Submit").click()
    page.get_by_label("Agent").select_option(label=agent_label)
    for box in page.locator("input[name=apps]").all():
        box.set_checked(box.get_attribute("value") == app_id)
    page.get_by_label("Queries per app").fill(str(QUERIES))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/submissions/*/")
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_progress_reaches_the_end_without_reload_and_cancel(page: Page, tmp_path, settings):
    from playwright.sync_api import expect

    broker = broker_url()
    vault = tmp_path / "vault"
    settings.NETARENA = {**settings.NETARENA, "ORACLE_VAULT_DIR": str(vault)}
    oracle = serve_reference_agent(
        kind="oracle", protocol="http-json", apps=("malt",), vault_dir=vault, log_dir=tmp_path
    )
    worker = start_worker(
        f"browser-{os.getpid()}",
        queues="control,malt",
        log_path=tmp_path / "worker.log",
        env={"NETARENA_ORACLE_VAULT_DIR": str(vault)},
    )
    try:
        user = User.objects.create_user("noor", "noor@example.org", PASSWORD)
        team = account_services.team_create(user=user, name="noor-team")
        for name in ("oracle-bot", "idle-bot"):
            # a reference agent in the member's team (reference agents may live on loopback)
            Agent.objects.create(
                team=team,
                name=name,
                endpoint_url=oracle.url,
                protocol="http-json",
                reference_kind="oracle",
            )
        log_in(page, "noor", PASSWORD)

        submission_id = _submit(page, "noor-team/oracle-bot", "malt")
        page.evaluate("window.__notReloaded = true")
        bar = page.locator("[data-testid=submission-progress] progress")
        expect(page.get_by_test_id("cancel-form")).to_be_visible()
        expect(page.get_by_test_id("progress-text")).to_have_text(
            f"{QUERIES}/{QUERIES} episodes done (100.0%)", timeout=90_000
        )
        expect(page.get_by_test_id("submission-status")).to_have_text("finished")
        assert bar.get_attribute("value") == str(QUERIES)
        assert page.evaluate("bar => bar.value === bar.max", bar.element_handle())
        expect(page.get_by_test_id("cancel-form")).to_have_count(0)
        expect(page.get_by_test_id("progress-apps")).to_contain_text(f"malt: {QUERIES}/{QUERIES}")
        # the result and the filled episodes table, swapped in without a reload
        result = page.get_by_test_id("result-malt")
        # the oracle: 4 of 4 correct and safe, Wilson 95% interval [51.0, 100.0]
        expect(result.get_by_test_id("result-correct-and-safe")).to_contain_text(
            "100.0% [51.0, 100.0]", timeout=30_000
        )
        expect(result.get_by_test_id("result-rank")).to_contain_text("1 of 1")
        expect(result.get_by_test_id("result-previous")).to_contain_text("no earlier")
        episode_rows = page.get_by_test_id("episodes").locator("tbody tr")
        expect(episode_rows).to_have_count(QUERIES)
        for row in episode_rows.all():
            expect(row).to_contain_text("done")
        assert page.evaluate("window.__notReloaded") is True  # updated in place
        assert Submission.objects.get(pk=submission_id).status == "finished"

        # route has no worker here: the second submission stays open until cancelled
        other_id = _submit(page, "noor-team/idle-bot", "route")
        expect(page.get_by_test_id("submission-status")).to_have_text("running", timeout=30_000)
        page.get_by_role("button", name="Cancel this submission").click()
        expect(page.get_by_test_id("submission-status")).to_have_text("cancelled")
        expect(page.get_by_test_id("progress-apps")).to_contain_text(f"{QUERIES} cancelled")
        expect(page.get_by_test_id("cancel-form")).to_have_count(0)
        other = Submission.objects.get(pk=other_id)
        assert other.status == "cancelled"
        statuses = set(
            EpisodeRecord.objects.filter(submission=other).values_list("status", flat=True)
        )
        assert statuses == {"cancelled"}
    finally:
        stop_worker(worker)
        oracle.process.terminate()
        oracle.process.wait(timeout=10)
        import redis

        redis.Redis.from_url(broker).delete("route")  # the cancelled episodes' messages
