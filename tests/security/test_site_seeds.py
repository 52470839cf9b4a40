"""Seeds have 128 bits end to end and are never shown while a submission is open;
the stored seed regenerates the stored queries exactly."""

from __future__ import annotations

import pytest

from evaluator.testing import GuessApp, registered_app
from evaluator.types import SEED_BITS, Query
from submissions.models import EpisodeRecord, Round, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent():
    with registered_app({"guess": GuessApp}):
        yield agent_services.agent_create(
            team=Team.objects.create(name="seeds"),
            name="a",
            endpoint_url="https://93.184.215.14/a",
            protocol="http-json",
            apps=["guess"],
        )


def test_submission_and_round_seeds_keep_all_128_bits(agent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
        evaluation_round = round_services.round_create(apps=["guess"], queries_per_app=3)
    for stored in (
        Submission.objects.get(pk=submission.pk),
        Round.objects.get(pk=evaluation_round.pk),
    ):
        assert isinstance(stored.seed, int)
        # a fresh 128-bit seed is below 2**64 with probability 2**-64
        assert 64 < stored.seed.bit_length() <= SEED_BITS
    assert Submission.objects.get(pk=submission.pk).seed == submission.seed
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    queries = [
        Query.from_dict(e.query) for e in EpisodeRecord.objects.filter(submission=submission)
    ]
    assert {q.seed for q in queries} == {submission.seed}
    regenerated = GuessApp().generate(3, submission.seed)
    assert [q.fingerprint() for q in queries] == [q.fingerprint() for q in regenerated]


def test_seeds_outside_128_bits_are_refused(agent):
    for bad in (-1, 2**SEED_BITS):
        with pytest.raises(ValueError):
            Submission.objects.create(agent=agent, seed=bad, apps=["guess"], queries_per_app=1)


def test_the_seed_of_an_open_submission_is_on_no_public_page(
    agent, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
        submission_services.submission_prepare(submission_id=submission.pk)
    for path in (
        "/",
        f"/submissions/{submission.pk}/",
        "/api/v1/leaderboard/",
        f"/api/v1/submissions/{submission.pk}/",
    ):
        response = client.get(path)
        assert response.status_code in (200, 401, 403), path
        assert str(submission.seed) not in response.content.decode(), path
