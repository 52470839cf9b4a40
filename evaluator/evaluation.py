"""Evaluate one agent on freshly generated queries of one or more apps (no Django).

Used by the ``evaluate`` CLI; the site's Celery pipeline runs the same ``run_episode`` one
episode per task instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from evaluator.agents.base import AgentClient
from evaluator.app import App
from evaluator.oracle_vault import OracleVault
from evaluator.prompting import DEFAULT_PROMPT_TYPE, with_prompt_type
from evaluator.registry import get_app
from evaluator.report import FORMAT_VERSION, summarize
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.types import JSON, EpisodeResult, Query
from evaluator.variants import (
    VariantPack,
    generate_batch,
    held_out_packs,
    held_out_share,
    packs_commitment,
    public_pack,
)


def run_query(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    trial: int = 0,
    vault: OracleVault | None = None,
    max_steps: int | None = None,
) -> EpisodeResult:
    """Run one episode of ``query`` as :func:`evaluate_agent` runs each of its jobs: a fresh
    episode token, the query deposited in ``vault`` (when given) for the episode's duration,
    :func:`~evaluator.runner.run_episode_guarded` (emulator retries; never raises
    ``EmulatorError``), and ``trial`` recorded on the result.

    Callers that drive a batch one query at a time (the AgentBeats green agent,
    ``evaluator.green``) use it so that their verdicts are the ``evaluate`` command's.
    """
    episode_id = new_episode_id()
    deposit = vault.deposit(query, episode_id) if vault is not None else contextlib.nullcontext()
    with deposit:
        result = run_episode_guarded(app, query, client, max_steps=max_steps, episode_id=episode_id)
    return dataclasses.replace(result, trial=trial)


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
    trials: int = 1,
    on_result: Callable[[EpisodeResult], None] | None = None,
    variant_packs: Sequence[VariantPack] | None = None,
    share: float | None = None,
    prompt_type: str = DEFAULT_PROMPT_TYPE,
) -> JSON:
    """Generate ``queries_per_app`` queries per app and run each ``trials`` times with
    ``client`` (``EpisodeResult.trial`` numbers the repetitions; the summary then carries
    pass^k, see :func:`evaluator.report.trial_summary`).

    With ``vault``, each episode's query is deposited in it for the episode's duration (for a
    locally served oracle reference agent).

    Queries are drawn by :func:`evaluator.variants.generate_batch`: ``variant_packs`` (default:
    the packs of ``NETARENA_VARIANT_DIRS``) with ``share`` of the batch held out (default
    ``NETARENA_HELD_OUT_SHARE``); ``variant_packs=[pack], share=1.0`` draws every query from
    one pack (``evaluate --variant-pack DIR``). The result's ``run.packs`` names every pack the
    batch could draw from, with its content hash.

    ``prompt_type`` is NetArena's prompt type the tasks are sent with
    (:mod:`evaluator.prompting`); it is recorded in ``run`` and in every episode.

    Returns the result document (see :mod:`evaluator.report`); infrastructure failures are
    listed among the episodes (``infrastructure`` set, ``failure == "infrastructure"``) and
    left out of the summary.

    Raises:
        UnknownAppError: an app id is not registered or cannot be imported.
        ValueError: bad counts or levels (from the apps' ``generate``), ``trials < 1``, an
            unknown prompt type.
    """
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    sender = with_prompt_type(client, prompt_type)
    started_at = datetime.now(UTC).isoformat()
    apps = [get_app(app_id) for app_id in app_ids]
    chosen_share = held_out_share() if share is None else share
    packs_of: dict[str, list[VariantPack]] = {
        app.app_id: (
            held_out_packs(app.app_id)
            if variant_packs is None
            else [p for p in variant_packs if p.app_id == app.app_id]
        )
        for app in apps
    }
    jobs = [
        (app, query, trial)
        for app in apps
        for query in generate_batch(
            app,
            queries_per_app,
            seed,
            level,
            packs=packs_of[app.app_id],
            share=chosen_share,
        )
        for trial in range(trials)
    ]
    drawn_from = [
        public_pack(app) for app in apps if chosen_share < 1.0 or not packs_of[app.app_id]
    ]
    drawn_from += [p for app in apps for p in packs_of[app.app_id] if chosen_share > 0.0]
    results: list[EpisodeResult] = []
    t0 = time.perf_counter()

    def work(job: tuple[App, Query, int]) -> EpisodeResult:
        app, query, trial = job
        result = run_query(app, query, sender, trial=trial, vault=vault, max_steps=max_steps)
        result.prompt_type = prompt_type
        return result

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for result in pool.map(work, jobs):
            results.append(result)
            if on_result is not None:
                on_result(result)
    scored = [r for r in results if r.scored]
    return {
        "format_version": FORMAT_VERSION,
        "agent": client.describe(),
        "apps": [app.describe() for app in apps],
        "run": {
            "seed": seed,
            "queries_per_app": queries_per_app,
            "trials": trials,
            "level": level,
            "prompt_type": prompt_type,
            "started_at": started_at,
            "finished_at": datetime.now(UTC).isoformat(),
            "wall_s": time.perf_counter() - t0,
            "infrastructure_failures": len(results) - len(scored),
            "held_out_share": chosen_share,
            "packs": packs_commitment(drawn_from),
        },
        "episodes": [r.to_dict() for r in results],
        "summary": summarize(scored),
    }
