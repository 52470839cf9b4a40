"""End to end: real Redis, a real Celery worker process, real reference agents over HTTP, the
real MALT app in its sandbox, the database shared with the worker, and the leaderboard page
in headless Chromium.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import register_reference_agent, serve_reference_agent
from submissions.selectors import standings
from submissions.services.rounds import round_close, round_create
from tests.conftest import require, require_tool
from tests.submissions.celery_worker import running_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.slow]


@contextlib.contextmanager
def _celery_worker(tmp_path: Path, queues: str) -> Iterator[Path]:
    """A Celery worker process on the test database and the real broker, taking ``queues``;
    yields the oracle vault directory."""
    with running_worker(
        f"e2e-{os.getpid()}",
        queues=queues,
        log_path=tmp_path / "worker.log",
        env={"NETARENA_ORACLE_VAULT_DIR": str(tmp_path / "vault")},
        concurrency=2,
        start_timeout_s=120,
        stop_timeout_s=30,
    ):
        yield tmp_path / "vault"


@pytest.fixture
def worker(tmp_path):
    """A Celery worker for the MALT queue."""
    with _celery_worker(tmp_path, "control,malt") as vault:
        yield vault


def _wait_round(evaluation_round, tmp_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    subs = Submission.objects.filter(round=evaluation_round)
    while subs.exclude(status__in=["finished", "failed"]).exists():
        assert time.monotonic() < deadline, (
            "round did not finish: " + (tmp_path / "worker.log").read_text()[-3000:]
        )
        time.sleep(0.5)


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
        _wait_round(evaluation_round, tmp_path, 300)
        subs = Submission.objects.filter(round=evaluation_round)
        assert set(subs.values_list("status", flat=True)) == {"finished"}
        episodes = EpisodeRecord.objects.filter(submission__round=evaluation_round)
        assert episodes.count() == 16
        assert not episodes.exclude(status="done").exists()
        round_close(round_id=evaluation_round.pk)  # standings are published when it closes
        rows = {
            r.agent.name: r for r in standings(app_id="malt", round_number=evaluation_round.number)
        }
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


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.k8s
@pytest.mark.full_round
@pytest.mark.timeout(1500)
def test_three_app_round_with_healthy_controls_is_rejudged_exactly(tmp_path):
    """A round on all three apps (10 queries each, so route and k8s hold exactly one
    healthy control), the oracle served over ``openai-tools`` (every reply a tool call) and
    null over ``openai-chat``; the oracle passes every query including the controls, null gets
    no credit on them, ``HEALTHY`` is its own label on the board, and ``rejudge`` replays every
    oracle episode in fresh emulators with equal verdicts (null's one-step episodes add no
    replay path)."""
    apps = ("malt", "route", "k8s")
    with _celery_worker(tmp_path, "control," + ",".join(apps)) as vault:
        served = [
            serve_reference_agent(
                kind=kind, protocol=protocol, apps=apps, vault_dir=vault, log_dir=tmp_path
            )
            for kind, protocol in (("oracle", "openai-tools"), ("null", "openai-chat"))
        ]
        try:
            for agent in served:
                register_reference_agent(agent)
            evaluation_round = round_create(apps=list(apps), queries_per_app=10)
            _wait_round(evaluation_round, tmp_path, 1200)
            subs = Submission.objects.filter(round=evaluation_round)
            assert set(subs.values_list("status", flat=True)) == {"finished"}
            episodes = EpisodeRecord.objects.filter(submission__round=evaluation_round)
            assert episodes.count() == 60 and not episodes.exclude(status="done").exists()
            round_close(round_id=evaluation_round.pk)
            for app_id in apps:
                rows = {
                    r.agent.name: r
                    for r in standings(app_id=app_id, round_number=evaluation_round.number)
                }
                oracle, null = rows["reference-oracle"], rows["reference-null"]
                assert oracle.correctness.value == 1.0 and oracle.safety.value == 1.0, app_id
                assert null.correctness.value == 0.0, app_id
                if app_id != "malt":
                    assert oracle.labels["HEALTHY"].value == 1.0
                    assert null.labels["HEALTHY"].value == 0.0
            controls = episodes.filter(label="HEALTHY")
            assert controls.count() == 4  # one per app and agent in route and k8s
            oracle_submission = subs.get(agent__name="reference-oracle")
            replies = [
                t
                for e in episodes.filter(submission=oracle_submission)
                for t in e.transcript
                if t.get("role") == "assistant"
            ]
            assert replies and all("tool_call" in t for t in replies)
        finally:
            for agent in served:
                agent.process.terminate()
                agent.process.wait(timeout=10)
    replayed = io.StringIO()
    call_command("rejudge", submission=oracle_submission.pk, stdout=replayed)
    assert "30 reproduced, 0 different, 0 not replayable" in replayed.getvalue(), (
        replayed.getvalue()[-3000:]
    )
