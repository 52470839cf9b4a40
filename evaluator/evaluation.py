"""Evaluate one agent on freshly generated queries of one or more apps (no Django).

Used by the ``evaluate`` CLI; the site's Celery pipeline runs the same ``run_episode`` one
episode per task instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from evaluator.agents.base import AgentClient
from evaluator.app import App, EmulatorError
from evaluator.oracle_vault import OracleVault
from evaluator.registry import get_app
from evaluator.report import FORMAT_VERSION, summarize
from evaluator.runner import EpisodeResult, run_episode
from evaluator.types import JSON, Query

logger = logging.getLogger(__name__)

#: An episode whose emulator failed is tried this many times before it is recorded as an
#: infrastructure failure (excluded from the agent's statistics).
INFRASTRUCTURE_ATTEMPTS = 2


def infrastructure_failure(query: Query, message: str) -> EpisodeResult:
    """Record for an episode the evaluator itself could not run (not the agent's fault)."""
    return EpisodeResult.for_query(
        query,
        correct=False,
        safe=False,
        latency_s=0.0,
        wall_s=0.0,
        agent_s=0.0,
        steps=0,
        failure="infrastructure",
        details={"error": message[:2000]},
    )


def run_episode_guarded(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    vault: OracleVault | None = None,
    max_steps: int | None = None,
) -> EpisodeResult:
    """``run_episode`` with retries on emulator failures; never raises ``EmulatorError``."""
    last_error = ""
    for attempt in range(1, INFRASTRUCTURE_ATTEMPTS + 1):
        try:
            return run_episode(app, query, client, vault=vault, max_steps=max_steps)
        except EmulatorError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            logger.warning("episode %s attempt %d: %s", query.query_id, attempt, last_error)
    return infrastructure_failure(query, last_error)


def evaluate_agent(
    client: AgentClient,
    app_ids: Sequence[str],
    *,
    queries_per_app: int,
    seed: int,
    level: int | None = None,
    vault: OracleVault | None = None,
    concurrency: int = 1,
    max_steps: int | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> JSON:
    """Generate ``queries_per_app`` queries per app and run them with ``client``.

    Returns the result document (see :mod:`evaluator.report`); infrastructure failures are
    listed among the episodes with ``failure == "infrastructure"`` and left out of the summary.

    Raises:
        UnknownAppError: an app id is not registered or cannot be imported.
        ValueError: bad counts or levels (from the apps' ``generate``).
    """
    started_at = datetime.now(UTC).isoformat()
    apps = [get_app(app_id) for app_id in app_ids]
    jobs = [
        (app, query) for app in apps for query in app.generate(queries_per_app, seed, level=level)
    ]
    results: list[EpisodeResult] = []
    t0 = time.perf_counter()

    def work(job: tuple[App, Query]) -> EpisodeResult:
        app, query = job
        return run_episode_guarded(app, query, client, vault=vault, max_steps=max_steps)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for result in pool.map(work, jobs):
            results.append(result)
            if on_result is not None:
                on_result(result)
    scored = [r for r in results if r.failure != "infrastructure"]
    return {
        "format_version": FORMAT_VERSION,
        "agent": client.describe(),
        "apps": [app.describe() for app in apps],
        "run": {
            "seed": seed,
            "queries_per_app": queries_per_app,
            "level": level,
            "started_at": started_at,
            "finished_at": datetime.now(UTC).isoformat(),
            "wall_s": time.perf_counter() - t0,
            "infrastructure_failures": len(results) - len(scored),
        },
        "episodes": [r.to_dict() for r in results],
        "summary": summarize(scored),
    }
