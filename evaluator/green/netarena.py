"""NetArena's result fields, with NetArena's meanings, computed from this engine's episodes.

NetArena's green agents (``Froot-NetSys/NetArena`` at commit 93225b4) stream one record per
query and a final ``{avg_correctness, avg_safety, avg_latency_s | avg_iterations}``. The
records here carry the same names with the same meanings, beside ours, whose names never
equal one of these ignoring case (so DuckDB's case-insensitive columns keep them apart):

* MALT (``app-malt/main.py``, ``app-malt/green_agent/malt_agent.py``): ``Query`` (the
  question), ``Label`` (``"capacity planning, level-N, <operation type>"``),
  ``Result-Correctness`` and ``Result-Safety`` (``"Pass"``/``"Fail"``), ``Result-Latency``
  (seconds the agent took to reply), ``agent_info``; summary ``avg_latency_s`` is the mean
  ``Result-Latency``.
* route (``app-route/test_function.py``): ``error_type`` (pairs joined by ``+``), ``success``,
  ``safe``, ``iterations``: NetArena asks the agent once more after the repair before it
  checks, so a repair after ``k`` commands is ``k + 1`` and a failure ``max_iterations + 1``.
* k8s (``app-k8s/run_workflow.py``): ``error_detail`` (``[{"type": <error type>}, ...]``),
  ``success``, ``safe``, ``iterations``: the replies used when repaired, ``max_iterations``
  when not (NetArena's loop index plus one).

Not carried: NetArena's ground-truth code, the agent's code or log, and error texts (the
transcript is disclosed under the site's rules, not in a leaderboard record).

Deviation: NetArena drops a query the agent did not answer (MALT: no reply; its averages are
then over answered queries only), which would reward failing. Here such a query (its agent
call failed: ``failure`` ``agent:*``) keeps NetArena's names and counts as **wrong** in
``avg_correctness`` (its safety is the episode's verdict); the summary says so in
``netarena_deviations``. Its ``Result-Latency`` is ``null`` and it stays out of
``avg_latency_s``, as in NetArena (a failed call has no reply time; counting it as 0 would
reward failing too). Healthy controls (route, k8s) are not NetArena queries: they carry
none of these fields and are in none of NetArena's figures (ours count them).
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluator.green.counts import netarena_profile, netarena_type
from evaluator.green.declarations import ResultFormat
from evaluator.sampling import HEALTHY_LABEL
from evaluator.types import JSON, EpisodeResult, Query

#: The summary's statement of where its NetArena figures differ from NetArena's own.
UNANSWERED_DEVIATION = (
    "avg_correctness, avg_safety and avg_iterations count every query, answered or not: a "
    "query the agent did not answer (no reply, a timeout, an error) is wrong here, where "
    "NetArena leaves it out of its averages (avg_latency_s, as NetArena's, is over answered "
    "queries only)"
)
CONTROLS_NOTE = (
    "healthy controls (label HEALTHY) are not NetArena queries: they are in none of "
    "NetArena's figures and in all of ours"
)


def is_netarena_query(result: EpisodeResult) -> bool:
    """True for a scored episode NetArena would have run: not a healthy control, not an
    infrastructure failure."""
    return result.scored and HEALTHY_LABEL not in result.labels


def _format(app_id: str) -> ResultFormat | None:
    """NetArena's result format of ``app_id``, ``None`` for an app without a profile."""
    profile = netarena_profile(app_id)
    return profile.result_format if profile is not None else None


def _pass(flag: bool) -> str:
    return "Pass" if flag else "Fail"


def _type_name(app_id: str, result: EpisodeResult, joiner: str) -> str:
    name = netarena_type(app_id, result.level, tuple(result.labels))
    return name if name is not None else joiner.join(result.labels)


def netarena_iterations(app_id: str, result: EpisodeResult, max_iterations: int) -> int:
    """NetArena's ``iterations`` of a route or k8s episode (module docstring): route
    (result format ``app-route``) ``replies + 1`` when repaired, ``max_iterations + 1`` when
    not; k8s (and any other) the replies when repaired, ``max_iterations`` when not."""
    if _format(app_id) == "app-route":
        return result.steps + 1 if result.correct else max_iterations + 1
    return result.steps if result.correct else max_iterations


def agent_info(role: str, url: str, prompt_type: str) -> JSON:
    """NetArena's ``agent_info``: the participant's role as ``name``, its URL, the prompt
    type."""
    return {"base_url": url, "name": role, "prompt_type": prompt_type}


def netarena_fields(
    app_id: str,
    result: EpisodeResult,
    query: Query | None,
    *,
    info: JSON,
    max_iterations: int,
) -> JSON:
    """NetArena's per-query fields of ``result`` in the app's result format (empty for a
    control, an infrastructure failure, :func:`is_netarena_query`, or an app without a
    NetArena profile). ``query`` gives MALT's question (``Query``; ``None``: empty string)."""
    result_format = _format(app_id)
    if result_format is None or not is_netarena_query(result):
        return {}
    if result_format == "app-malt":
        question = query.ground_truth.get("question", "") if query is not None else ""
        return {
            "Query": question,
            "Label": f"capacity planning, level-{result.level}, "
            + _type_name(app_id, result, "-"),
            "Result-Correctness": _pass(result.correct),
            "Result-Safety": _pass(result.safe),
            "Result-Latency": None if _unanswered(result) else result.agent_s,
            "agent_info": info,
        }
    fields: JSON = {"agent_info": info}
    name = _type_name(app_id, result, "+")
    if result_format == "app-route":
        fields["error_type"] = name
    else:
        fields["error_detail"] = [{"type": part} for part in name.split("+")]
    fields.update(
        {
            "success": result.correct,
            "safe": result.safe,
            "iterations": netarena_iterations(app_id, result, max_iterations),
        }
    )
    return fields


def _unanswered(result: EpisodeResult) -> bool:
    """True when the agent's call failed (no usable reply: ``failure`` ``agent:*``)."""
    return (result.failure or "").startswith("agent:")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def netarena_summary(
    app_id: str, results: Sequence[EpisodeResult], *, max_iterations: int
) -> JSON:
    """NetArena's summary figures over its queries (:func:`is_netarena_query`), ``null`` when
    there is none: ``avg_correctness``, ``avg_safety`` (fractions), then MALT's
    ``avg_latency_s`` (mean reply seconds of the answered queries) or route's and k8s's
    ``avg_iterations`` (:func:`netarena_iterations`); with ``netarena_n``, ``unanswered`` (of
    those, the episodes whose agent gave no usable reply: failure ``agent:*``) and
    ``netarena_deviations``.

    An app without a NetArena profile gets ``avg_correctness`` and ``avg_safety`` over the
    same episodes (scored, not controls) and ``unanswered``, nothing else (no NetArena
    latency, iterations, counts or deviations)."""
    result_format = _format(app_id)
    queries = [r for r in results if is_netarena_query(r)]
    figures: JSON = {
        "avg_correctness": _mean([float(r.correct) for r in queries]),
        "avg_safety": _mean([float(r.safe) for r in queries]),
    }
    unanswered = sum(1 for r in queries if _unanswered(r))
    if result_format is None:
        figures["unanswered"] = unanswered
        return figures
    if result_format == "app-malt":
        figures["avg_latency_s"] = _mean([r.agent_s for r in queries if not _unanswered(r)])
    else:
        figures["avg_iterations"] = _mean(
            [float(netarena_iterations(app_id, r, max_iterations)) for r in queries]
        )
    figures.update(
        {
            "netarena_n": len(queries),
            "unanswered": unanswered,
            "netarena_deviations": [UNANSWERED_DEVIATION]
            + ([CONTROLS_NOTE] if result_format != "app-malt" else []),
        }
    )
    return figures
