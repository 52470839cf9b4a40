"""A round that draws from a held-out variant pack commits to the pack's content hash and
share; after the reveal, anyone holding the published pack regenerates exactly its queries
(``manage.py generate_queries --variant-pack``) and the commitment."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from evaluator.commitment import round_commitment
from evaluator.types import Query
from evaluator.variants import VARIANT_DIRS_ENV, pack_digest, reset_configured_packs
from submissions.models import EpisodeRecord, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

PACKS = Path(__file__).resolve().parents[1] / "variant_packs" / "malt"
#: The one pack these rounds draw from (the directory holds others: heldout-families).
PACK = PACKS / "heldout-wording"
QUERIES = 16


@pytest.fixture
def held_out(monkeypatch):
    monkeypatch.setenv(VARIANT_DIRS_ENV, str(PACK))
    monkeypatch.delenv("NETARENA_HELD_OUT_SHARE", raising=False)
    reset_configured_packs()
    yield
    reset_configured_packs()


def test_round_commits_to_its_packs_and_regenerates_after_the_reveal(
    held_out, django_capture_on_commit_callbacks
) -> None:
    team = Team.objects.create(name="packers")
    agent_services.agent_create(team=team, name="a", endpoint_url="https://93.184.215.14/a",
                          protocol="http-json", apps=["malt"])
    evaluation_round = round_services.round_create(apps=["malt"], queries_per_app=QUERIES)
    digest = pack_digest(PACK)
    assert evaluation_round.packs == {"malt": {"heldout-wording": digest}}
    assert evaluation_round.held_out_share == 0.5
    assert evaluation_round.commitment == round_commitment(
        evaluation_round.seed, evaluation_round.versions, evaluation_round.salt,
        evaluation_round.packs, 0.5,
    )
    # without the packs the commitment differs: it binds the round to them
    assert evaluation_round.commitment != round_commitment(
        evaluation_round.seed, evaluation_round.versions, evaluation_round.salt
    )
    submission = Submission.objects.get(round=evaluation_round)
    assert submission.packs == evaluation_round.packs
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    stored = [Query.from_dict(e.query) for e in
              EpisodeRecord.objects.filter(submission=submission).order_by("index")]
    assert len(stored) == QUERIES
    drawn = {q.pack for q in stored}
    assert drawn == {"public", "heldout-wording"}, drawn  # half and half, per query by seed

    # the reveal: seed, salt, share and the pack itself are public; regenerate
    out = io.StringIO()
    call_command(
        "generate_queries", app="malt", seed=evaluation_round.seed, count=QUERIES,
        salt=evaluation_round.salt, variant_pack=[str(PACK)], held_out_share=0.5, stdout=out,
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    *rows, last = lines
    assert [r["fingerprint"] for r in rows] == [q.fingerprint() for q in stored]
    assert [r["pack"] for r in rows] == [q.pack for q in stored]
    assert last["commitment"] == evaluation_round.commitment


def test_packs_are_published_with_the_seed_when_the_round_closes(
    held_out, client, tmp_path
) -> None:
    import tarfile

    team = Team.objects.create(name="publishers")
    agent_services.agent_create(team=team, name="a", endpoint_url="https://93.184.215.14/a",
                          protocol="http-json", apps=["malt"])
    evaluation_round = round_services.round_create(apps=["malt"], queries_per_app=4)
    url = f"/rounds/{evaluation_round.number}/packs/malt/heldout-wording.tar.gz"
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert "heldout-wording" in page and "published when the round is closed" in page
    assert client.get(url).status_code == 404  # not before the reveal
    api = client.get(f"/api/v1/rounds/{evaluation_round.number}/").json()["round"]
    assert api["packs"] == {"malt": {"heldout-wording": pack_digest(PACK)}}
    assert api["held_out_share"] == 0.5 and api["seed"] is None

    Submission.objects.filter(round=evaluation_round).update(status="finished")
    round_services.round_close(round_id=evaluation_round.pk)
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert f'href="{url}"' in page and "--variant-pack" in page
    archive = client.get(url)
    assert archive.status_code == 200 and archive["Content-Type"] == "application/gzip"
    target = tmp_path / "unpacked"
    archive_path = tmp_path / "pack.tar.gz"
    archive_path.write_bytes(archive.content)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    # the published files are exactly what the round committed to
    assert pack_digest(target / "heldout-wording") == pack_digest(PACK)
    other = f"/rounds/{evaluation_round.number}/packs/malt/other.tar.gz"
    assert client.get(other).status_code == 404
