"""One assessment of a purple agent, query by query, and the records streamed about it.

The queries are the ``evaluate`` command's: level ``L``'s batch is
``generate_batch(app, num_queries, seed + L - 1, L)`` (the same held-out pack draw), and every
episode runs through :func:`evaluator.evaluation.run_query`, the function ``evaluate`` runs
its jobs with. An assessment at one level therefore gives the verdicts of::

    python -m evaluator evaluate --apps APP --level L --seed SEED+L-1 --queries N --trials K \\
        --protocol a2a --agent-url URL

Nothing here speaks A2A; :mod:`evaluator.green.server` streams the records.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.app import App
from evaluator.evaluation import run_query
from evaluator.green.counts import netarena_type, plan_netarena_level
from evaluator.green.netarena import agent_info, netarena_fields, netarena_summary
from evaluator.green.request import SUPPORTED_PROMPT_TYPE, AssessmentConfig, AssessmentRequest
from evaluator.oracle_vault import OracleVault
from evaluator.registry import get_app
from evaluator.report import summarize
from evaluator.sampling import HEALTHY_LABEL
from evaluator.stats import wilson_interval
from evaluator.types import JSON, EpisodeResult, Query
from evaluator.variants import generate_batch

#: ``AgentError`` category of a call refused because the assessment was canceled.
CANCELED = "canceled"


def plan_queries(app: App, config: AssessmentConfig) -> list[Query]:
    """The queries of an assessment, level by level in the requested order, then sliced by
    ``start_index``/``end_index`` (Python slice semantics). Per level: for an app with a
    NetArena profile (:meth:`evaluator.app.App.netarena_profile`) NetArena's count,
    ``num_queries`` of each NetArena query type
    (:func:`evaluator.green.counts.plan_netarena_level`), or with ``queries_per_level`` the
    first that many of the level's batch; for any other app the first ``num_queries`` of the
    level's batch.

    Raises:
        ValueError, VariantPackError: as :func:`evaluator.variants.generate_batch`, or a
            batch without enough queries of a NetArena type.
    """
    netarena = app.netarena_profile() is not None
    queries: list[Query] = []
    for level in config.levels:
        seed = config.level_seed(level)
        if config.queries_per_level is not None:
            queries += generate_batch(app, config.queries_per_level, seed, level)
        elif netarena:
            queries += plan_netarena_level(app, level, config.num_queries, seed)
        else:
            queries += generate_batch(app, config.num_queries, seed, level)
    return queries[config.start_index : config.end_index]


class StoppableClient(AgentClient):
    """An agent client that refuses every call once ``stop`` is set, so that an episode in
    progress when an assessment is canceled ends at its next agent call and its emulator is
    torn down by the episode's own ``close``.

    Raises (from :meth:`complete`):
        AgentError: category :data:`CANCELED` after ``stop``; otherwise what ``inner`` raises.
    """

    def __init__(self, inner: AgentClient, stop: threading.Event) -> None:
        self.inner = inner
        self.stop = stop

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """The inner client's reply, unless the assessment was canceled."""
        if self.stop.is_set():
            raise AgentError(CANCELED, "the assessment was canceled")
        return self.inner.complete(messages, episode_id=episode_id)

    def for_app(self, app: App) -> AgentClient:
        """This wrapper around the inner client's client for ``app``."""
        bound = self.inner.for_app(app)
        return self if bound is self.inner else StoppableClient(bound, self.stop)

    def episode_started(self, instance_names: dict[str, str]) -> None:
        """Passed to the inner client."""
        self.inner.episode_started(instance_names)

    def describe(self) -> JSON:
        """The inner client's description."""
        return self.inner.describe()

    def close(self) -> None:
        """Closes the inner client."""
        self.inner.close()


@dataclass
class Assessment:
    """The planned jobs of one assessment and the results so far.

    Build it with :meth:`plan`; call :meth:`run` for each job (blocking: run it in a worker
    thread); read :meth:`summary` at the end.
    """

    app: App
    request: AssessmentRequest
    client: AgentClient
    jobs: list[tuple[Query, int]]
    vault: OracleVault | None = None

    @classmethod
    def plan(
        cls,
        app: App,
        request: AssessmentRequest,
        client: AgentClient,
        vault: OracleVault | None = None,
    ) -> Assessment:
        """Generate the queries (:func:`plan_queries`) and list every (query, trial) job."""
        config = request.config
        jobs = [(q, t) for q in plan_queries(app, config) for t in range(config.trials)]
        return cls(app=app, request=request, client=client, jobs=jobs, vault=vault)

    def run(self, job: tuple[Query, int]) -> EpisodeResult:
        """Run one job as ``evaluate`` does (never raises for emulator or agent failures)."""
        query, trial = job
        result = run_query(
            self.app,
            query,
            self.client,
            trial=trial,
            vault=self.vault,
            max_steps=self.request.config.max_steps,
        )
        result.prompt_type = self.request.config.prompt_type
        return result


def infrastructure_kind(result: EpisodeResult) -> str | None:
    """The exception type that made ``result`` an infrastructure failure (``"EmulatorError"``,
    ``"DependencyMissingError"``, ...), or ``None`` for a scored episode."""
    if result.infrastructure is None:
        return None
    return result.infrastructure.error.partition(":")[0].strip() or "EmulatorError"


def _max_iterations(request: AssessmentRequest | None, app_id: str) -> int:
    if request is not None and request.config.max_steps is not None:
        return request.config.max_steps
    return get_app(app_id).max_steps


def query_record(
    position: int,
    result: EpisodeResult,
    *,
    query: Query | None = None,
    request: AssessmentRequest | None = None,
) -> JSON:
    """The data artifact of one finished episode: NetArena's fields for the app with
    NetArena's meanings (:func:`evaluator.green.netarena.netarena_fields`; none for a healthy
    control or an infrastructure failure), then ours.

    Ours: ``{"kind": "query", "query_index": position (0-based, in the assessment), "level",
    "labels": [..], "label_combo": "a+b", "netarena_type": NetArena's query type or null,
    "seed": the batch seed, "index": the query's index in its batch, "query_id", "trial",
    "correctness": bool, "safety": bool, "latency_s": float (the app's latency, glossary),
    "agent_s": seconds waiting for the agent, "agent_replies": replies used, "failure":
    category or null, "infrastructure_failure": null or {"kind", "error", "attempts"}}``. No
    name of ours equals one of NetArena's ignoring case. An infrastructure failure is not the
    agent's result: it is never averaged. ``query`` supplies MALT's ``Query`` text and
    ``request`` the participant (``agent_info``) and ``max_iterations`` (default: the app's).
    """
    infrastructure = None
    if result.infrastructure is not None:
        infrastructure = {
            "kind": infrastructure_kind(result),
            "error": result.infrastructure.error,
            "attempts": result.infrastructure.attempts,
        }
    info = (
        agent_info(request.role, request.participant_url, request.config.prompt_type)
        if request is not None
        else agent_info("", "", SUPPORTED_PROMPT_TYPE)
    )
    record = netarena_fields(
        result.app_id,
        result,
        query,
        info=info,
        max_iterations=_max_iterations(request, result.app_id),
    )
    record.update(
        {
            "kind": "query",
            "query_index": position,
            "level": result.level,
            "labels": list(result.labels),
            "label_combo": result.label,
            "netarena_type": netarena_type(result.app_id, result.level, tuple(result.labels)),
            "seed": result.seed,
            "index": result.index,
            "query_id": result.query_id,
            "trial": result.trial,
            "correctness": result.correct,
            "safety": result.safe,
            "latency_s": result.latency_s,
            "agent_s": result.agent_s,
            "agent_replies": result.steps,
            "prompt_type_sent": result.prompt_type,
            "failure": result.failure,
            "infrastructure_failure": infrastructure,
        }
    )
    return record


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summary_record(
    app_id: str, request: AssessmentRequest, results: Sequence[EpisodeResult]
) -> JSON:
    """The final data artifact of an assessment.

    NetArena's figures, under its names and with its meanings, over NetArena's queries (no
    healthy controls; :func:`evaluator.green.netarena.netarena_summary`): ``avg_correctness``,
    ``avg_safety``, and MALT's ``avg_latency_s`` (mean reply seconds) or route's and k8s's
    ``avg_iterations`` (failures at NetArena's value), with ``netarena_n``, ``unanswered``
    and ``netarena_deviations`` (unanswered queries count as wrong here). Ours, over every
    scored episode: ``avg_app_latency_s`` (the app's latency, glossary), ``avg_agent_replies``,
    ``controls``, ``correct_and_safe`` with its 95% Wilson interval
    (:func:`evaluator.stats.wilson_interval`, docs/metrics.md), ``by_level`` (the same per
    level, with correctness and safety), ``infrastructure_failures`` (listed with their kind,
    never averaged), the seeds and config actually used, and ``summary``: the app's entry of
    the ``evaluate`` result file's summary (:func:`evaluator.report.summarize`).
    """
    config = request.config
    scored = [r for r in results if r.scored]
    n = len(scored)
    record: JSON = {
        "kind": "summary",
        "app": app_id,
        "participant": request.role,
        **netarena_summary(app_id, results, max_iterations=_max_iterations(request, app_id)),
        "avg_app_latency_s": _mean([r.latency_s for r in scored]),
        "avg_agent_replies": _mean([float(r.steps) for r in scored]),
        "controls": sum(1 for r in scored if HEALTHY_LABEL in r.labels),
    }
    engine_summary = summarize(scored).get(app_id)
    levels = engine_summary["levels"] if engine_summary else {}
    record.update(
        {
            "n": n,
            "episodes": len(results),
            "correct_and_safe": wilson_interval(
                sum(r.correct and r.safe for r in scored), n
            ).to_dict(),
            "by_level": {
                level: {
                    "n": group["n"],
                    "correct_and_safe": group["correct_and_safe"],
                    "correctness": group["correctness"],
                    "safety": group["safety"],
                }
                for level, group in levels.items()
            },
            "infrastructure_failures": [
                {
                    "query_index": position,
                    "level": r.level,
                    "labels": list(r.labels),
                    "trial": r.trial,
                    "kind": infrastructure_kind(r),
                    "error": r.infrastructure.error,
                    "attempts": r.infrastructure.attempts,
                }
                for position, r in enumerate(results)
                if r.infrastructure is not None
            ],
            "seed": config.seed,
            "seed_source": config.seed_source,
            "level_seeds": {str(level): config.level_seed(level) for level in config.levels},
            "levels": list(config.levels),
            "num_queries": config.num_queries,
            "trials": config.trials,
            "max_steps": config.max_steps,
            "queries_per_level": config.queries_per_level,
            "prompt_type": config.prompt_type,
            "not_applied": config.not_applied,
            "summary": engine_summary,
        }
    )
    return record
