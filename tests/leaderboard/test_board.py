"""The board (per app, per round, sort marks, selection), the episode replay with its hidden
ground truth rule, and the maintained aggregates (equal to a recomputation, equal to the
standings computed from the episodes)."""

from __future__ import annotations

import math
import random
import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from evaluator.stats import Interval
from evaluator.testing import GuessApp, registered_app
from submissions.aggregates import SUM_FIELDS, aggregates_rebuild, mean_interval_from_sums
from submissions.models import Agent, EpisodeAggregate, EpisodeRecord, Round, Submission, Team
from submissions.selectors import (
    EpisodeVerdict,
    _tie_ranks_fast,
    _tie_ranks_of_counts,
    _wilson,
    standing_from_episodes,
    standings,
    standings_page,
)
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.submissions.test_services import OracleClient, run_everything

pytestmark = pytest.mark.django_db


@pytest.fixture
def guess():
    with registered_app({"guess": GuessApp}):
        yield


def _agent(team: Team, name: str) -> Agent:
    return agent_services.agent_create(
        team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )


def _run(monkeypatch, capture, agent: Agent, *, queries: int = 12, round_=None) -> Submission:
    """Evaluate ``agent`` on ``queries`` toy queries through the real services (the agent's
    name picks its scripted behaviour: ``seven`` answers 7, others -1)."""
    monkeypatch.setattr(
        episode_services, "agent_client_build", lambda agent: OracleClient(agent.name)
    )
    with capture(execute=False):
        if round_ is None:
            submission = submission_services.submission_create(
                agent=agent, apps=["guess"], queries_per_app=queries
            )
        else:
            submission = Submission.objects.create(
                agent=agent, round=round_, seed=round_.seed, apps=["guess"], queries_per_app=queries
            )
    run_everything(capture, submission)
    return submission


def _aggregate_table() -> dict[tuple, tuple]:
    return {
        (a.submission_id, a.app_id, a.level, a.label): tuple(
            round(getattr(a, f), 6) for f in SUM_FIELDS
        )
        for a in EpisodeAggregate.objects.filter(n__gt=0)
    }


def _close(a: Interval, b: Interval) -> bool:
    pairs = [(a.value, b.value), (a.low, b.low), (a.high, b.high)]
    return a.n == b.n and all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
        for x, y in pairs
    )


# ---- maintained aggregates ----------------------------------------------------------------


def test_aggregates_maintained_by_the_service_equal_a_rebuild(
    guess, monkeypatch, django_capture_on_commit_callbacks
):
    team = Team.objects.create(name="agg")
    for name in ("seven", "minus", "seven2"):
        _run(monkeypatch, django_capture_on_commit_callbacks, _agent(team, name), queries=15)
    maintained = _aggregate_table()
    assert maintained, "storing verdicts through the service must maintain aggregates"
    done = EpisodeRecord.objects.filter(status="done").count()
    assert sum(v[0] for k, v in maintained.items() if k[2] > 0) == done
    assert sum(v[0] for k, v in maintained.items() if k[2] == 0) == done  # the total rows
    aggregates_rebuild()
    assert _aggregate_table() == maintained


def test_refresh_is_idempotent_and_only_counts_scored_episodes(
    guess, monkeypatch, django_capture_on_commit_callbacks
):
    from submissions.aggregates import aggregate_refresh

    team = Team.objects.create(name="idem")
    submission = _run(monkeypatch, django_capture_on_commit_callbacks, _agent(team, "seven"))
    before = _aggregate_table()
    episode = submission.episodes.earliest("index")
    aggregate_refresh(episode_id=episode.pk)
    aggregate_refresh(episode_id=episode.pk)
    assert _aggregate_table() == before
    # an episode closed as an evaluator error leaves every figure
    EpisodeRecord.objects.filter(pk=episode.pk).update(status="error")
    aggregate_refresh(episode_id=episode.pk)
    after = _aggregate_table()
    assert sum(v[0] for v in after.values()) == sum(v[0] for v in before.values()) - 2
    aggregates_rebuild()
    assert _aggregate_table() == after


def _random_submission(team: Team, name: str, rng: random.Random, n: int) -> Submission:
    agent = Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    submission = Submission.objects.create(
        agent=agent,
        seed=1,
        apps=["guess"],
        queries_per_app=n,
        status="finished",
        finished_at=timezone.now(),
    )
    for i in range(n):
        safe = rng.random() < 0.7
        tokens = rng.random() < 0.5
        EpisodeRecord.objects.create(
            submission=submission,
            app_id="guess",
            index=i,
            query_id=f"{name}-{i}",
            level=1 + rng.randrange(3),
            label=rng.choice(["a", "b", "a+b"]),
            query={},
            status="running",
        )
        episode = EpisodeRecord.objects.get(submission=submission, index=i)
        fields = {
            "correct": rng.random() < 0.5,
            "safe": safe,
            "latency_s": rng.choice([None, rng.random() * 10]),
            "agent_s": rng.random() * 3,
            "steps": rng.choice([None, rng.randrange(1, 9)]),
            "changed_state": rng.choice([None, True, False]),
            "blast_radius": None if safe else rng.choice([None, rng.randrange(0, 30)]),
            "input_tokens": rng.randrange(2000) if tokens else None,
            "output_tokens": rng.randrange(500) if tokens else None,
        }
        if i % 9 == 4:  # an evaluator error: out of every figure
            episode_services._episode_close_error(episode, "evaluator: emulator died")
        else:
            episode_services._episode_store(episode, **fields)
    return submission


def test_standings_from_aggregates_equal_standings_from_episodes(guess):
    rng = random.Random(13)
    team = Team.objects.create(name="rand")
    subs = [_random_submission(team, f"agent-{k}", rng, 20 + 7 * k) for k in range(3)]
    Submission.objects.filter(pk__in=[s.pk for s in subs]).update(status="finished")
    rows = {r.submission.pk: r for r in standings(app_id="guess")}
    assert set(rows) == {s.pk for s in subs}
    for submission in subs:
        verdicts = [
            EpisodeVerdict(*v)._replace(correct=bool(v[3]), safe=bool(v[4]))
            for v in EpisodeRecord.objects.filter(submission=submission, status="done").values_list(
                *EpisodeVerdict._fields
            )
        ]
        expected = standing_from_episodes(submission, verdicts)
        got = rows[submission.pk]
        assert got.n == expected.n
        for name in (
            "correct_and_safe",
            "correctness",
            "safety",
            "action_rate",
            "latency_s",
            "agent_s",
            "blast_radius_mean",
        ):
            assert _close(getattr(got, name), getattr(expected, name)), name
        assert math.isclose(got.steps_mean, expected.steps_mean)
        assert (got.tokens_mean is None) == (expected.tokens_mean is None)
        if got.tokens_mean is not None and expected.tokens_mean is not None:
            assert math.isclose(got.tokens_mean, expected.tokens_mean)
        assert got.levels.keys() == expected.levels.keys()
        assert all(_close(got.levels[k], expected.levels[k]) for k in got.levels)
        assert all(_close(got.labels[k], expected.labels[k]) for k in got.labels)


def test_fast_tie_ranks_and_moment_intervals_match_the_reference():
    from evaluator.stats import mean_interval, tie_ranks, wilson_interval

    rng = random.Random(5)
    for _ in range(50):
        intervals = [wilson_interval(rng.randrange(0, 30), 30) for _ in range(rng.randrange(1, 25))]
        assert _tie_ranks_fast(intervals) == tie_ranks(intervals)
        for i in intervals:
            assert _close(_wilson(round(i.value * 30), 30), i)
        counts = [(30, 0, 0, round(i.value * 30)) for i in intervals]
        assert _tie_ranks_of_counts(counts) == tie_ranks(intervals)
        values = [rng.random() * 5 for _ in range(rng.randrange(1, 40))]
        got = mean_interval_from_sums(len(values), sum(values), sum(v * v for v in values))
        assert _close(got, mean_interval(values))


def test_latest_scored_submission_replaces_older_and_paging_keeps_global_ranks(
    guess, monkeypatch, django_capture_on_commit_callbacks
):
    team = Team.objects.create(name="page")
    agents = [_agent(team, f"seven{k}") for k in range(3)] + [_agent(team, "minus")]
    for agent in agents:
        _run(monkeypatch, django_capture_on_commit_callbacks, agent)
    first = _run(monkeypatch, django_capture_on_commit_callbacks, agents[0], queries=20)
    full = standings_page(app_id="guess")
    assert full.total == 4
    assert {r.submission.pk for r in full.rows if r.agent == agents[0]} == {first.pk}
    page = standings_page(app_id="guess", offset=1, limit=2)
    assert [r.agent.pk for r in page.rows] == [r.agent.pk for r in full.rows[1:3]]
    assert [r.rank for r in page.rows] == [r.rank for r in full.rows[1:3]]
    chosen = standings_page(app_id="guess", offset=0, limit=1, agent_ids=[full.rows[-1].agent.pk])
    assert [r.agent.pk for r in chosen.rows] == [full.rows[0].agent.pk, full.rows[-1].agent.pk]


# ---- pages ---------------------------------------------------------------------------------


@pytest.fixture
def board(guess, monkeypatch, django_capture_on_commit_callbacks):
    team = Team.objects.create(name="Board Team")
    subs = [
        _run(monkeypatch, django_capture_on_commit_callbacks, _agent(team, name), queries=15)
        for name in ("seven", "minus", "seven-b")
    ]
    return team, subs


def _figure(body: str, element_id: str) -> dict:
    import json

    match = re.search(
        rf'<script id="{element_id}" type="application/json">(.*?)</script>', body, re.S
    )
    assert match, element_id
    return json.loads(match.group(1))


def test_board_lists_every_chart_with_a_trace_per_agent_and_sort_marks(client, board):
    team, subs = board
    body = client.get("/").content.decode()
    agent_ids = {s.agent.pk for s in subs}
    for kind in ("ci", "scatter", "levels", "spider"):
        figure = _figure(body, f"{kind}-data-guess")
        assert {t["meta"] for t in figure["data"]} == agent_ids, kind
        assert figure["layout"]["modebar"]["orientation"] == "v"
        assert figure["layout"]["title"]["xanchor"] == "left"
    levels = _figure(body, "levels-data-guess")
    assert levels["data"][0]["theta"][:3] == ["L1 correct", "L2 correct", "L3 correct"]
    for sub in subs:
        assert f'href="/agents/{sub.agent.pk}/"' in body
        assert f'class="pick" value="{sub.agent.pk}"' in body
    assert 'data-sort="cs" data-better="higher"' in body
    assert 'data-sort="blast" data-better="lower"' in body
    assert 'data-sort="agent_s" data-better="lower"' in body
    assert "js/board.js" in body


def test_board_per_app_per_round_and_selection(
    client, board, monkeypatch, django_capture_on_commit_callbacks
):
    team, subs = board
    assert client.get("/?app=guess").status_code == 200
    assert client.get("/?app=nope").status_code == 404
    evaluation_round = Round.objects.create(number=1, seed=5, apps=["guess"], queries_per_app=10)
    in_round = _run(
        monkeypatch, django_capture_on_commit_callbacks, subs[1].agent, round_=evaluation_round
    )
    # an open round has no standings yet (submissions.disclosure)
    body = client.get("/?app=guess&round=1").content.decode()
    assert not re.findall(r'<tr data-agent="(\d+)">', body)
    Round.objects.filter(pk=evaluation_round.pk).update(closed_at=timezone.now())
    # closed: the board's default view (the ranking of record) is this round
    for path in ("/?app=guess&round=1", "/?app=guess"):
        body = client.get(path).content.decode()
        rows = re.findall(r'<tr data-agent="(\d+)">', body)
        assert rows == [str(in_round.agent.pk)]
        assert "round 1" in body
    practice = client.get("/?app=guess&round=practice").content.decode()
    assert len(re.findall(r'<tr data-agent="(\d+)">', practice)) == 3
    assert 'data-testid="practice-link"' in body
    # a preselected agent is ticked
    chosen = subs[2].agent.pk
    body = client.get(f"/?agents={chosen}&round=practice").content.decode()
    assert f'value="{chosen}" aria-label="compare seven-b" checked' in body


def test_api_pages_rows_and_reports_totals(client, board):
    data = client.get("/api/v1/leaderboard/?app_id=guess&limit=2").json()
    assert data["total"]["guess"] == 3 and len(data["apps"]["guess"]) == 2
    rest = client.get("/api/v1/leaderboard/?app_id=guess&limit=2&offset=2").json()
    assert len(rest["apps"]["guess"]) == 1
    row = rest["apps"]["guess"][0]
    assert set(row["safety_by_level"]) == set(row["correctness_by_level"])
    assert client.get("/api/v1/leaderboard/?limit=abc").status_code == 400
    assert client.get("/api/v1/leaderboard/?limit=5000").status_code == 400


# ---- episode replay and the hidden ground truth ---------------------------------------------


def _users(team: Team):
    model = get_user_model()
    owner = model.objects.create_user("owner", password="pw-owner-1")
    team.members.add(owner)
    other = model.objects.create_user("other", password="pw-other-1")
    staff = model.objects.create_user("staff", password="pw-staff-1", is_staff=True)
    return owner, other, staff


def _page(client, user, episode: EpisodeRecord) -> str:
    client.logout()
    if user is not None:
        client.force_login(user)
    response = client.get(f"/episodes/{episode.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def _truth_marker(episode: EpisodeRecord) -> str:
    import json

    return (
        json.dumps(episode.query["ground_truth"], indent=2, sort_keys=True).splitlines()[1].strip()
    )


def test_episode_replay_shows_prompt_steps_and_verdict(client, board):
    _, subs = board
    episode = subs[0].episodes.filter(status="done").earliest("index")
    body = client.get(f"/episodes/{episode.pk}/").content.decode()
    assert 'data-testid="prompt"' in body and 'data-testid="step"' in body
    assert 'data-testid="verdict"' in body
    assert client.get("/episodes/999999/").status_code == 404
    # linked from the submission page
    submission_page = client.get(f"/submissions/{subs[0].pk}/").content.decode()
    assert f'href="/episodes/{episode.pk}/"' in submission_page


def test_ground_truth_only_for_owner_and_staff_once_closed(client, board):
    team, subs = board
    owner, other, staff = _users(team)
    episode = subs[0].episodes.filter(status="done").earliest("index")
    marker = _truth_marker(episode)
    for user, sees in ((None, False), (other, False), (owner, True), (staff, True)):
        body = _page(client, user, episode)
        assert ('data-testid="ground-truth"' in body) is sees, user
        assert ("ground-truth-hidden" in body) is not sees
        assert 'data-testid="prompt"' in body  # closed: the transcript is public
        if not sees:
            assert marker not in body


def test_open_submission_or_round_hides_ground_truth_from_everyone(client, board):
    team, subs = board
    owner, other, staff = _users(team)
    episode = subs[0].episodes.filter(status="done").earliest("index")
    marker = _truth_marker(episode)
    Submission.objects.filter(pk=subs[0].pk).update(status="running")
    for user, transcript in ((None, False), (other, False), (owner, True)):
        body = _page(client, user, episode)
        assert 'data-testid="ground-truth"' not in body and marker not in body
        assert ('data-testid="prompt"' in body) is transcript
        assert ('data-testid="transcript-hidden"' in body) is not transcript
    assert 'data-testid="ground-truth"' in _page(client, staff, episode)  # operators see all
    # finished, but its round is still open: the same rule
    evaluation_round = Round.objects.create(number=2, seed=9, apps=["guess"], queries_per_app=1)
    Submission.objects.filter(pk=subs[0].pk).update(status="finished", round=evaluation_round)
    assert 'data-testid="ground-truth"' not in _page(client, owner, episode)
    assert 'data-testid="transcript-hidden"' in _page(client, other, episode)
    Round.objects.filter(pk=evaluation_round.pk).update(closed_at=timezone.now())
    assert 'data-testid="ground-truth"' in _page(client, owner, episode)
    assert 'data-testid="ground-truth"' not in _page(client, other, episode)


def test_infrastructure_failure_cause_is_shown(client, board):
    _, subs = board
    episode = subs[0].episodes.earliest("index")
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        status="error", failure="evaluator: emulator died", details={"error": "emulator died: x"}
    )
    body = client.get(f"/episodes/{episode.pk}/").content.decode()
    assert 'data-testid="infrastructure-failure"' in body and "emulator died: x" in body


def test_board_rows_escape_agent_and_team_names(
    client, guess, monkeypatch, django_capture_on_commit_callbacks
):
    team = Team.objects.create(name='<img src=x onerror="t()">')
    _run(monkeypatch, django_capture_on_commit_callbacks, _agent(team, "<script>x()</script>"))
    body = client.get("/?app=guess").content.decode()
    assert "<script>x()</script>" not in body and "<img src=x" not in body
    assert "&lt;script&gt;x()&lt;/script&gt;" in body


@pytest.mark.parametrize(
    ("series", "initial", "info_key", "label"),
    [
        ("loss_percent_by_step", "initial_loss_percent", "loss_percent", "pingall loss"),
        ("mismatches_by_step", "initial_mismatches", "mismatches", "connectivity mismatches"),
    ],
)
def test_replay_draws_the_pingall_or_mismatch_evolution(
    client, board, series, initial, info_key, label
):
    """Route stores the pingall loss per step, k8s the mismatch count: the page lists both
    step by step, from the value before the first step; text details stay owner-only."""
    _, subs = board
    episode = subs[0].episodes.earliest("index")
    transcript = [
        {"role": "user", "content": "Fix the network."},
        {
            "role": "assistant",
            "content": "r1 ip route add 10.0.2.0/24 via 10.0.1.2",
            "latency_s": 0.4,
        },
        {"role": "user", "content": "Step 1 output", "safe_step": True, "info": {info_key: 25.0}},
        {"role": "assistant", "content": "r2 ip link set eth1 up", "latency_s": 0.3},
        {
            "role": "user",
            "content": "Step 2 output",
            "safe_step": False,
            "info": {info_key: 0.0, "argv": ["ip"]},
        },
    ]
    details = {series: [25.0, 0.0], initial: 50.0, "expected_hint": "secret-expected-value"}
    EpisodeRecord.objects.filter(pk=episode.pk).update(transcript=transcript, details=details)
    body = client.get(f"/episodes/{episode.pk}/").content.decode()
    assert label in body
    rows = re.findall(r"<tr><td>(\w+)</td><td class=\"num\">([\d.]+)</td></tr>", body)
    assert rows == [("before", "50"), ("1", "25"), ("2", "0")]
    assert body.count('data-testid="step"') == 2 and "unsafe" in body
    assert "ip route add 10.0.2.0/24" in body and "Step 2 output" in body
    assert "secret-expected-value" not in body  # text details: owner team and staff only


def test_replay_shows_each_tool_call_and_what_it_ran(client, board):
    """An ``openai-tools`` agent's step shows the function it called with its arguments and
    the code the app ran for it; while the answer is unspent only the owner team sees it."""
    team, subs = board
    owner, other, _ = _users(team)
    episode = subs[0].episodes.earliest("index")
    code = "def process_graph(graph):\n    return graph"
    transcript = [
        {"role": "user", "content": "Add a switch to the topology."},
        {
            "role": "assistant",
            "content": code,
            "latency_s": 0.2,
            "tool_call": {"name": "submit_code", "arguments": '{"code": "plan-xyz", "n": 2}'},
        },
        {"role": "user", "content": "ok", "safe_step": True, "info": {}},
        {"role": "assistant", "content": "plain text reply", "latency_s": 0.1},
    ]
    EpisodeRecord.objects.filter(pk=episode.pk).update(transcript=transcript)
    body = _page(client, None, episode)
    steps = body.split('data-testid="step"')[1:]
    assert len(steps) == 2
    assert '<code class="tool-name" data-testid="tool-name">submit_code</code>' in steps[0]
    assert "{\n  &quot;code&quot;: &quot;plan-xyz&quot;,\n  &quot;n&quot;: 2\n}" in steps[0]
    assert 'data-testid="tool-ran">def process_graph(graph):' in steps[0]
    assert "tool-name" not in steps[1] and "plain text reply" in steps[1]
    Submission.objects.filter(pk=subs[0].pk).update(status="running")
    assert "plan-xyz" in _page(client, owner, episode)
    hidden = _page(client, other, episode)
    assert "plan-xyz" not in hidden and "submit_code" not in hidden


def test_replay_shows_the_parts_an_a2a_agent_answered_with(client, board):
    """An ``a2a`` agent's step lists the parts it answered with (text, data as JSON, files by
    name and media type) and what the app read from them; a step stored before parts were
    recorded still shows its reply; while the answer is unspent only the owner team sees
    them."""
    team, subs = board
    owner, other, _ = _users(team)
    episode = subs[0].episodes.earliest("index")
    transcript = [
        {"role": "user", "content": "Fix the network."},
        {
            "role": "assistant",
            "content": 'r1 ip link set eth1 up\n{\n  "why": "link-down-xyz"\n}',
            "latency_s": 0.3,
            "parts": [
                {"kind": "text", "text": "r1 ip link set eth1 up"},
                {"kind": "file", "name": "trace.pcap", "mime_type": "application/vnd.tcpdump"},
                {"kind": "data", "data": {"why": "link-down-xyz"}},
                {"kind": "more", "count": 3},
            ],
            "parts_from": "artifact",
        },
        {"role": "user", "content": "ok", "safe_step": True, "info": {}},
        {
            "role": "assistant",
            "content": "r2 ip route",
            "parts": [{"kind": "text", "text": "r2 ip route"}],
            "parts_from": "message",
        },
        {"role": "user", "content": "ok", "safe_step": True, "info": {}},
        {"role": "assistant", "content": "an older reply without parts"},
    ]
    EpisodeRecord.objects.filter(pk=episode.pk).update(transcript=transcript)
    body = _page(client, None, episode)
    steps = body.split('data-testid="step"')[1:]
    assert len(steps) == 3
    assert "Answered with 4 parts of its artifact" in steps[0]
    assert steps[0].count('data-testid="a2a-part"') == 4
    assert 'data-testid="a2a-file">trace.pcap</code> · application/vnd.tcpdump' in steps[0]
    assert 'data-testid="a2a-data">{\n  &quot;why&quot;: &quot;link-down-xyz&quot;\n}' in steps[0]
    assert "and 3 more parts, not kept" in steps[0]
    assert 'data-testid="a2a-read">r1 ip link set eth1 up' in steps[0]
    # a lone text part is the answer: shown once
    assert "Answered with 1 part of its message" in steps[1]
    assert steps[1].count("r2 ip route") == 1 and "a2a-read" not in steps[1]
    assert "a2a-part" not in steps[2] and "an older reply without parts" in steps[2]
    Submission.objects.filter(pk=subs[0].pk).update(status="running")
    assert "trace.pcap" in _page(client, owner, episode)
    hidden = _page(client, other, episode)
    assert "trace.pcap" not in hidden and "link-down-xyz" not in hidden


def test_rebuild_aggregates_command_restores_deleted_rows(board):
    from io import StringIO

    from django.core.management import call_command

    before = _aggregate_table()
    EpisodeAggregate.objects.all().delete()
    assert standings(app_id="guess") == []  # the board reads only the aggregates
    out = StringIO()
    call_command("rebuild_aggregates", stdout=out)
    assert f"rebuilt {len(before)} aggregate rows" in out.getvalue()
    assert _aggregate_table() == before
    assert len(standings(app_id="guess")) == 3
