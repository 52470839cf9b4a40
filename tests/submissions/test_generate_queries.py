"""``manage.py generate_queries`` reproduces the exact queries a submission was judged on."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from evaluator.commitment import round_commitment
from evaluator.types import Query
from submissions.models import EpisodeRecord, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.submissions.test_services import OracleClient, run_everything, toy_app  # noqa: F401

pytestmark = pytest.mark.django_db


def test_the_command_regenerates_a_finished_submissions_queries(
    toy_app,  # noqa: F811
    monkeypatch,
    django_capture_on_commit_callbacks,
    capsys,
):
    monkeypatch.setattr(
        episode_services, "agent_client_build", lambda agent: OracleClient(agent.name)
    )
    agent = agent_services.agent_create(
        team=Team.objects.create(name="checkers"),
        name="seven",
        endpoint_url="https://93.184.215.14/a",
        protocol="http-json",
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=9
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    stored = [
        Query.from_dict(e.query).fingerprint()
        for e in EpisodeRecord.objects.filter(submission=submission).order_by("index")
    ]
    seed = str(submission.seed)
    call_command("generate_queries", "--app", "guess", "--seed", seed, "--count", "9")
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["fingerprint"] for r in rows] == stored
    call_command(
        "generate_queries", "--app", "guess", "--seed", seed, "--count", "9", "--salt", "ab"
    )
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["commitment"] == round_commitment(submission.seed, {"guess": 1}, "ab")


def test_bad_arguments_are_clear_errors():
    with pytest.raises(CommandError, match="nosuch"):
        call_command("generate_queries", "--app", "nosuch", "--seed", "1", "--count", "1")
    with pytest.raises(CommandError, match="count"):
        call_command("generate_queries", "--app", "malt", "--seed", "1", "--count", "0")
