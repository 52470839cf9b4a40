"""``manage.py evaluate`` against reference agents served over real HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(kind: str, protocol: str, vault: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "serve_agent",
            "--agent",
            kind,
            "--app",
            "malt",
            "--protocol",
            protocol,
            "--port",
            str(port),
            "--vault",
            str(vault),
        ],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, log.read_text()
        try:
            httpx.get(url, timeout=1)
            return process, url
        except httpx.TransportError:
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)


def _evaluate(url: str, protocol: str, out: Path, queries: int, vault: Path | None) -> dict:
    command = [
        sys.executable,
        "manage.py",
        "evaluate",
        "--agent-url",
        url,
        "--protocol",
        protocol,
        "--apps",
        "malt",
        "--queries",
        str(queries),
        "--seed",
        "2026",
        "--json",
        str(out),
        "--concurrency",
        "2",
        "--quiet",
    ]
    if vault is not None:
        command += ["--oracle-vault", str(vault)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "correctness" in done.stdout  # the summary table is printed
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("kind", "protocol", "queries"), [("oracle", "http-json", 45), ("null", "openai-chat", 15)]
)
def test_reference_agents_score_as_expected(tmp_path, kind, protocol, queries):
    vault = tmp_path / "vault"
    server, url = _serve(kind, protocol, vault, tmp_path / "agent.log")
    try:
        result = _evaluate(
            url, protocol, tmp_path / "out.json", queries, vault if kind == "oracle" else None
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    episodes = result["episodes"]
    assert len(episodes) == queries
    assert {e["level"] for e in episodes} == {1, 2, 3}
    for key in (
        "app_id",
        "query_id",
        "seed",
        "level",
        "labels",
        "correct",
        "safe",
        "latency_s",
        "steps",
        "failure",
        "transcript",
    ):
        assert key in episodes[0]
    summary = result["summary"]["malt"]["all"]
    if kind == "oracle":
        failures = [
            (e["labels"], e["failure"], e["details"])
            for e in episodes
            if not (e["correct"] and e["safe"])
        ]
        assert failures == []
        assert summary["correctness"]["value"] == 1.0 and summary["safety"]["value"] == 1.0
    else:
        assert summary["correctness"]["value"] == 0.0
        assert all(e["failure"] for e in episodes)


def test_evaluate_refuses_bad_options(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "evaluate",
            "--agent-url",
            "http://127.0.0.1:9",
            "--protocol",
            "http-json",
            "--apps",
            "nosuchapp",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "unknown app" in done.stdout + done.stderr


def test_unreachable_agent_fails_every_episode_without_crashing(tmp_path):
    out = tmp_path / "out.json"
    result = _evaluate(f"http://127.0.0.1:{_free_port()}", "http-json", out, 3, None)
    assert [e["failure"] for e in result["episodes"]] == ["agent:transport"] * 3
