"""The serve entry points as a worker would start them: separate processes, real sockets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluator.agents import make_client
from tests.evaluator.conftest import LOOPBACK

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable
URL_RE = re.compile(r"at (http://127\.0\.0\.1:\d+)")


def start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def announced_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until the server has bound its socket
    match = URL_RE.search(line)
    if not match:
        process.kill()
        stderr = process.stderr.read() if process.stderr else ""
        pytest.fail(f"no URL announced: {line!r}; stderr: {stderr}")
    return match.group(1)


SERVE_HEURISTIC = [
    "--agent",
    "heuristic",
    "--app",
    "evaluator.testing:ToyApp",
    "--protocol",
    "http-json",
    "--port",
    "0",
]


def test_python_module_entry_point_serves_an_agent(processes) -> None:
    process = start(["-m", "evaluator.reference", *SERVE_HEURISTIC])
    processes.append(process)
    url = announced_url(process)
    client = make_client("http-json", url, allowed_networks=LOOPBACK, timeout_s=10)
    chat = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "The secret word is wren."},
    ]
    reply = client.complete(chat, episode_id="tok-12345678")
    assert json.loads(reply.text) == {"action": "say", "word": "wren"}


def test_manage_py_command_serves_without_a_database(processes, tmp_path) -> None:
    missing_db = f"sqlite:///{tmp_path}/no/such/dir/db.sqlite3"
    process = start(
        ["manage.py", "serve_agent", *SERVE_HEURISTIC], env={"DATABASE_URL": missing_db}
    )
    processes.append(process)
    url = announced_url(process)
    client = make_client("http-json", url + "/act", allowed_networks=LOOPBACK, timeout_s=10)
    reply = client.complete([{"role": "user", "content": "task"}], episode_id="tok-12345678")
    assert json.loads(reply.text) == {"action": "look"}
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("entry", [["-m", "evaluator.reference"], ["manage.py", "serve_agent"]])
def test_entry_points_refuse_bad_configurations_clearly(entry: list[str]) -> None:
    args = [
        *entry,
        "--agent",
        "heuristic",
        "--app",
        "evaluator.testing:ToyCodeApp",
        "--protocol",
        "openai-chat",
        "--port",
        "0",
    ]
    result = subprocess.run([PYTHON, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "no heuristic operator" in result.stderr


def test_scripted_model_entry_point(processes, tmp_path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"model": "m", "default": "pong"}))
    process = start(
        ["-m", "evaluator.reference.scripted_llm", "--rules", str(rules), "--port", "0"]
    )
    processes.append(process)
    url = announced_url(process)
    client = make_client("openai-chat", url, allowed_networks=LOOPBACK, timeout_s=10)
    reply = client.complete([{"role": "user", "content": "ping"}], episode_id="t-12345678")
    assert reply.text == "pong"
