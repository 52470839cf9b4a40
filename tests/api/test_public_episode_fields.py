"""One public set of episode columns: the API's episode serializer, the submission detail API
and the submission page (``submissions.selectors.PUBLIC_EPISODE_FIELDS``) show the same
columns, and none of them is a hidden one."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evaluator.testing import GuessApp, registered_app
from submissions.apis import EpisodeSerializer
from submissions.models import Agent, EpisodeRecord, Team
from submissions.selectors import PUBLIC_EPISODE_FIELDS, submission_episode_rows
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

#: Columns that must never be public (submissions/models.py, submissions/episode_selectors.py):
#: the query holds the hidden ground truth; the transcript and the replay are the agent's
#: replies (owner team and staff only, once closed); text details can name expected values.
HIDDEN_EPISODE_FIELDS = {"query", "transcript", "replay", "details"}
#: Markers planted in the hidden columns; none may appear in a public answer.
MARKERS = {
    "query": "gt-marker-3141",
    "transcript": "transcript-marker-2718",
    "replay": "replay-marker-1618",
    "details": "details-marker-1414",
}


def test_the_api_and_the_selector_list_the_same_public_fields_and_no_hidden_one():
    api_fields = list(EpisodeSerializer.Meta.fields)
    assert set(api_fields) == set(PUBLIC_EPISODE_FIELDS)
    assert len(set(PUBLIC_EPISODE_FIELDS)) == len(PUBLIC_EPISODE_FIELDS)
    assert not set(PUBLIC_EPISODE_FIELDS) & HIDDEN_EPISODE_FIELDS
    model_fields = {f.name for f in EpisodeRecord._meta.get_fields()}
    assert set(PUBLIC_EPISODE_FIELDS) <= model_fields
    assert model_fields >= HIDDEN_EPISODE_FIELDS  # the hidden names are real columns


def test_every_episode_listing_shows_exactly_the_public_fields(
    django_capture_on_commit_callbacks,
):
    team = Team.objects.create(name="Blue")
    agent = Agent.objects.create(
        team=team, name="bot", endpoint_url="https://93.184.215.14/v1", protocol="http-json"
    )
    with registered_app({"guess": GuessApp}):
        with django_capture_on_commit_callbacks(execute=False):
            submission = submission_services.submission_create(
                agent=agent, apps=["guess"], queries_per_app=2
            )
            submission_services.submission_prepare(submission_id=submission.pk)
    episode = EpisodeRecord.objects.filter(submission=submission).first()
    assert episode is not None
    query = dict(episode.query)
    query["ground_truth"] = {"number": 7, "note": MARKERS["query"]}
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        query=query,
        status="done",
        correct=True,
        safe=True,
        latency_s=0.5,
        agent_s=0.25,
        steps=1,
        changed_state=False,
        blast_radius=0,
        transcript=[{"role": "assistant", "content": MARKERS["transcript"]}],
        replay={"replies": [MARKERS["replay"]]},
        details={"expected": MARKERS["details"]},
    )

    client = APIClient()
    listed = client.get(f"/api/v1/submissions/{submission.pk}/episodes/")
    detail = client.get(f"/api/v1/submissions/{submission.pk}/")
    assert listed.status_code == 200 and detail.status_code == 200
    rows = [
        *listed.json()["results"],
        *detail.json()["episodes"],
        *submission_episode_rows(submission=submission),
    ]
    assert len(rows) == 6
    assert all(set(row) == set(PUBLIC_EPISODE_FIELDS) for row in rows)
    scored = [row for row in rows if row["id"] == episode.pk]
    assert [(r["agent_s"], r["changed_state"], r["blast_radius"]) for r in scored] == [
        (0.25, False, 0)
    ] * 3
    for text in (listed.content.decode(), detail.content.decode()):
        for column, marker in MARKERS.items():
            assert marker not in text, column
