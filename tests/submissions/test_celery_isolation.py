"""Test runs never share Celery tasks (``tests.submissions.celery_worker``): each run sends and
consumes on a Redis database of its own, a killed run's database is taken over and flushed, and
worker processes die with the run that started them. Real Redis; no Celery worker is started
(the helpers' process handling is checked on plain processes, which is what it works on)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.submissions import celery_worker
from tests.submissions.celery_worker import (
    CLAIM_KEY,
    RESERVED_DBS,
    broker_url,
    claimed_redis_db,
    stop_worker,
)

pytestmark = [pytest.mark.integration]


def _alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_run_sends_to_its_own_database_and_takes_over_a_killed_runs() -> None:
    from config.celery import app

    url = broker_url()
    base, db = url.rsplit("/", 1)[0], int(url.rsplit("/", 1)[1])
    assert db not in RESERVED_DBS
    assert app.conf.broker_url == url == os.environ["CELERY_BROKER_URL"]
    claims = celery_worker._redis(url, 0)
    assert claims.get(CLAIM_KEY.format(db=db)) == f"{socket.gethostname()}:{os.getpid()}".encode()
    with claimed_redis_db(url) as other:
        assert other != db and other not in RESERVED_DBS
        app.send_task("submissions.episode_execute", args=(1,), queue="malt")
        assert celery_worker._redis(url, db).llen("malt") == 1
        assert celery_worker._redis(url, other).llen("malt") == 0  # another run's view
        # the other run is killed: its claim is stale and its leftovers must not survive
        key = CLAIM_KEY.format(db=other)
        claims.set(key, f"{socket.gethostname()}:{_dead_pid()}")
        celery_worker._redis(url, other).lpush("malt", "a killed run's task")
        everything_else = frozenset(range(64)) - {other}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(celery_worker, "RESERVED_DBS", everything_else)
            assert celery_worker.claim_redis_db(base + "/0") == other
        assert celery_worker._redis(url, other).llen("malt") == 0
    assert claims.get(key) is None  # released
    celery_worker._redis(url, db).delete("malt", "_kombu.binding.malt")


def test_workers_die_with_the_run_and_their_whole_process_group() -> None:
    # a run (the middle process) starts a "worker" with the helper's preexec_fn, then is killed
    run = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         "from tests.submissions.celery_worker import _die_with_parent\n"
         "p = subprocess.Popen(['sleep', '30'], preexec_fn=_die_with_parent)\n"
         "print(p.pid, flush=True)\n"
         "time.sleep(30)\n"],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    assert run.stdout is not None
    orphan = int(run.stdout.readline())
    run.kill()
    run.wait()
    deadline = time.monotonic() + 5
    while _alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(orphan), "a worker outlived the run that started it"
    # stop_worker ends the whole group, also children that ignore SIGTERM
    group = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 30 & echo $!; wait"],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert group.stdout is not None
    child = int(group.stdout.readline())
    stop_worker(group, timeout_s=0.2)
    time.sleep(0.1)
    assert group.poll() is not None and not _alive(child)
