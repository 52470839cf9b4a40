"""Steps the browser tests share."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: The repository root (where ``manage.py`` lives).
ROOT = Path(__file__).resolve().parents[2]


def log_in(page: Page, username: str, password: str) -> None:
    """Log ``username`` in through the site's login form, as a visitor would."""
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def sign_up(page: Page, username: str, password: str) -> None:
    """Create an account through the site's sign-up form, from the board's "Sign up" link (the
    site then lands on My team, logged in)."""
    page.goto("/")
    page.get_by_role("link", name="Sign up").click()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.org")
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_label("Password confirmation").fill(password)
    page.get_by_role("button", name="Create account").click()


@contextlib.contextmanager
def served_agent(*options: str, log_path: Path, start_timeout_s: float = 60.0) -> Iterator[int]:
    """Run ``manage.py serve_agent <options> --port <free port>`` (a reference agent, e.g.
    ``"--agent", "scripted", "--app", "malt", "--protocol", "openai-tools"``) in its own process
    for the ``with`` block; yields the port once ``GET /healthz`` answers.

    Output goes to ``log_path``. Fails the test when the server exits or does not answer
    within ``start_timeout_s`` seconds; the server is terminated after the block.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    argv = [sys.executable, "manage.py", "serve_agent", *options, "--port", str(port)]
    with log_path.open("wb") as log:  # the server keeps its own copy of the descriptor
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                pytest.fail(f"serve_agent exited with {process.returncode}: {log_path.read_text()}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"serve_agent did not answer on port {port} within "
                        f"{start_timeout_s:g} s: {log_path.read_text()}"
                    )
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def private_queue_sender(app: Any, queues: dict[str, str]) -> Callable[..., Any]:
    """``app.send_task`` (a Celery app's) sending to the test's own queues: a task meant for a
    queue named in ``queues`` (e.g. ``"malt"``) goes to the queue it maps to instead.

    Set it on the app of the test process (``monkeypatch.setattr(app, "send_task", ...)``) and
    of the worker (:data:`PRIVATE_QUEUES_WORKER_BOOT`), and let the worker consume the mapped
    queues: then workers of other test runs sharing the broker never take this test's tasks,
    nor this worker theirs.
    """
    send = app.send_task

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        queue = options.get("queue")
        if isinstance(queue, str) and queue in queues:
            options["queue"] = queues[queue]
        return send(name, args, kwargs, **options)

    return send_task


#: ``boot`` of :func:`tests.submissions.celery_worker.start_worker` for a worker whose tasks
#: send to the private queues that the ``NETARENA_TEST_QUEUES`` environment variable maps
#: (JSON, as :func:`private_queue_sender` takes them).
PRIVATE_QUEUES_WORKER_BOOT = """
import json
import os
import sys

from config.celery import app
from tests.browser.helpers import private_queue_sender

app.send_task = private_queue_sender(app, json.loads(os.environ["NETARENA_TEST_QUEUES"]))

from celery.bin.celery import main
sys.argv = ["celery", *sys.argv[1:]]
main()
"""
