"""A site round of the oracle registered on ``openai-tools``: real Redis, a real Celery worker
for every app, the oracle served over HTTP by the reference server in its own process, 20
queries of each app. Every episode must be correct and safe, and every reply a tool call."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import register_reference_agent, serve_reference_agent
from submissions.selectors import standings
from submissions.services.rounds import round_close, round_create
from tests.submissions.celery_worker import running_worker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.netns,
    pytest.mark.k8s,
    pytest.mark.full_round,
]

APPS = ("malt", "route", "k8s")
QUERIES = 20


@pytest.mark.timeout(2400)
def test_oracle_on_openai_tools_is_correct_and_safe_in_a_site_round(tmp_path: Path) -> None:
    with running_worker(
        "tools-round",
        queues="control," + ",".join(APPS),
        log_path=tmp_path / "worker.log",
        env={"NETARENA_ORACLE_VAULT_DIR": str(tmp_path / "vault")},
        concurrency=2,
        start_timeout_s=120,
        stop_timeout_s=30,
    ):
        served = serve_reference_agent(
            kind="oracle",
            protocol="openai-tools",
            apps=APPS,
            vault_dir=tmp_path / "vault",
            log_dir=tmp_path,
        )
        try:
            agent = register_reference_agent(served)
            assert agent.protocol == "openai-tools"
            evaluation_round = round_create(apps=list(APPS), queries_per_app=QUERIES)
            deadline = time.monotonic() + 2000
            submissions = Submission.objects.filter(round=evaluation_round)
            while submissions.exclude(status__in=["finished", "failed"]).exists():
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
                time.sleep(1.0)
        finally:
            served.process.terminate()
            served.process.wait(timeout=10)
    assert set(submissions.values_list("status", flat=True)) == {"finished"}
    episodes = EpisodeRecord.objects.filter(submission__round=evaluation_round)
    assert episodes.count() == QUERIES * len(APPS)
    assert not episodes.exclude(status="done").exists()
    wrong = [(e.app_id, e.label, e.failure) for e in episodes if not (e.correct and e.safe)]
    assert wrong == []
    round_close(round_id=evaluation_round.pk)  # standings are published when it closes
    for app_id in APPS:
        shown = standings(app_id=app_id, round_number=evaluation_round.number)
        (row,) = [r for r in shown if r.agent.name == "reference-oracle"]
        assert row.correctness.value == 1.0 and row.safety.value == 1.0, app_id
    replies = [t for e in episodes for t in e.transcript if t.get("role") == "assistant"]
    assert replies and all("tool_call" in t for t in replies)
