"""The public/held-out gap on the board, in a real browser: in a closed round (the board's
ranking of record) an agent that solves the public generator's queries and fails the ones
from packs sealed at the time carries the "overfit" flag and a negative gap; an agent as good
on both does not. The API carries the same figures."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from evaluator.testing import GuessApp, registered_app
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team
from submissions.services import episodes as episode_services

if TYPE_CHECKING:
    from playwright.sync_api import Page

N = 40  # queries per agent: half public, half held out


def _submission(team: Team, name: str, public_rate: float, held_out_rate: float,
                evaluation_round: Round | None = None) -> Agent:
    agent = Agent.objects.create(team=team, name=name, endpoint_url="https://93.184.215.14/a",
                                 protocol="http-json")
    submission = Submission.objects.create(agent=agent, seed=1, apps=["guess"],
                                           queries_per_app=N, status="finished",
                                           finished_at=timezone.now(), round=evaluation_round)
    for i in range(N):
        held_out = i % 2 == 1
        pack = "heldout-wording" if held_out else "public"
        rate = held_out_rate if held_out else public_rate
        EpisodeRecord.objects.create(
            submission=submission, app_id="guess", index=i, query_id=f"q{i}", level=1,
            label="a", query={"pack": pack}, status="running", sealed=held_out,
        )
        episode = EpisodeRecord.objects.get(submission=submission, index=i)
        correct = (i // 2) < rate * (N // 2)
        episode_services._episode_store(
            episode,
            correct=correct,
            safe=True,
            latency_s=1.0,
            agent_s=0.5,
            steps=1,
            changed_state=True,
            blast_radius=None,
            input_tokens=None,
            output_tokens=None,
        )
    return agent


@pytest.mark.django_db(transaction=True)
def test_board_shows_the_held_out_gap_and_flags_the_overfit_agent(page: Page, client) -> None:
    from playwright.sync_api import expect

    team = Team.objects.create(name="gappers")
    evaluation_round = Round.objects.create(
        number=3, seed=3, apps=["guess"], queries_per_app=N, closed_at=timezone.now()
    )
    with registered_app({"guess": GuessApp}):
        script = _submission(team, "script", 1.0, 0.1, evaluation_round)
        steady = _submission(team, "steady", 0.6, 0.6, evaluation_round)

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

        rows = {
            r["agent"]: r
            for r in client.get("/api/v1/leaderboard/?app_id=guess").json()["apps"]["guess"]
        }
        assert rows["script"]["overfit"] is True and rows["steady"]["overfit"] is False
        assert rows["script"]["correct_and_safe_public"]["value"] == 1.0
        assert rows["script"]["correct_and_safe_held_out"]["value"] == pytest.approx(0.1)
        gap = rows["script"]["held_out_gap"]
        assert gap["value"] == pytest.approx(-0.9) and gap["high"] < 0
        assert rows["steady"]["held_out_gap"]["low"] < 0 < rows["steady"]["held_out_gap"]["high"]


@pytest.mark.django_db(transaction=True)
def test_agent_page_and_round_page_show_the_gap_and_the_flag(page: Page, client) -> None:
    from playwright.sync_api import expect

    team = Team.objects.create(name="gappers")
    evaluation_round = Round.objects.create(
        number=7, seed=3, apps=["guess"], queries_per_app=N, closed_at=timezone.now()
    )
    with registered_app({"guess": GuessApp}):
        script = _submission(team, "script", 1.0, 0.1, evaluation_round)
        steady = _submission(team, "steady", 0.6, 0.6, evaluation_round)

        page.goto(f"/agents/{script.pk}/")
        gaps = page.get_by_test_id("held-out-gaps")
        expect(gaps.locator('tr[data-app="guess"]')).to_contain_text("100.0")
        expect(gaps.locator('tr[data-app="guess"]')).to_contain_text("-90 [")
        expect(gaps.get_by_test_id("agent-overfit")).to_have_text("overfit to the public generator")
        page.goto(f"/agents/{steady.pk}/")
        expect(
            page.get_by_test_id("held-out-gaps").locator('tr[data-app="guess"]')
        ).to_contain_text("+0 [")
        expect(page.get_by_test_id("agent-overfit")).to_have_count(0)

        page.goto("/rounds/7/")
        table = page.locator("#round-app-guess")
        expect(table.get_by_test_id("overfit")).to_have_count(1)
        # the agent's own row (its name is the second cell; "tied with" cells name others)
        script_row = table.locator("tbody tr").filter(
            has=page.locator("td:nth-child(2)", has_text=re.compile(r"^script$"))
        )
        expect(script_row.locator("td.held-out")).to_contain_text("gap -90 [")
        expect(script_row.get_by_test_id("overfit")).to_be_visible()

        rows = {r["agent"]: r for r in client.get("/api/v1/rounds/7/").json()["standings"]["guess"]}
        assert rows["script"]["overfit"] is True and rows["steady"]["overfit"] is False
        assert rows["script"]["held_out_gap"]["high"] < 0
        assert rows["steady"]["correct_and_safe_held_out"]["value"] == pytest.approx(0.6)
