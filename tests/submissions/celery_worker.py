"""Start real Celery worker processes for integration tests (real Redis broker, the test's
database shared with the worker through ``DATABASE_URL``).

Isolation between test runs: every pytest process works on a Redis database of its own
(:func:`private_broker`, switched on for the whole session by ``tests/conftest.py``): its
queues, unacknowledged messages, results and control broadcasts (ping, inspect, revoke: kombu
prefixes its fan-out channels with the database number) are invisible to any other run, so
concurrent runs never take each other's tasks. A database is claimed with a key in database 0
and flushed when it is claimed and when it is released, so a killed run's messages never reach
the next run. Every worker started here dies with its run: it is stopped (its whole process
group) when its test ends, at session end and at interpreter exit, and it gets ``SIGKILL`` from
the kernel when the pytest process dies first (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
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
#: Redis databases never claimed: 0 is the site's default (a developer's own workers, the claim
#: keys) and 1 the shared API-cache test's (tests/api/test_throttle_shared.py).
RESERVED_DBS = frozenset({0, 1})
#: Key (in database 0) holding the claim of database ``{db}``: ``"<host>:<pid>"``.
CLAIM_KEY = "netarena-test-broker:{db}"
#: Seconds a claim lasts unless renewed (each :func:`broker_url` renews it); a claim of a dead
#: process on this host is taken over at once, one of another host after this.
CLAIM_TTL_S = 24 * 3600
#: Take over ``KEYS[1]`` only if it still holds ``ARGV[1]`` (atomic compare-and-set).
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""
#: Release ``KEYS[1]`` only if this process holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
#: The private broker of this process once claimed: ``(base URL, database)``.
_private: list[tuple[str, int]] = []
#: Workers started by :func:`start_worker` and not yet stopped.
_live: set[subprocess.Popen[bytes]] = set()


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _stale(owner: str) -> bool:
    """True if the claim ``owner`` belongs to a process of this host that no longer runs."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _redis(url: str, db: int) -> Any:
    """A client of database ``db`` of the server ``url`` (a URL with a database path) names."""
    import redis

    return redis.Redis.from_url(url.rsplit("/", 1)[0] + f"/{db}", socket_connect_timeout=2)


def claim_redis_db(url: str) -> int:
    """Claim a Redis database of the server ``url`` names for this process and flush it.

    Tries databases 2, 3, ... (not :data:`RESERVED_DBS`) up to the server's ``databases``;
    a claim whose owner process is gone (a killed run on this host) is taken over. Returns the
    database number; release it with :func:`release_redis_db`.

    Raises:
        RuntimeError: every database is claimed by a live run.
        redis.RedisError: the server does not answer.
    """
    claims = _redis(url, 0)
    count = int(claims.config_get("databases").get("databases", 16))
    me = _owner()
    for db in range(count):
        if db in RESERVED_DBS:
            continue
        key = CLAIM_KEY.format(db=db)
        won = claims.set(key, me, nx=True, ex=CLAIM_TTL_S)
        if not won:
            owner = claims.get(key)
            if owner is not None and _stale(owner.decode()):
                won = bool(claims.eval(_TAKE_OVER, 1, key, owner, me, CLAIM_TTL_S))
        if won:
            _redis(url, db).flushdb()  # whatever a killed run left behind
            return db
    raise RuntimeError(f"no free Redis database for a test run on {url} ({count} databases)")


def release_redis_db(url: str, db: int) -> None:
    """Flush database ``db`` of the server ``url`` names and give up this process's claim on
    it (nothing happens when it does not hold it or the server does not answer)."""
    with contextlib.suppress(Exception):
        claims = _redis(url, 0)
        if claims.get(CLAIM_KEY.format(db=db)) == _owner().encode():
            _redis(url, db).flushdb()
            claims.eval(_RELEASE, 1, CLAIM_KEY.format(db=db), _owner())


@contextlib.contextmanager
def claimed_redis_db(url: str) -> Iterator[int]:
    """:func:`claim_redis_db` for the ``with`` block, :func:`release_redis_db` after it."""
    db = claim_redis_db(url)
    try:
        yield db
    finally:
        release_redis_db(url, db)


def private_broker() -> str | None:
    """Switch this process to a Redis database of its own for Celery; return its URL.

    Claims a database (:func:`claim_redis_db`) of the broker the site is configured with, once
    per process, and points this process's Celery app, Django settings and environment
    (``CELERY_BROKER_URL``, ``CELERY_RESULT_BACKEND``: inherited by every worker and server
    the tests start) at it; released at :func:`private_broker_release` or interpreter exit.
    Returns ``None`` (nothing switched) when no Redis answers.
    """
    if _private:
        base, db = _private[0]
        return f"{base}/{db}"
    url = os.environ.get("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)
    if not url.startswith("redis://"):
        return None
    try:
        db = claim_redis_db(url)
    except Exception:  # noqa: BLE001 - no Redis: tests that need one skip or fail themselves
        return None
    base = url.rsplit("/", 1)[0]
    _private.append((base, db))
    atexit.register(private_broker_release)
    private = f"{base}/{db}"
    from config.celery import app

    app.conf.broker_url = private
    app.conf.result_backend = private
    settings.CELERY_BROKER_URL = private
    settings.CELERY_RESULT_BACKEND = private
    os.environ["CELERY_BROKER_URL"] = private
    os.environ["CELERY_RESULT_BACKEND"] = private
    return private


def private_broker_release() -> None:
    """Stop every worker still running, then flush and release the private database."""
    stop_all_workers()
    while _private:
        base, db = _private.pop()
        release_redis_db(f"{base}/{db}", db)


def database_url() -> str:
    """The test database as a URL a worker process can open."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] or "postgres"
    return f"postgres://{user}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def broker_url() -> str:
    """This run's private Redis broker (:func:`private_broker`); skip (fail under CI) when
    none answers. Renews the run's claim on its database."""
    url = private_broker() or os.environ.get("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        require(False, f"no Redis at {url} ({exc}); run scripts/services.sh start redis")
    if _private:
        with contextlib.suppress(Exception):
            _redis(url, 0).expire(CLAIM_KEY.format(db=_private[0][1]), CLAIM_TTL_S)
    return url


_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """``preexec_fn`` of a worker: SIGKILL when the thread that started it ends (the pytest
    process's main thread: start workers from it, never from a short-lived thread)."""
    parent = os.getppid()
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)


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
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl and getppid
        )
    _live.add(process)
    destination = f"{name}@{os.uname().nodename}"
    deadline = time.monotonic() + start_timeout_s
    while not _answers_ping(destination, full_env):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_worker(process, timeout_s=0)
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
    ``timeout_s`` seconds SIGKILL; either way SIGKILL to whatever is left of its process group
    (pool children, sandboxes). Safe to call twice and on a worker that already died."""
    _live.discard(process)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the group outlives its leader's pid
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def stop_all_workers() -> None:
    """Stop (SIGKILL, at once) every worker :func:`start_worker` started and nobody stopped."""
    for process in list(_live):
        stop_worker(process, timeout_s=0)


atexit.register(stop_all_workers)


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
