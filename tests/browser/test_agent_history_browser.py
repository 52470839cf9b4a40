"""The agent page with one submission and with a hundred, in Chromium: correct and safe over
time per app with its intervals, rounds marked, a readable time axis, the board rank history,
and a history table that stays usable."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from submissions.aggregates import aggregates_rebuild
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True)

#: What a date-axis tick may read: "Nov 25", "2026", "Nov 25, 2026", "12:00", "Mon 12".
TICK = re.compile(r"^([A-Z][a-z]{2} \d{1,2}(, \d{4})?|\d{4}|\d{2}:\d{2}|[A-Z][a-z]{2}(,? \d{4})?)$")


def _submissions(
    agent: Agent, scores: list[tuple[int, int]], *, days_ago: int, rounds_every: int = 0
) -> list[Submission]:
    """Finished ``malt`` submissions of ``agent``, one a day ending ``days_ago`` days ago,
    ``(n, correct and safe)`` each; every ``rounds_every``-th belongs to a new round."""
    now = timezone.now()
    made = []
    for i, (n, good) in enumerate(scores):
        when = now - timedelta(days=days_ago + len(scores) - 1 - i, hours=3)
        evaluation_round = None
        if rounds_every and i % rounds_every == rounds_every - 1:
            number = (Round.objects.order_by("-number").values_list("number", flat=True).first()
                      or 0) + 1
            evaluation_round = Round.objects.create(
                number=number, seed=number, apps=["malt"], queries_per_app=n,
                closed_at=timezone.now(),
            )
        submission = Submission.objects.create(
            agent=agent,
            seed=i + 1,
            apps=["malt"],
            queries_per_app=n,
            status=Submission.Status.FINISHED,
            round=evaluation_round,
            started_at=when - timedelta(minutes=5),
            finished_at=when,
        )
        Submission.objects.filter(pk=submission.pk).update(created_at=when - timedelta(minutes=6))
        EpisodeRecord.objects.bulk_create(
            EpisodeRecord(
                submission=submission,
                app_id="malt",
                index=j,
                query_id=f"malt-{submission.pk}-{j}",
                level=1 + j % 3,
                label="count",
                query={},
                status=EpisodeRecord.Status.DONE,
                correct=j < good,
                safe=True,
                latency_s=0.1,
                agent_s=0.2,
                steps=1,
            )
            for j in range(n)
        )
        made.append(submission)
    aggregates_rebuild(submission_ids=[s.pk for s in made])
    return made


def _agent(team: Team, name: str) -> Agent:
    return Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )


def _ticks(page: Page, chart: str) -> list[list[str]]:
    """The x-axis tick labels of a chart, each as its lines (Plotly writes a label's lines as
    ``tspan.line`` elements: "Nov 25" over "2026")."""
    ticks: list[list[str]] = page.evaluate(
        """chart => Array.from(document.querySelectorAll("#" + chart + " .xtick text")).map(
             t => { const lines = Array.from(t.querySelectorAll("tspan.line"));
                    return (lines.length ? lines : [t]).map(l => l.textContent.trim()); })""",
        chart,
    )
    return ticks


def _readable(ticks: list[list[str]]) -> bool:
    lines = [line for tick in ticks for line in tick if line]
    return bool(lines) and all(TICK.match(line) for line in lines)


def test_one_submission(page: Page) -> None:
    from playwright.sync_api import expect

    team = Team.objects.create(name="solo-team")
    _submissions(_agent(team, "rival"), [(40, 40)], days_ago=3)
    solo = _agent(team, "solo")
    (only,) = _submissions(solo, [(10, 7)], days_ago=1)

    page.goto(f"/agents/{solo.pk}/")
    rows = page.get_by_test_id("agent-history").locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(f"#{only.pk}")
    expect(page.locator("#score-over-time .main-svg").first).to_be_visible()
    points = page.evaluate("document.getElementById('score-over-time').data[0]")
    assert points["y"] == [70.0]
    # the 95% Wilson interval of 7/10 drawn as an error bar: [39.7, 89.2]
    assert points["error_y"]["array"][0] == pytest.approx(19.2, abs=0.1)
    assert points["error_y"]["arrayminus"][0] == pytest.approx(30.3, abs=0.1)
    expect(page.locator("#score-over-time g.errorbar")).to_have_count(1)
    ticks = _ticks(page, "score-over-time")
    assert 2 <= len(ticks) <= 10 and _readable(ticks), ticks  # dates, never milliseconds
    # the board then: the rival's 40/40 lies entirely above 7/10
    ranks = page.evaluate("document.getElementById('rank-over-time').data[0]")
    assert ranks["y"] == [2] and "rank 2 of 2" in ranks["text"][0]
    assert _readable(_ticks(page, "rank-over-time"))


def test_a_hundred_submissions(page: Page) -> None:
    from playwright.sync_api import expect

    team = Team.objects.create(name="busy-team")
    # a rival that arrives half-way with a perfect record: the busy agent drops to rank 2
    _submissions(_agent(team, "rival"), [(60, 60)], days_ago=50)
    busy = _agent(team, "busy")
    scores = [(20, 8 + (i * 7) % 9) for i in range(100)]  # 40% .. 80% of 20
    made = _submissions(busy, scores, days_ago=0, rounds_every=10)

    page.goto(f"/agents/{busy.pk}/")
    rows = page.get_by_test_id("agent-history").locator("tbody tr")
    expect(rows).to_have_count(100)
    expect(rows.first).to_contain_text(f"#{made[-1].pk}")  # newest first
    # the long table scrolls inside its box; the charts stay in view below it
    assert page.evaluate(
        "(() => { const box = document.querySelector('.history-scroll');"
        " return box.scrollHeight > box.clientHeight; })()"
    )
    expect(page.locator("#score-over-time .main-svg").first).to_be_visible()
    trace = page.evaluate("document.getElementById('score-over-time').data[0]")
    assert len(trace["x"]) == 100 and len(trace["error_y"]["array"]) == 100
    # ten rounds, each a dotted line labelled R<n>
    labels = page.locator("#score-over-time .annotation-text").all_text_contents()
    assert sorted(labels, key=lambda t: int(t[1:])) == [f"R{n}" for n in range(1, 11)]
    ticks = _ticks(page, "score-over-time")
    assert 2 <= len(ticks) <= 10 and _readable(ticks), ticks
    ranks = page.evaluate("document.getElementById('rank-over-time').data[0]")
    assert len(ranks["y"]) == 100
    assert ranks["y"][:49] == [1] * 49  # alone on the board
    assert set(ranks["y"][50:]) == {2}  # the rival's 60/60 lies above every 20-episode rate
