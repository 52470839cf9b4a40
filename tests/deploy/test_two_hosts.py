"""Workers of one app on two hosts (docs/deploy.md, "Adding worker hosts").

Each "host" is a network namespace with an address of its own on a bridge; it reaches the
shared Redis, PostgreSQL and the agent only over that network (the gateway address forwards to
the servers, which listen on loopback). Both hosts' MALT workers take episodes of one
submission; one host is killed mid-episode; the other host (with the requeue job that beat
runs) finishes the submission and every episode is scored exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import register_reference_agent, serve_reference_agent
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.conftest import require_root
from tests.submissions.celery_worker import broker_url, database_url, start_worker, stop_worker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.netns,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

QUERIES = 40
HEARTBEAT_S, STALE_S, VISIBILITY_TIMEOUT_S = 0.5, 3.0, 8.0
GATEWAY = "10.251.77.1"
HOST_ADDRESSES = {"a": "10.251.77.2", "b": "10.251.77.3"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def lan() -> Iterator[dict[str, str]]:
    """A bridge with the gateway address and one network namespace per host; yields
    ``{host: netns name}``."""
    require_root()
    tag = uuid.uuid4().hex[:6]
    bridge = f"na2h{tag}"
    hosts = {h: f"na2h-{h}-{tag}" for h in HOST_ADDRESSES}
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for host, netns in hosts.items():
            outside, inside = f"v{host}{tag}", f"i{host}{tag}"
            _ip("netns", "add", netns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "master", bridge, "up")
            _ip("link", "set", inside, "netns", netns)
            _ip("-n", netns, "addr", "add", f"{HOST_ADDRESSES[host]}/24", "dev", inside)
            _ip("-n", netns, "link", "set", inside, "up")
            _ip("-n", netns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for netns in hosts.values():
            subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)


def _forward(port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    """Forward ``GATEWAY:port`` to ``127.0.0.1:port`` (the server's loopback listener)."""
    log = (log_dir / f"forward-{port}.log").open("wb")
    return subprocess.Popen(
        ["socat", f"TCP-LISTEN:{port},bind={GATEWAY},fork,reuseaddr", f"TCP:127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )


def _via_gateway(url: str) -> tuple[str, int]:
    """``url`` with its loopback host replaced by the gateway, and its port."""
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "localhost"), url
    assert parts.port is not None, url
    netloc = parts.netloc.replace(parts.hostname, GATEWAY)
    return urlunsplit(parts._replace(netloc=netloc)), parts.port


def test_workers_on_two_hosts_share_a_submission_and_survive_a_host_dying(
    lan: dict[str, str], tmp_path: Path, settings
) -> None:
    assert connection.vendor == "postgresql"
    broker, broker_port = _via_gateway(broker_url())
    database, database_port = _via_gateway(database_url())
    vault = tmp_path / "vault"  # a volume both hosts mount
    settings.NETARENA = {**settings.NETARENA, "ORACLE_VAULT_DIR": str(vault)}
    oracle = serve_reference_agent(
        kind="oracle", protocol="http-json", apps=("malt",), vault_dir=vault, log_dir=tmp_path
    )
    agent_url, agent_port = _via_gateway(oracle.url)
    forwards = [_forward(port, tmp_path) for port in (broker_port, database_port, agent_port)]
    env = {
        "DATABASE_URL": database,
        "CELERY_BROKER_URL": broker,
        "CELERY_RESULT_BACKEND": broker,
        "NETARENA_ORACLE_VAULT_DIR": str(vault),
        "NETARENA_AGENT_ALLOWED_NETWORKS": f"{GATEWAY}/32",
        "NETARENA_EPISODE_HEARTBEAT_S": str(HEARTBEAT_S),
        "NETARENA_EPISODE_STALE_S": str(STALE_S),
        # a message host a had received but not started comes back to host b this soon
        # (production: an hour, longer than any episode)
        "NETARENA_BROKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
    }
    logs = {host: tmp_path / f"worker-{host}.log" for host in lan}
    workers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for host, netns in lan.items():
            workers[host] = start_worker(f"host-{host}-{os.getpid()}", queues="control,malt",
                                         log_path=logs[host], env=env, netns=netns)
        agent = register_reference_agent(oracle)
        agent.endpoint_url = agent_url  # what the workers call, across the network
        agent.save(update_fields=["endpoint_url"])
        submission = submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=QUERIES
        )
        episodes = EpisodeRecord.objects.filter(submission=submission)

        def scored_on(host: str) -> int:
            return len(re.findall(r"episode \d+ scored \(attempt", logs[host].read_text()))

        def busy(host: str) -> bool:  # an episode task received and not finished (prefetch 1)
            text = logs[host].read_text()
            received = re.findall(r"episode_execute\[[^\]]*\] received", text)
            finished = re.findall(r"episode_execute\[[^\]]*\] (?:succeeded|failed|raised)", text)
            return len(received) > len(finished)

        # both hosts take episodes; then host a dies in the middle of one
        deadline = time.monotonic() + 120
        while not (scored_on("a") >= 1 and scored_on("b") >= 1 and busy("a")):
            assert time.monotonic() < deadline, logs["a"].read_text()[-3000:]
            if episodes.count() == QUERIES and episodes.exclude(status="done").count() <= 3:
                pytest.fail("the submission nearly finished before both hosts took episodes")
            time.sleep(0.02)
        os.killpg(workers["a"].pid, signal.SIGKILL)
        workers["a"].wait(timeout=10)
        done_on_a, done_on_b = scored_on("a"), scored_on("b")

        deadline = time.monotonic() + 120
        while Submission.objects.get(pk=submission.pk).status != Submission.Status.FINISHED:
            assert time.monotonic() < deadline, (
                f"stuck: {list(episodes.values_list('pk', 'status'))}\n"
                + logs["b"].read_text()[-3000:]
            )
            episode_services.episodes_requeue(stale_s=STALE_S)  # the beat job's work
            time.sleep(0.5)
        submission.refresh_from_db()
        assert submission.status == "finished" and not submission.incomplete
        assert list(episodes.values_list("status", flat=True)) == ["done"] * QUERIES
        assert all(e.correct and e.safe for e in episodes)
        assert done_on_a >= 1 and scored_on("b") > done_on_b  # b went on after a died
        scored = Counter(
            int(m)
            for log in logs.values()
            for m in re.findall(r"episode (\d+) scored \(attempt", log.read_text())
        )
        assert scored == Counter({pk: 1 for pk in episodes.values_list("pk", flat=True)})
    finally:
        for process in workers.values():
            stop_worker(process)
        for process in (*forwards, oracle.process):
            process.terminate()
            process.wait(timeout=10)
        import redis

        redis.Redis.from_url(broker_url()).delete("unacked", "unacked_index")
