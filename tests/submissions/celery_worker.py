"""Start real Celery worker processes for integration tests (real Redis broker, the test's
database shared with the worker through ``DATABASE_URL``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    name: str,
    *,
    queues: str,
    log_path: Path,
    env: dict[str, str],
    concurrency: int = 1,
    pool: str | None = None,
    boot: str | None = None,
    start_timeout_s: float = 60.0,
    netns: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``celery worker`` named ``name@host`` in its own process group and wait until it
    answers a ping (at most ``start_timeout_s`` seconds; fails the test with the worker's log
    otherwise).

    ``queues`` is Celery's comma-separated ``-Q`` list; ``env`` is added to this process's
    environment after the test database (``DATABASE_URL``) and the broker; the worker's output
    is appended to ``log_path``. ``pool`` is Celery's ``-P`` (``"solo"``: tasks run in the
    worker process itself); default Celery's own. ``boot``, when given, is Python source run as
    the worker program (``python -c boot <celery arguments>``) instead of the ``celery``
    command: it must end by calling Celery's command line with ``sys.argv[1:]``, and lets a
    test patch the worker process (e.g. through ``celery.signals.worker_init``) before it runs
    a task. ``netns``, when given, names the network namespace (``ip netns``) the worker runs
    in, i.e. another "host" that reaches the broker and database through the URLs in ``env``.
    """
    full_env = dict(os.environ)
    broker = broker_url()
    full_env.update(
        DATABASE_URL=database_url(), CELERY_BROKER_URL=broker, CELERY_RESULT_BACKEND=broker
    )
    full_env.update(env)
    if boot is None:
        program = [str(Path(sys.executable).parent / "celery")]  # the running interpreter's venv
    else:
        program = [sys.executable, "-c", boot]
    if netns is not None:
        # nsenter, not `ip netns exec`: that one remounts /sys and loses the cgroup mount
        program = ["nsenter", f"--net=/run/netns/{netns}", *program]
    pool_args = [] if pool is None else ["-P", pool]
    with log_path.open("ab") as log:  # the worker keeps its own copy of the descriptor
        process = subprocess.Popen(
            [
                *program,
                "-A",
                "config",
                "worker",
                "-Q",
                queues,
                *pool_args,
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
    destination = f"{name}@{os.uname().nodename}"
    deadline = time.monotonic() + start_timeout_s
    while not _answers_ping(destination, full_env):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"celery worker {name} did not start:\n" + log_path.read_text()[-3000:])
    return process


def _answers_ping(destination: str, env: dict[str, str]) -> bool:
    """True if worker ``destination`` answers a ping on the broker ``env`` names.

    In this process when that is the site's broker; otherwise through ``celery inspect ping``
    in a child with ``env`` (Celery's CELERY_BROKER_URL variable wins over any broker given to
    an app or a connection here, so another broker cannot be reached from this process).
    """
    if env["CELERY_BROKER_URL"] == broker_url():
        from config.celery import app

        return bool(app.control.ping(timeout=1.0, destination=[destination]))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "celery"), "-A", "config", "inspect", "ping",
         "-d", destination, "--timeout", "1"],
        cwd=ROOT, env=env, capture_output=True, timeout=60, check=False,
    )
    return result.returncode == 0


def stop_worker(process: subprocess.Popen[bytes], *, timeout_s: float = 20.0) -> None:
    """Stop a worker started by :func:`start_worker`: SIGTERM (a warm shutdown), then after
    ``timeout_s`` seconds SIGKILL to its whole process group."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait(timeout=10)


@contextlib.contextmanager
def running_worker(
    name: str, *, stop_timeout_s: float = 20.0, **options: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """:func:`start_worker` (``options`` are its keyword arguments) for the ``with`` block,
    :func:`stop_worker` after it, also when the block raises."""
    process = start_worker(name, **options)
    try:
        yield process
    finally:
        stop_worker(process, timeout_s=stop_timeout_s)
