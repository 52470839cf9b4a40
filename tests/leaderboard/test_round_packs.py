"""A round that draws from a held-out variant pack commits to the pack's content hash and
share; after the reveal, anyone holding the published pack regenerates exactly its queries
(``manage.py generate_queries --variant-pack``) and the commitment. A pack's life: sealed
until its round closes, then spent (``submissions.services.packs``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from evaluator.commitment import round_commitment
from evaluator.types import Query
from evaluator.variants import VARIANT_DIRS_ENV, pack_digest, reset_configured_packs
from submissions.errors import PackSpentError
from submissions.models import EpisodeRecord, HeldOutPack, PackExposure, Submission, Team
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


def test_a_pack_is_sealed_until_its_round_closes_then_spent_published_and_practised(
    held_out, client, tmp_path, django_capture_on_commit_callbacks
) -> None:
    """Practice never draws a sealed pack; a round does, with an exposure ledger; closing the
    round spends the pack: downloadable by digest, regenerable from the archive, open to
    practice (not held out there); a later round refuses the spent pack unless forced."""
    team = Team.objects.create(name="publishers")
    agent = agent_services.agent_create(
        team=team, name="a", endpoint_url="https://93.184.215.14/a", protocol="http-json",
        apps=["malt"],
    )
    digest = pack_digest(PACK)
    # practice while the pack is sealed: public queries only
    with django_capture_on_commit_callbacks(execute=False):
        practice = submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=QUERIES
        )
        submission_services.submission_prepare(submission_id=practice.pk)
    assert practice.packs == {} and practice.held_out_share == 0.0
    assert {e.query["pack"] for e in practice.episodes.all()} == {"public"}
    assert not PackExposure.objects.filter(submission=practice).exists()
    Submission.objects.filter(pk=practice.pk).update(status="finished")

    evaluation_round = round_services.round_create(apps=["malt"], queries_per_app=QUERIES)
    pack = HeldOutPack.objects.get(name="heldout-wording", sha256=digest)
    assert pack.state == "sealed"
    submission = Submission.objects.get(round=evaluation_round)
    assert submission.sealed_packs == {"malt": ["heldout-wording"]}
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    drawn = [e for e in submission.episodes.all() if e.query["pack"] == "heldout-wording"]
    assert drawn and all(e.sealed for e in drawn)
    exposure = PackExposure.objects.get(pack=pack, submission=submission)
    assert (exposure.team, exposure.round, exposure.queries, exposure.while_sealed) == (
        team, evaluation_round, len(drawn), True
    )
    by_digest = f"/packs/{digest}.tar.gz"
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert "heldout-wording" in page and "published when the round is closed" in page
    assert client.get(by_digest).status_code == 404  # sealed: same answer as unknown
    assert client.get("/packs/").content.decode().count("sealed") >= 1

    Submission.objects.filter(round=evaluation_round).update(status="finished")
    round_services.round_close(round_id=evaluation_round.pk)
    pack.refresh_from_db()
    assert (pack.state, pack.spent_by) == ("spent", evaluation_round)
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert f'href="{by_digest}"' in page and "--variant-pack" in page
    archive = client.get(by_digest)
    assert archive.status_code == 200 and archive["Content-Type"] == "application/gzip"
    archive_path = tmp_path / "pack.tar.gz"
    archive_path.write_bytes(archive.content)
    # anyone regenerates the round's queries from the published archive alone
    out = io.StringIO()
    call_command(
        "generate_queries", app="malt", seed=evaluation_round.seed, count=QUERIES,
        salt=evaluation_round.salt, variant_pack=[str(archive_path)], held_out_share=0.5,
        stdout=out,
    )
    *rows, last = [json.loads(line) for line in out.getvalue().splitlines()]
    stored = [Query.from_dict(e.query) for e in submission.episodes.order_by("index")]
    assert [r["fingerprint"] for r in rows] == [q.fingerprint() for q in stored]
    assert last["commitment"] == evaluation_round.commitment

    # practice may now draw the spent pack, and its queries are not held out
    with django_capture_on_commit_callbacks(execute=False):
        again = submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=QUERIES
        )
        submission_services.submission_prepare(submission_id=again.pk)
    assert again.packs == {"malt": {"heldout-wording": digest}} and again.sealed_packs == {}
    assert not any(e.sealed for e in again.episodes.all())
    assert PackExposure.objects.get(submission=again).while_sealed is False
    Submission.objects.filter(pk=again.pk).update(status="finished")

    # a new round refuses the spent pack unless staff force it, and then says so
    with pytest.raises(PackSpentError):
        round_services.round_create(apps=["malt"], queries_per_app=4)
    forced = round_services.round_create(apps=["malt"], queries_per_app=4, force_spent=True)
    assert forced.forced_packs == {"malt": ["heldout-wording"]}
    assert Submission.objects.get(round=forced).sealed_packs == {}
    assert "Spent packs reused" in client.get(f"/rounds/{forced.number}/").content.decode()
