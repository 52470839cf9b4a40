"""An admin starts a round in the browser, watches it, closes it; the seed appears only then."""

from __future__ import annotations

from typing import TYPE_CHECKING
from unittest import mock

import pytest
from django.contrib.auth.models import User

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from submissions.models import EpisodeRecord, Round, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.browser.helpers import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

PASSWORD = "Rounds-Admin-77"


@pytest.mark.django_db(transaction=True)
def test_admin_starts_watches_and_closes_a_round(page: Page, monkeypatch) -> None:
    from playwright.sync_api import expect

    User.objects.create_user("admin", "admin@example.org", PASSWORD, is_staff=True)
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: ScriptedClient(["3"]))
    team = Team.objects.create(name="lab")
    with registered_app({"guess": GuessApp}):
        for name in ("alpha", "beta"):
            agent_services.agent_create(
                team=team, name=name, endpoint_url="https://93.184.215.14/a",
                protocol="http-json", apps=["guess"],
            )  # fmt: skip
        log_in(page, "admin", PASSWORD)
        page.get_by_role("navigation").get_by_role("link", name="Rounds").click()
        with mock.patch("submissions.services.dispatch.task_send"):
            page.get_by_role("link", name="Start a round").click()
            expect(page.get_by_label("guess: Toy: guess the number")).to_be_checked()
            page.get_by_label("Queries per app").fill("4")
            page.get_by_role("button", name="Start the round").click()
            page.wait_for_url("**/rounds/1/")
        evaluation_round = Round.objects.get(number=1)
        expect(page.get_by_test_id("commitment")).to_have_text(evaluation_round.commitment)
        expect(page.get_by_test_id("seed-hidden")).to_be_visible()
        assert set(
            Submission.objects.filter(round=evaluation_round).values_list("agent__name", flat=True)
        ) == {"alpha", "beta"}

        # the workers' part, done here: every episode runs; the page's progress follows
        for submission in Submission.objects.filter(round=evaluation_round):
            with mock.patch("submissions.services.dispatch.task_send"):
                submission_services.submission_prepare(submission_id=submission.pk)
            for episode in EpisodeRecord.objects.filter(submission=submission):
                episode_services.episode_execute(episode_id=episode.pk)
        expect(page.locator("[data-testid=progress] progress")).to_have_attribute(
            "value", "8", timeout=15_000
        )
        page.get_by_role("button", name="Close the round and reveal the seed").click()
        expect(page.get_by_test_id("seed")).to_have_text(str(evaluation_round.seed))
        expect(page.get_by_test_id("salt")).to_have_text(evaluation_round.salt)
        expect(page.get_by_test_id("round-status")).to_contain_text("closed")
        expect(page.locator("#round-app-guess")).to_contain_text("alpha")
