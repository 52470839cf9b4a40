"""The leaderboard in a real browser: the Plotly charts hold data for every listed agent and
level, sorting a column reorders the rows, ticking agents filters every chart, and an episode
replay opens from the board through the submission page."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from submissions.models import EpisodeRecord, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.leaderboard.test_board import _random_submission

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHART_KINDS = ("ci", "scatter", "levels", "spider")


def _chart_traces(page: Page, kind: str) -> list[dict]:
    """Each trace of a drawn chart: its agent id (``meta``), visibility and point values."""
    return page.evaluate(
        """(id) => document.getElementById(id).data.map((t) => ({
               meta: t.meta, visible: t.visible === undefined ? true : t.visible,
               values: t.r || t.x }))""",
        f"{kind}-guess",
    )


def _column(page: Page, index: int) -> list[str]:
    return page.eval_on_selector_all(
        "#app-guess table.standings tbody tr",
        "(rows, i) => rows.map((r) => r.cells[i].dataset.value)",
        index,
    )


@pytest.mark.django_db(transaction=True)
def test_board_charts_sorting_selection_and_replay(page: Page, monkeypatch) -> None:
    from playwright.sync_api import expect

    rng = random.Random(4)
    team = Team.objects.create(name="browsers")
    with registered_app({"guess": GuessApp}):
        # three agents with verdicts on levels 1-3, stored through the service (and its hook)
        stored = [_random_submission(team, f"agent-{k}", rng, 30) for k in range(3)]
        Submission.objects.filter(pk__in=[s.pk for s in stored]).update(status="finished")
        # one agent evaluated end to end, whose episodes have transcripts to replay
        monkeypatch.setattr(
            episode_services, "agent_client_build", lambda agent: ScriptedClient(["7"])
        )
        runner = agent_services.agent_create(
            team=team, name="runner", endpoint_url="https://93.184.215.14/a", protocol="http-json"
        )
        submission = Submission.objects.create(
            agent=runner, seed=3, apps=["guess"], queries_per_app=4
        )
        from unittest import mock

        with mock.patch("submissions.services.dispatch.task_send"):
            submission_services.submission_prepare(submission_id=submission.pk)
        for episode in EpisodeRecord.objects.filter(submission=submission):
            episode_services.episode_execute(episode_id=episode.pk)
        agent_ids = {s.agent.pk for s in stored} | {runner.pk}

        page.goto("/?app=guess")
        for kind in CHART_KINDS:
            page.wait_for_selector(f"#{kind}-guess .main-svg")
        listed = {int(v) for v in page.eval_on_selector_all(
            "#standings-guess tbody tr", "(rows) => rows.map((r) => r.dataset.agent)"
        )}  # fmt: skip
        assert listed == agent_ids
        for kind in CHART_KINDS:
            traces = _chart_traces(page, kind)
            assert {t["meta"] for t in traces} == agent_ids, kind
            assert all(t["visible"] is True for t in traces)
        # the level spider: correctness and safety at L1, L2 and L3 for each stored agent
        levels = {t["meta"]: t["values"] for t in _chart_traces(page, "levels")}
        for s in stored:
            assert all(v is not None for v in levels[s.agent.pk][:6]), s.agent.name

        # sorting: by name (text, ascending), then by correct-and-safe (higher first)
        page.locator("#app-guess th[data-sort=agent]").click()
        names = _column(page, 2)
        assert names == sorted(names, key=str.lower)
        page.locator("#app-guess th[data-sort=cs]").click()
        rates = [float(v) for v in _column(page, 4)]
        assert rates == sorted(rates, reverse=True)
        page.locator("#app-guess th[data-sort=cs]").click()
        assert [float(v) for v in _column(page, 4)] == sorted(rates)
        expect(page.locator("#app-guess th[data-sort=cs] .better")).to_have_text(" ▲")
        expect(page.locator("#app-guess th[data-sort=blast] .better")).to_have_text(" ▼")

        # selection: tick one agent, every chart keeps only its traces, the address keeps it
        chosen = stored[1].agent.pk
        page.locator(f"#app-guess input.pick[value='{chosen}']").check()
        for kind in CHART_KINDS:
            visible = [t["meta"] for t in _chart_traces(page, kind) if t["visible"] is True]
            assert visible == [chosen], kind
        assert f"agents={chosen}" in page.url
        expect(page.get_by_test_id("selection-status")).to_contain_text("Comparing 1")
        page.get_by_role("button", name="Clear selection").click()
        for kind in CHART_KINDS:
            assert {t["meta"] for t in _chart_traces(page, kind)} == agent_ids, kind

        # an episode replay, from the board through the submission page
        page.locator(f"#app-guess tr[data-agent='{runner.pk}'] a", has_text="submission").click()
        page.wait_for_url(f"**/submissions/{submission.pk}/")
        first = EpisodeRecord.objects.filter(submission=submission).earliest("index")
        page.locator(f"a[href='/episodes/{first.pk}/']").click()
        page.wait_for_url(f"**/episodes/{first.pk}/")
        expect(page.get_by_test_id("prompt")).to_contain_text(first.query["prompt"][:30])
        expect(page.get_by_test_id("step").first).to_contain_text("7")
        expect(page.get_by_test_id("verdict")).to_be_visible()
        expect(page.get_by_test_id("ground-truth-hidden")).to_be_visible()
