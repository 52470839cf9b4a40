"""Nothing of a query's answer is visible before it is spent (``submissions.disclosure``).

Walks every GET view the URL configuration has (pages, JSON endpoints, the REST API) as an
anonymous visitor, as the team that owns an agent and as another team, during an open
practice submission and during an open round in which one agent has finished and another is
still answering, and fails on any label, ground truth, verdict measure or other agent's
transcript in any answer. Then closes everything and checks the same planted values do show
where the rule says they should (so the walk can fail). Last, a real HTTP agent tries the
exploit: it reads its own running episode's label from the public API during the episode.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from evaluator.testing import GuessApp, registered_app
from evaluator.types import Query
from submissions.models import Agent, EpisodeRecord, Round, Submission, Team
from submissions.services import dispatch
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

#: Planted in the stored rows; none may appear in any view while unspent.
LABEL = "zzlabelzz"
GROUND_TRUTH = "gtmarker-3141"
DETAILS = "detailsmarker-1414"
STEPS, BLAST, LATENCY_S, AGENT_S, MISMATCHES = 918273, 918274, 9182.75, 9182.77, 918276
#: JSON keys that name an episode's answer or verdict.
VERDICT_KEYS = {"label", "labels", "level", "correct", "safe", "changed_state", "steps",
                "blast_radius", "ground_truth", "details", "latency_s", "agent_s"}
#: Pages outside the rule (the admin is staff-only, the schema lists field names, /readyz
#: probes Redis and says only "ready" or not).
SKIPPED_PREFIXES = ("/admin/", "/api/schema/", "/api/docs/", "/readyz")


def _transcript(marker: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Guess my number (0-9). prompt-{marker}"},
        {"role": "assistant", "content": f"reply-{marker}", "latency_s": 0.1},
        {"role": "user", "content": f"observation-{marker}", "safe_step": False,
         "info": {"mismatches": MISMATCHES}},
    ]


def _episode(submission: Submission, index: int, marker: str, *, done: bool) -> EpisodeRecord:
    verdict: dict[str, Any] = {}
    if done:
        verdict = dict(
            status="done", correct=True, safe=True, latency_s=LATENCY_S, agent_s=AGENT_S,
            steps=STEPS, changed_state=False, blast_radius=BLAST, finished_at=timezone.now(),
            transcript=_transcript(marker), details={"expected": DETAILS, "count": 1},
        )
    else:
        verdict = dict(status="running", transcript=_transcript(marker))
    return EpisodeRecord.objects.create(
        submission=submission, app_id="guess", index=index, query_id=f"q{index}-{marker}",
        level=3, label=f"{LABEL}-{index}",
        query={"app_id": "guess", "pack": "public", "ground_truth": {"note": GROUND_TRUTH}},
        **verdict,
    )


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    users = get_user_model().objects
    blue_user = users.create_user("blue", password="pw-blue-123456")
    red_user = users.create_user("red", password="pw-red-1234567")
    blue, red = Team.objects.create(name="Blue"), Team.objects.create(name="Red")
    blue.members.add(blue_user)
    red.members.add(red_user)
    common = dict(endpoint_url="https://93.184.215.14/v1", protocol="http-json")
    agent_a = Agent.objects.create(team=blue, name="a", **common)
    agent_b = Agent.objects.create(team=red, name="b", **common)
    practice = Submission.objects.create(
        agent=agent_a, seed=1, apps=["guess"], queries_per_app=2, status="running"
    )
    _episode(practice, 0, "practice-a", done=True)
    _episode(practice, 1, "practice-a", done=False)
    evaluation_round = Round.objects.create(number=1, seed=5, apps=["guess"], queries_per_app=2)
    finished = Submission.objects.create(
        agent=agent_a, round=evaluation_round, seed=5, apps=["guess"], queries_per_app=2,
        status="finished", finished_at=timezone.now(),
    )
    answering = Submission.objects.create(
        agent=agent_b, round=evaluation_round, seed=5, apps=["guess"], queries_per_app=2,
        status="running",
    )
    for index in range(2):
        _episode(finished, index, "round-a", done=True)
    _episode(answering, 0, "round-b", done=True)
    _episode(answering, 1, "round-b", done=False)
    with registered_app({"guess": GuessApp}):
        yield {
            "users": {"blue": blue_user, "red": red_user},
            "ids": {
                "submission_id": [practice.pk, finished.pk, answering.pk],
                "episode_id": list(EpisodeRecord.objects.values_list("pk", flat=True)),
                "number": [evaluation_round.number],
                "agent_id": [agent_a.pk, agent_b.pk],
                "team_id": [blue.pk, red.pk],
            },
            "round": evaluation_round,
            "submissions": [practice, finished, answering],
        }


def _paths(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _paths(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern)


def _concrete(template: str, ids: dict[str, list[int]]) -> Iterator[str]:
    """Every path the template names with the world's ids (templates with other parameters,
    e.g. a pack's name or an invitation token, are covered by their own tests)."""
    names = re.findall(r"<(?:int:)?(\w+)>", template)
    if any(name not in ids for name in names):
        return
    if len(names) > 1:
        return
    path = "/" + template.lstrip("^").rstrip("$")
    if not names:
        yield path
        return
    for value in ids[names[0]]:
        yield re.sub(r"<(?:int:)?\w+>", str(value), path)


def _every_get_path(ids: dict[str, list[int]]) -> list[str]:
    paths = sorted(
        {p for t in _paths(get_resolver().url_patterns) for p in _concrete(t, ids)}
    )
    chosen = [p for p in paths if not p.startswith(SKIPPED_PREFIXES)]
    # the board's other views: each app, the open round, practice
    chosen += ["/?round=1", "/?round=practice", "/?app=guess&round=1", "/?app=guess",
               "/api/v1/leaderboard/?round=1", "/api/v1/leaderboard/?round=practice"]
    return chosen


def _json_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _json_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _json_keys(v)}
    return set()


def _walk(client: Client, ids: dict[str, list[int]]) -> dict[str, str]:
    bodies = {}
    for path in _every_get_path(ids):
        response = client.get(path)
        assert response.status_code < 500, path
        if response.status_code == 200 and not response.streaming:
            bodies[path] = response.content.decode("utf-8", "replace")
    return bodies


def _leaks(path: str, body: str, allowed_transcripts: set[str]) -> list[str]:
    found = []
    for marker in (LABEL, GROUND_TRUTH, DETAILS, str(STEPS), str(BLAST), str(LATENCY_S),
                   str(AGENT_S), str(MISMATCHES)):
        if marker in body:
            found.append(f"{path}: {marker}")
    for marker in ("practice-a", "round-a", "round-b"):
        if f"reply-{marker}" in body and marker not in allowed_transcripts:
            found.append(f"{path}: transcript of {marker}")
    if body.lstrip().startswith(("{", "[")):
        try:
            keys = _json_keys(json.loads(body))
        except ValueError:
            keys = set()
        episode_keys = keys & VERDICT_KEYS
        if episode_keys:
            found.append(f"{path}: keys {sorted(episode_keys)}")
    return found


def test_no_view_shows_an_unspent_answer_to_anyone_but_staff(world):
    ids = world["ids"]
    audiences: dict[str, tuple[Client, set[str]]] = {"anonymous": (Client(), set())}
    for name, own in (("blue", {"practice-a", "round-a"}), ("red", {"round-b"})):
        client = Client()
        client.force_login(world["users"][name])
        audiences[name] = (client, own)
    walked = 0
    for audience, (client, own) in audiences.items():
        bodies = _walk(client, ids)
        walked += len(bodies)
        leaks = [leak for path, body in bodies.items() for leak in _leaks(path, body, own)]
        assert not leaks, f"{audience} sees: {leaks[:10]}"
        # the owner's own transcript does show (the rule is not "hide everything")
        if audience != "anonymous":
            episode = EpisodeRecord.objects.filter(
                submission__agent__team__members=world["users"][audience]
            ).first()
            assert episode is not None
            assert "reply-" in bodies[f"/episodes/{episode.pk}/"]
    assert walked > 3 * 30  # every page, JSON endpoint and API view, for each audience

    # spent: the round closes and the practice submission finishes
    practice, finished, answering = world["submissions"]
    Submission.objects.filter(pk__in=[practice.pk, answering.pk]).update(
        status="finished", finished_at=timezone.now()
    )
    EpisodeRecord.objects.filter(status="running").update(status="done", correct=False)
    Round.objects.filter(pk=world["round"].pk).update(closed_at=timezone.now())
    public = Client()
    episode = EpisodeRecord.objects.get(submission=finished, index=0)
    page = public.get(f"/episodes/{episode.pk}/").content.decode()
    assert LABEL in page and str(STEPS) in page and "reply-round-a" in page
    assert GROUND_TRUTH not in page  # the ground truth: owner team and staff only
    owner = Client()
    owner.force_login(world["users"]["blue"])
    assert GROUND_TRUTH in owner.get(f"/episodes/{episode.pk}/").content.decode()
    listed = public.get(f"/api/v1/submissions/{answering.pk}/episodes/").json()["results"]
    assert {row["label"] for row in listed} == {f"{LABEL}-0", f"{LABEL}-1"}
    assert public.get(f"/submissions/{finished.pk}/result.json").status_code == 200


class LabelledGuessApp(GuessApp):
    """:class:`GuessApp` whose label is its answer (``n<number>``), as a route or k8s label
    names the injected faults: a leak of the label is a leak of the ground truth."""

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        return [
            dataclasses.replace(q, labels=(f"n{q.ground_truth['number']}",))
            for q in super().generate(count, seed, level)
        ]


class LabelReader(BaseHTTPRequestHandler):
    """An ``http-json`` agent that, before each reply, reads its own submission's episodes
    from the site's public API and answers the running episode's label when it finds one
    ("0" otherwise)."""

    site_url = ""
    submission_id = 0
    api_reads: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        answer = "0"
        listed = httpx.get(
            f"{self.site_url}/api/v1/submissions/{self.submission_id}/episodes/", timeout=10
        )
        for row in listed.json()["results"]:
            self.api_reads.append(row)
            label = str(row.get("label") or "")
            if row.get("status") == "running" and label.startswith("n"):
                answer = label[1:]
        body = json.dumps({"text": answer}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_agent_reading_its_running_episodes_labels_from_the_api_gains_nothing(
    live_server, monkeypatch
):
    # the episodes run here, one at a time, instead of through the queues
    monkeypatch.setattr(dispatch, "task_send", lambda *args, **kwargs: None)
    server = ThreadingHTTPServer(("127.0.0.1", 0), LabelReader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with registered_app({"guess": LabelledGuessApp}):
            team = Team.objects.create(name="Peekers")
            agent = Agent.objects.create(
                team=team, name="peeker", protocol="http-json", reference_kind="test",
                endpoint_url=f"http://127.0.0.1:{server.server_address[1]}/",
            )
            submission = Submission.objects.create(
                agent=agent, seed=11, apps=["guess"], queries_per_app=8
            )
            LabelReader.site_url, LabelReader.submission_id = live_server.url, submission.pk
            LabelReader.api_reads = []
            submission_services.submission_prepare(submission_id=submission.pk)
            for episode in submission.episodes.order_by("index"):
                episode_services.episode_execute(episode_id=episode.pk)
            numbers = [e.query["ground_truth"]["number"] for e in submission.episodes.all()]
            correct = submission.episodes.filter(correct=True).count()
    finally:
        server.shutdown()
    # it did read its own running episodes, one at a time, and saw no label
    assert any(row.get("status") == "running" for row in LabelReader.api_reads)
    assert not any("label" in row for row in LabelReader.api_reads)
    # so it scores exactly what always answering "0" scores, not 8/8
    assert correct == numbers.count(0) < len(numbers)
