"""/healthz, /readyz and /metrics against a real site process, a real Redis broker and real
Celery workers (the site gets a Redis database of its own, claimed for this run through
``tests.submissions.celery_worker.claimed_redis_db``, so workers of other runs on the same
Redis never answer its broadcasts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import require, require_root
from tests.submissions.celery_worker import broker_url, claimed_redis_db, running_worker

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def site_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment of a site on its own SQLite file and its own broker database."""
    base = broker_url().rsplit("/", 1)[0]
    with claimed_redis_db(base + "/0") as broker_db:
        yield _site_env(tmp_path_factory, f"{base}/{broker_db}")


def _site_env(tmp_path_factory: pytest.TempPathFactory, broker: str) -> dict[str, str]:
    db_path = tmp_path_factory.mktemp("site") / "db.sqlite3"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"sqlite:///{db_path}",
        CELERY_BROKER_URL=broker,
        CELERY_RESULT_BACKEND=broker,
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    return env


@pytest.fixture(scope="module")
def site(site_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running site (``manage.py runserver``) at the returned base URL."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("site-log") / "site.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT, env=site_env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/healthz", timeout=2)
            break
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("the site did not start")
            time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=20)


def test_healthz_answers_without_any_backend(site: str) -> None:
    response = httpx.get(site + "/healthz", timeout=10)
    assert response.status_code == 200
    assert response.text == "ok\n"


def test_readyz_is_503_naming_every_queue_without_a_worker(site: str) -> None:
    response = httpx.get(site + "/readyz", timeout=30)
    assert response.status_code == 503, response.text
    assert "no worker for queue(s): control, k8s, malt, route" in response.text
    assert "Database" in response.text and "OK" in response.text


@pytest.mark.root
def test_readyz_follows_the_workers(
    site: str, site_env: dict[str, str], tmp_path: Path
) -> None:
    require_root()  # the route worker's start-up check needs root (network namespaces)
    env = {k: site_env[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")}
    with running_worker(
        "readyz-control", queues="control,malt", log_path=tmp_path / "w1.log", env=env
    ):
        partial = httpx.get(site + "/readyz", timeout=30)
        assert partial.status_code == 503, partial.text
        assert "no worker for queue(s): k8s, route" in partial.text
        with running_worker(
            "readyz-apps", queues="route,k8s", log_path=tmp_path / "w2.log", env=env
        ):
            ready = httpx.get(site + "/readyz?format=json", timeout=30)
            assert ready.status_code == 200, ready.text
            assert all(v == "OK" for v in ready.json().values())
        after = httpx.get(site + "/readyz", timeout=30)
        assert after.status_code == 503, after.text


def test_metrics_exports_site_and_platform_families(site: str) -> None:
    response = httpx.get(site + "/metrics", timeout=30)
    assert response.status_code == 200
    text = response.text
    for family in (
        "django_http_requests_total_by_method_total",
        "netarena_queue_depth",
        "netarena_episodes_per_minute",
        "netarena_infrastructure_failures_total",
        "netarena_submissions",
    ):
        assert f"# TYPE {family}" in text, family
    assert 'netarena_queue_depth{queue="malt"} 0.0' in text
    assert 'netarena_submissions{status="queued"} 0.0' in text


def test_metrics_are_refused_outside_the_allowed_networks() -> None:
    from ops.views import metrics_allowed

    require(True, "")
    assert metrics_allowed("127.0.0.1") and metrics_allowed("10.1.2.3")
    assert not metrics_allowed("203.0.113.9") and not metrics_allowed("not-an-ip")
