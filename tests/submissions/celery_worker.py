"""Start real Celery worker processes for integration tests (real Redis broker, the test's
database shared with the worker through ``DATABASE_URL``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database as a URL a worker process can open."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] or "postgres"
    return f"postgres://{user}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def broker_url() -> str:
    """The Redis broker the site uses; skip (fail under CI) when none answers."""
    url = os.environ.get("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        require(False, f"no Redis at {url} ({exc}); run scripts/services.sh start redis")
    return url


def start_worker(
    name: str, *, queues: str, log_path: Path, env: dict[str, str], concurrency: int = 1
) -> subprocess.Popen[bytes]:
    """Start ``celery worker`` named ``name@host`` in its own process group and wait until it
    answers a ping (at most 60 s; fails the test with the worker's log otherwise)."""
    full_env = dict(os.environ)
    broker = broker_url()
    full_env.update(
        DATABASE_URL=database_url(), CELERY_BROKER_URL=broker, CELERY_RESULT_BACKEND=broker
    )
    full_env.update(env)
    log = log_path.open("ab")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "celery"),  # the running interpreter's venv
            "-A",
            "config",
            "worker",
            "-Q",
            queues,
            "--concurrency",
            str(concurrency),
            "--prefetch-multiplier",
            "1",
            "--loglevel",
            "INFO",
            "-n",
            f"{name}@%h",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    from config.celery import app

    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=1.0, destination=[f"{name}@{os.uname().nodename}"]):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"celery worker {name} did not start:\n" + log_path.read_text()[-3000:])
    return process


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    """Stop a worker started by :func:`start_worker` (its whole process group)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait(timeout=10)
