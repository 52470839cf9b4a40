"""No stuck submission: a real Celery worker is killed with SIGKILL in the
middle of a submission (mid-episode); another worker and the requeue job finish it, and every
episode is scored exactly once. Real Redis, real worker processes, the real MALT app with the
served oracle reference agent over HTTP."""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import pytest

from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import register_reference_agent, serve_reference_agent
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.submissions.celery_worker import broker_url, start_worker, stop_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUERIES = 10
#: Fast heartbeats so that the dead run is noticed within seconds (production: 10 s / 90 s).
HEARTBEAT_S, STALE_S = 0.5, 3.0


def test_a_killed_worker_leaves_no_stuck_submission(tmp_path, settings):
    broker = broker_url()
    vault = tmp_path / "vault"
    env = {
        "NETARENA_ORACLE_VAULT_DIR": str(vault),
        "NETARENA_EPISODE_HEARTBEAT_S": str(HEARTBEAT_S),
        "NETARENA_EPISODE_STALE_S": str(STALE_S),
    }
    settings.NETARENA = {**settings.NETARENA, "ORACLE_VAULT_DIR": str(vault)}
    oracle = serve_reference_agent(
        kind="oracle", protocol="http-json", apps=("malt",), vault_dir=vault, log_dir=tmp_path
    )
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    first = start_worker(f"kill1-{os.getpid()}", queues="control,malt", log_path=logs[0], env=env)
    second = None
    started = time.monotonic()
    try:
        agent = register_reference_agent(oracle)
        submission = submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=QUERIES
        )
        episodes = EpisodeRecord.objects.filter(submission=submission)
        # kill the first worker while it runs an episode, after it scored a few
        deadline = time.monotonic() + 60
        while not (
            episodes.filter(status="done").count() >= 2 and episodes.filter(status="running")
        ):
            assert time.monotonic() < deadline, logs[0].read_text()[-3000:]
            time.sleep(0.02)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        interrupted = set(episodes.filter(status="running").values_list("pk", flat=True))
        assert interrupted, "the kill should land mid-episode"
        assert episodes.exclude(status__in=["done", "running"]).exists()  # mid-submission

        second = start_worker(
            f"kill2-{os.getpid()}", queues="control,malt", log_path=logs[1], env=env
        )
        requeued = 0
        deadline = time.monotonic() + 90
        while Submission.objects.get(pk=submission.pk).status != Submission.Status.FINISHED:
            assert time.monotonic() < deadline, (
                f"stuck: {list(episodes.values_list('pk', 'status'))}\n"
                + logs[1].read_text()[-3000:]
            )
            requeued += episode_services.episodes_requeue(stale_s=STALE_S)  # the beat job's work
            time.sleep(0.5)
        submission.refresh_from_db()
        assert submission.status == "finished" and not submission.incomplete
        assert list(episodes.values_list("status", flat=True)) == ["done"] * QUERIES
        assert all(e.correct and e.safe for e in episodes)  # the oracle, run once each
        assert requeued == len(interrupted)
        for pk in interrupted:
            assert EpisodeRecord.objects.get(pk=pk).attempts == 2
        # every episode scored exactly once across both workers
        scored = Counter(
            int(m)
            for log in logs
            for m in re.findall(r"episode (\d+) scored \(attempt", log.read_text())
        )
        assert scored == Counter({pk: 1 for pk in episodes.values_list("pk", flat=True)})
        assert time.monotonic() - started < 120
    finally:
        if second is not None:
            stop_worker(second)
        stop_worker(first)
        oracle.process.terminate()
        oracle.process.wait(timeout=10)
        # the killed worker's reserved message would come back after the visibility timeout
        # into a later run: drop it from this broker
        import redis

        redis.Redis.from_url(broker).delete("unacked", "unacked_index")
