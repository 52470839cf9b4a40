"""An agent's infrastructure-failure rate is never hidden: the board and the agent page show
how many of its episodes the evaluator could not run (docs/metrics.md, "Infrastructure
failures"), and the API carries the same figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from evaluator.testing import GuessApp, registered_app
from submissions.models import EpisodeRecord, Submission, Team
from submissions.services import episodes as episode_services

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.django_db(transaction=True)
def test_board_and_agent_page_show_the_infrastructure_failure_rate(page: Page, client) -> None:
    from playwright.sync_api import expect

    from submissions.models import Agent

    team = Team.objects.create(name="flaky")
    agent = Agent.objects.create(team=team, name="flaky-agent", protocol="http-json",
                                 endpoint_url="https://93.184.215.14/a")
    submission = Submission.objects.create(agent=agent, seed=1, apps=["guess"], queries_per_app=10,
                                           status="finished", finished_at=timezone.now())
    with registered_app({"guess": GuessApp}):
        for i in range(10):
            episode = EpisodeRecord.objects.create(
                submission=submission, app_id="guess", index=i, query_id=f"q{i}", level=1,
                label="a", query={}, status="running")
            if i == 0:
                episode_services._episode_close_error(episode, "EmulatorError: bridge vanished")
            else:
                episode_services._episode_store(episode, correct=True, safe=True, latency_s=1.0,
                                        agent_s=0.5, steps=1, changed_state=True,
                                        blast_radius=None, input_tokens=None, output_tokens=None)

        page.goto("/?app=guess")
        row = page.locator(f'#app-guess tr[data-agent="{agent.pk}"]')
        expect(page.locator("#app-guess th[data-sort=infra]")).to_contain_text("Infra %")
        expect(row.locator("td").last).to_have_text("10.0")
        expect(row.locator("td").last.locator("span")).to_have_attribute(
            "title", "1 of 10 episodes could not be run by the evaluator")

        page.goto(f"/agents/{agent.pk}/")
        expect(page.get_by_test_id("infra-rate")).to_contain_text("1 of 10 episodes (10%)")
        expect(page.get_by_test_id("infra-failures")).to_have_text("1")

        (entry,) = client.get("/api/v1/leaderboard/?app_id=guess").json()["apps"]["guess"]
        assert entry["infra_failures"] == 1 and entry["infra_failure_rate"] == pytest.approx(0.1)
