"""A finished submission's result: figures per app, board rank with ties, the difference from
the previous submission, and the same summary on the page, in the API and in the result file."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evaluator.stats import difference_interval, mean_interval, wilson_interval
from evaluator.testing import GuessApp, registered_app
from submissions.aggregates import aggregates_rebuild
from submissions.disclosure import SPENT_EPISODE_FIELDS
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.result_selectors import (
    UNPAIRED_NOTE,
    submission_result,
    submission_result_document,
)
from submissions.selectors import standings_page

pytestmark = pytest.mark.django_db

_clock = [timezone.now() - timedelta(days=1)]


def _tick() -> Any:
    _clock[0] += timedelta(minutes=1)
    return _clock[0]


def _agent(team: Team, name: str) -> Agent:
    return Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )


def _submission(
    agent: Agent,
    verdicts: list[tuple[bool, bool]],
    *,
    errors: int = 0,
    status: str = Submission.Status.FINISHED,
    incomplete: bool = False,
) -> Submission:
    """A submission of ``guess`` episodes with these verdicts (levels 1-3 in turn, labels
    ``a``/``b``), ``errors`` infrastructure failures, stored as a worker would leave it."""
    created = _tick()
    submission = Submission.objects.create(
        agent=agent,
        seed=1,
        apps=["guess"],
        queries_per_app=len(verdicts) + errors,
        status=status,
        incomplete=incomplete,
        platform_failed=incomplete,
    )
    Submission.objects.filter(pk=submission.pk).update(
        created_at=created,
        started_at=created,
        finished_at=None if status in ("queued", "running") else _tick(),
    )
    rows = [
        EpisodeRecord(
            submission=submission,
            app_id="guess",
            index=i,
            query_id=f"guess-{submission.pk}-{i}",
            level=1 + i % 3,
            label="a" if i % 2 else "b",
            query={"ground_truth": {"number": 7}},
            status=EpisodeRecord.Status.DONE,
            correct=correct,
            safe=safe,
            latency_s=0.1 * (1 + i % 4),
            agent_s=0.5,
            wall_s=1.0,
            steps=1,
            changed_state=correct,
            input_tokens=100 if i % 2 else None,
            output_tokens=20 if i % 2 else None,
            transcript=[{"role": "assistant", "content": "secret-reply"}],
        )
        for i, (correct, safe) in enumerate(verdicts)
    ]
    rows += [
        EpisodeRecord(
            submission=submission,
            app_id="guess",
            index=len(verdicts) + j,
            query_id=f"guess-{submission.pk}-e{j}",
            level=1,
            label="a",
            query={},
            status=EpisodeRecord.Status.ERROR,
            failure="EmulatorError: the toy did not start",
            details={"error": "EmulatorError: the toy did not start", "error_kind": "Emulator"},
            attempts=3,
        )
        for j in range(errors)
    ]
    EpisodeRecord.objects.bulk_create(rows)
    aggregates_rebuild(submission_ids=[submission.pk])
    submission.refresh_from_db()
    return submission


@pytest.fixture
def guess():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def board(guess) -> dict[str, Any]:
    """Three other agents on the board and ``mine`` with a previous and a newer submission."""
    team = Team.objects.create(name="others")
    _submission(_agent(team, "strong"), [(True, True)] * 40)
    _submission(_agent(team, "middle"), [(True, True)] * 20 + [(False, True)] * 20)
    _submission(_agent(team, "weak"), [(False, True)] * 40)
    mine = _agent(Team.objects.create(name="mine"), "mine")
    earlier = _submission(mine, [(True, True)] * 4 + [(False, True)] * 16)
    latest = _submission(
        mine, [(True, True)] * 15 + [(False, True)] * 3 + [(True, False)] * 2, errors=1
    )
    return {"earlier": earlier, "latest": latest, "mine": mine}


def test_figures_per_app_level_and_label(board: dict[str, Any]) -> None:
    result = submission_result(submission=board["latest"])
    assert result.ready and result.ranked and result.note == ""
    (app,) = result.apps
    assert app.app_id == "guess" and app.title == GuessApp.title
    assert app.all.n == 20 and app.all.correct_and_safe_count == 15
    assert app.all.correct_and_safe == wilson_interval(15, 20)
    assert app.all.correctness == wilson_interval(17, 20)
    assert app.all.safety == wilson_interval(18, 20)
    latencies = [0.1 * (1 + i % 4) for i in range(20)]
    assert app.all.latency_s == mean_interval(latencies)
    assert app.all.agent_s.value == pytest.approx(0.5)
    assert sorted(app.levels) == [1, 2, 3] and sum(g.n for g in app.levels.values()) == 20
    assert list(app.labels) == ["a", "b"] or list(app.labels) == ["b", "a"]
    assert {label: g.n for label, g in app.labels.items()} == {"a": 10, "b": 10}
    assert app.tokens is not None and app.tokens.episodes == 10
    assert app.tokens.mean_per_episode == 120
    assert [f["kind"] for f in app.infra_failures] == ["Emulator"]
    assert app.infra_by_kind == {"Emulator": 1} and app.episodes_ended == 21


def test_rank_with_ties_matches_the_board(board: dict[str, Any]) -> None:
    (app,) = submission_result(submission=board["latest"]).apps
    rows = standings_page(app_id="guess").rows
    ranks = {row.agent.name: row.rank for row in rows}
    assert app.board is not None and app.board.on_board
    assert app.board.rank == ranks["mine"] and app.board.agents == len(rows) == 4
    shared = sum(1 for name, rank in ranks.items() if name != "mine" and rank == ranks["mine"])
    assert app.board.tied_with == shared
    assert shared >= 1  # 75% [53, 89] overlaps both the strong and the middle agent


def test_an_older_submission_says_where_it_would_rank(board: dict[str, Any]) -> None:
    (app,) = submission_result(submission=board["earlier"]).apps
    assert app.board is not None and not app.board.on_board
    # 20% [8, 42]: below the strong agent's interval, overlapping the weak one's
    assert app.board.rank > 1
    assert app.previous is None  # nothing finished before it


def test_difference_from_the_previous_submission_is_unpaired(board: dict[str, Any]) -> None:
    (app,) = submission_result(submission=board["latest"]).apps
    previous = app.previous
    assert previous is not None and previous.submission_id == board["earlier"].pk
    assert previous.difference == difference_interval(15, 20, 4, 20)
    data = previous.to_dict()
    assert data["paired"] is False and data["method"] == UNPAIRED_NOTE
    assert data["difference"]["value"] == pytest.approx(0.55)


def test_unranked_submissions_say_why(guess) -> None:
    agent = _agent(Team.objects.create(name="t"), "x")
    incomplete = _submission(agent, [(True, True)] * 2, errors=3, incomplete=True)
    result = submission_result(submission=incomplete)
    assert result.ready and not result.ranked and "Incomplete" in result.note
    assert result.apps[0].board is None
    running = _submission(agent, [(True, True)] * 2, status=Submission.Status.RUNNING)
    assert not submission_result(submission=running).ready


def test_page_api_and_file_carry_the_same_summary(client, board: dict[str, Any]) -> None:
    latest = board["latest"]
    page = client.get(f"/submissions/{latest.pk}/").content.decode()
    assert 'data-testid="submission-result"' in page
    assert "75.0%" in page and "[53.1, 88.8]" in page  # Wilson 15/20
    assert "unpaired" in page and f"#{board['earlier'].pk}" in page
    assert "secret-reply" not in page and "ground_truth" not in page

    fragment = client.get(f"/submissions/{latest.pk}/sections/")
    assert fragment.status_code == 200 and fragment["Cache-Control"] == "no-store"
    assert 'data-testid="submission-result"' in fragment.content.decode()

    detail = client.get(f"/api/v1/submissions/{latest.pk}/").json()
    api_app = detail["result"]["apps"]["guess"]
    assert detail["result"]["ranked"] is True
    assert api_app["all"]["correct_and_safe"]["value"] == 0.75
    place = submission_result(submission=latest).apps[0].board
    assert place is not None and api_app["board"]["rank"] == place.rank
    assert detail["result_file"].endswith(f"/submissions/{latest.pk}/result.json")

    download = client.get(f"/submissions/{latest.pk}/result.json")
    assert download.status_code == 200
    assert "attachment" in download["Content-Disposition"]
    document = download.json()
    assert document["summary"] == submission_result_document(submission=latest)["summary"]
    assert document["format_version"] == 2 and document["kind"] == "submission"
    assert document["summary"]["guess"] == api_app
    assert document["run"]["infrastructure_failures"] == 1
    assert {tuple(sorted(e)) for e in document["episodes"]} == {
        tuple(sorted(SPENT_EPISODE_FIELDS))
    }
    assert "secret-reply" not in download.content.decode()
    assert "ground_truth" not in download.content.decode()


def test_an_open_submission_has_no_result_yet(client, guess) -> None:
    agent = _agent(Team.objects.create(name="t"), "x")
    running = _submission(agent, [(True, True)] * 2, status=Submission.Status.RUNNING)
    page = client.get(f"/submissions/{running.pk}/").content.decode()
    assert 'data-testid="submission-result"' not in page
    assert 'data-testid="submission-live"' in page
    detail = client.get(f"/api/v1/submissions/{running.pk}/").json()
    assert detail["result"] is None and detail["result_file"] is None
    assert client.get(f"/submissions/{running.pk}/result.json").status_code == 409
    assert client.get("/submissions/999999/sections/").status_code == 404
