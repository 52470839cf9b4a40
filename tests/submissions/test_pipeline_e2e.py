"""End to end: real Redis, a real Celery worker process, real reference agents over HTTP, the
real MALT app in its sandbox, the database shared with the worker, and the leaderboard page
in headless Chromium.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import register_reference_agent, serve_reference_agent
from submissions.selectors import standings
from submissions.services import round_create
from tests.conftest import require, require_tool

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] or "postgres"
    return f"postgres://{user}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def _broker_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        require(False, f"no Redis at {url} ({exc}); run scripts/services.sh start redis")
    return url


@pytest.fixture
def worker(tmp_path):
    """A Celery worker process on the test database and the real broker."""
    broker = _broker_url()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=_database_url(),
        CELERY_BROKER_URL=broker,
        CELERY_RESULT_BACKEND=broker,
        NETARENA_ORACLE_VAULT_DIR=str(tmp_path / "vault"),
    )
    # Queues are named per test run so that a stray worker of another run cannot take tasks.
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "celery"),
            "-A",
            "config",
            "worker",
            "-Q",
            "control,malt",
            "--concurrency",
            "2",
            "--loglevel",
            "INFO",
            "-n",
            f"e2e-{os.getpid()}@%h",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    from config.celery import app

    deadline = time.monotonic() + 60
    while not app.control.ping(
        timeout=1.0, destination=[f"e2e-{os.getpid()}@{os.uname().nodename}"]
    ):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(
                "celery worker did not start:\n" + (tmp_path / "worker.log").read_text()[-3000:]
            )
    yield tmp_path / "vault"
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def _chromium_screenshot(url: str, out: Path) -> str:
    """Load ``url`` in headless Chromium via Playwright; return the page text."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=require_tool("chromium"),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(url)
        page.wait_for_selector("#ci-malt .main-svg", timeout=15_000)
        page.wait_for_selector("#spider-malt .main-svg", timeout=15_000)
        page.screenshot(path=str(out), full_page=True)
        text = page.inner_text("body")
        browser.close()
    return text


def test_round_through_celery_redis_and_http_agents(worker, tmp_path, live_server):
    oracle = serve_reference_agent(
        kind="oracle", protocol="http-json", apps=("malt",), vault_dir=worker, log_dir=tmp_path
    )
    null = serve_reference_agent(
        kind="null", protocol="openai-chat", apps=("malt",), vault_dir=worker, log_dir=tmp_path
    )
    try:
        register_reference_agent(oracle)
        register_reference_agent(null)
        evaluation_round = round_create(apps=["malt"], queries_per_app=8)
        deadline = time.monotonic() + 300
        subs = Submission.objects.filter(round=evaluation_round)
        while subs.exclude(status__in=["finished", "failed"]).exists():
            assert time.monotonic() < deadline, (
                "round did not finish: " + (tmp_path / "worker.log").read_text()[-3000:]
            )
            time.sleep(0.5)
        assert set(subs.values_list("status", flat=True)) == {"finished"}
        episodes = EpisodeRecord.objects.filter(submission__round=evaluation_round)
        assert episodes.count() == 16
        assert not episodes.exclude(status="done").exists()
        rows = {r.agent.name: r for r in standings(app_id="malt")}
        assert rows["reference-oracle"].correctness.value == 1.0
        assert rows["reference-oracle"].safety.value == 1.0
        assert rows["reference-null"].correctness.value == 0.0
        assert rows["reference-oracle"].rank == 1
        # each episode has a transcript and the oracle's vault is empty again
        assert all(e.transcript for e in episodes)
        assert list(Path(worker).glob("*.json")) == []
        # every verdict of the round is reproduced by replaying the stored replies
        replayed = io.StringIO()
        call_command("rejudge", round=evaluation_round.number, stdout=replayed)
        assert "16 reproduced, 0 different, 0 not replayable" in replayed.getvalue()

        page = httpx.get(live_server.url + "/", timeout=30)
        assert page.status_code == 200
        assert "reference-oracle" in page.text and "100.0" in page.text
        plotly_js = httpx.get(live_server.url + "/static/vendor/plotly/plotly.min.js", timeout=30)
        assert plotly_js.status_code == 200 and len(plotly_js.content) > 1_000_000

        require(shutil.which("chromium") is not None, "chromium is not installed")
        shot = tmp_path / "leaderboard.png"
        text = _chromium_screenshot(live_server.url + "/", shot)
        assert "reference-oracle" in text
        assert shot.stat().st_size > 10_000
        keep = os.environ.get("NETARENA_SCREENSHOT_DIR")
        if keep:
            shutil.copy(shot, Path(keep) / "leaderboard.png")
    finally:
        for served in (oracle, null):
            served.process.terminate()
            served.process.wait(timeout=10)
