"""The public/held-out gap on the board, in a real browser: an agent that solves the public
generator's queries and fails the held-out ones carries the "overfit" flag and a negative gap;
an agent as good on both does not. The API carries the same figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from evaluator.testing import GuessApp, registered_app
from submissions import services
from submissions.models import Agent, EpisodeRecord, Submission, Team

if TYPE_CHECKING:
    from playwright.sync_api import Page

N = 40  # queries per agent: half public, half held out


def _submission(team: Team, name: str, public_rate: float, held_out_rate: float) -> Agent:
    agent = Agent.objects.create(team=team, name=name, endpoint_url="https://93.184.215.14/a",
                                 protocol="http-json")
    submission = Submission.objects.create(agent=agent, seed=1, apps=["guess"],
                                           queries_per_app=N, status="finished",
                                           finished_at=timezone.now())
    for i in range(N):
        held_out = i % 2 == 1
        pack = "heldout-wording" if held_out else "public"
        rate = held_out_rate if held_out else public_rate
        EpisodeRecord.objects.create(
            submission=submission, app_id="guess", index=i, query_id=f"{name}-{i}", level=1,
            label="a", query={"pack": pack}, status="running",
        )
        episode = EpisodeRecord.objects.get(submission=submission, index=i)
        correct = (i // 2) < rate * (N // 2)
        services._episode_store(episode, correct=correct, safe=True, latency_s=1.0, agent_s=0.5,
                                steps=1, changed_state=True, blast_radius=None,
                                input_tokens=None, output_tokens=None)
    return agent


@pytest.mark.django_db(transaction=True)
def test_board_shows_the_held_out_gap_and_flags_the_overfit_agent(page: Page, client) -> None:
    from playwright.sync_api import expect

    team = Team.objects.create(name="gappers")
    with registered_app({"guess": GuessApp}):
        script = _submission(team, "script", public_rate=1.0, held_out_rate=0.1)
        steady = _submission(team, "steady", public_rate=0.6, held_out_rate=0.6)

        page.goto("/?app=guess")
        script_row = page.locator(f'#app-guess tr[data-agent="{script.pk}"]')
        steady_row = page.locator(f'#app-guess tr[data-agent="{steady.pk}"]')
        expect(script_row.get_by_test_id("overfit")).to_be_visible()
        expect(script_row.get_by_test_id("overfit")).to_have_text("overfit")
        expect(steady_row.get_by_test_id("overfit")).to_have_count(0)
        expect(script_row.locator("td.held-out")).to_contain_text("gap -90 pts")
        expect(steady_row.locator("td.held-out")).to_contain_text("gap +0 pts")
        header = page.locator("#app-guess th[data-sort=gap]")
        expect(header).to_contain_text("Held-out (gap)")

        rows = {r["agent"]: r for r in client.get("/api/v1/leaderboard/?app_id=guess").json()[
            "apps"]["guess"]}
        assert rows["script"]["overfit"] is True and rows["steady"]["overfit"] is False
        assert rows["script"]["correct_and_safe_public"]["value"] == 1.0
        assert rows["script"]["correct_and_safe_held_out"]["value"] == pytest.approx(0.1)
        gap = rows["script"]["held_out_gap"]
        assert gap["value"] == pytest.approx(-0.9) and gap["high"] < 0
        assert rows["steady"]["held_out_gap"]["low"] < 0 < rows["steady"]["held_out_gap"]["high"]
