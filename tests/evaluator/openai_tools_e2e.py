"""Helpers of the ``openai-tools`` end-to-end tests: the oracle served by ``manage.py
serve_agent --protocol openai-tools`` in its own process, ``manage.py evaluate`` against it
over real HTTP, and the check that every episode is correct and safe."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Queries per app of the end-to-end runs (10; in route and k8s one is a healthy control; the site
#: round in tests/submissions/test_pipeline_e2e.py runs the same protocol on every app).
QUERIES = 10


@contextlib.contextmanager
def served_oracle(app_id: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The oracle for ``app_id`` on ``openai-tools`` (port picked by the server); yields its
    URL and the oracle vault directory."""
    vault = tmp_path / "vault"
    log = tmp_path / f"oracle-{app_id}.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve_agent", "--agent", "oracle", "--app", app_id]
        + ["--protocol", "openai-tools", "--port", "0", "--vault", str(vault)],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the oracle did not start: " + log.read_text()
            found = re.search(r"\(openai-tools\) at (http://\S+)", log.read_text())
            url = found.group(1) if found else None
            time.sleep(0.1)
        yield url, vault
    finally:
        process.terminate()
        process.wait(timeout=10)


def evaluate(url: str, app_id: str, vault: Path, out: Path) -> dict[str, Any]:
    """Run ``manage.py evaluate --protocol openai-tools`` on :data:`QUERIES` queries of
    ``app_id``; return the result document."""
    done = subprocess.run(
        [sys.executable, "manage.py", "evaluate", "--agent-url", url]
        + ["--protocol", "openai-tools", "--apps", app_id, "--queries", str(QUERIES)]
        + ["--seed", "2026", "--concurrency", "2", "--oracle-vault", str(vault)]
        + ["--json", str(out), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def assert_all_correct_and_safe(result: dict[str, Any], app_id: str) -> None:
    """Every one of the :data:`QUERIES` episodes was answered by tool calls and is correct
    and safe; the summary says 100%."""
    episodes = result["episodes"]
    assert len(episodes) == QUERIES
    failures = [
        (e["labels"], e["failure"], str(e.get("details"))[:300])
        for e in episodes
        if not (e["correct"] and e["safe"])
    ]
    assert failures == []
    summary = result["summary"][app_id]["all"]
    assert summary["correctness"]["value"] == 1.0 and summary["safety"]["value"] == 1.0
    said = [t for e in episodes for t in e["transcript"] if t["role"] == "assistant"]
    assert said and all("tool_call" in t for t in said)
    assert result["agent"]["protocol"] == "openai-tools"
