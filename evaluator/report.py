"""Result files and summaries: aggregate episode results per app, level and label.

The result file written by ``evaluate --json OUT`` (format version 2; docs/result-format.md)::

    {"format_version": 2, "agent": {...}, "apps": [{"app_id", "version", "levels"}...],
     "run": {"seed", "queries_per_app", "level", "started_at", "finished_at"},
     "episodes": [EpisodeResult.to_dict()...],
     "summary": {"<app_id>": {"all": Group, "levels": {"1": Group...},
                              "labels": {"<label>": Group...}}}}

where a Group is ``{"n", "correctness": Interval, "safety": Interval, "correct_and_safe":
Interval, "action_rate": Interval, "action_n", "correctness_sem": Interval, "safety_sem":
Interval, "latency_s": Interval, "wall_s": Interval, "steps_mean", "blast_radius_mean":
Interval}`` (``blast_radius_mean``: mean blast radius of the unsafe episodes, in the app's unit).

``correct_and_safe`` (both verdicts true in the same episode) is the headline figure: an agent
that does nothing is safe but never correct. ``action_rate`` is the share of the ``action_n``
episodes whose app could tell (``EpisodeResult.changed_state`` not ``None``) in which the agent
changed the state. Every rate carries a 95% Wilson interval (docs/metrics.md).

When queries were run more than once (``evaluate --trials K``), ``summary[app_id]["trials"]``
is :func:`trial_summary` of the app's episodes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from pathlib import Path

from evaluator.stats import mean_interval, sem_interval, wilson_interval
from evaluator.types import JSON, EpisodeResult

FORMAT_VERSION = 2


def summarize_group(results: Sequence[EpisodeResult]) -> JSON:
    """Aggregate a group of episodes (see module docstring for the shape)."""
    n = len(results)
    correct = [r.correct for r in results]
    safe = [r.safe for r in results]
    both = sum(r.correct and r.safe for r in results)
    radii = [r.blast_radius for r in results if not r.safe and r.blast_radius is not None]
    known_actions = [r.changed_state for r in results if r.changed_state is not None]
    return {
        "n": n,
        "correctness": wilson_interval(sum(correct), n).to_dict(),
        "safety": wilson_interval(sum(safe), n).to_dict(),
        "correct_and_safe": wilson_interval(both, n).to_dict(),
        "action_rate": wilson_interval(sum(known_actions), len(known_actions)).to_dict(),
        "action_n": len(known_actions),
        "correctness_sem": sem_interval(correct).to_dict(),
        "safety_sem": sem_interval(safe).to_dict(),
        "latency_s": mean_interval([r.latency_s for r in results]).to_dict(),
        "wall_s": mean_interval([r.wall_s for r in results]).to_dict(),
        "steps_mean": (sum(r.steps for r in results) / n) if n else None,
        "blast_radius_mean": mean_interval(radii).to_dict(),
    }


def summarize(results: Iterable[EpisodeResult]) -> JSON:
    """Summaries per app id: overall, per level and per label (``"remove+count"``).

    ``summary[app_id]["labels"]`` maps each label (the ``+``-joined labels of a query) to its
    group.
    """
    by_app: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        by_app[result.app_id].append(result)
    summary: JSON = {}
    for app_id, app_results in by_app.items():
        levels: dict[int, list[EpisodeResult]] = defaultdict(list)
        labels: dict[str, list[EpisodeResult]] = defaultdict(list)
        for result in app_results:
            levels[result.level].append(result)
            labels[result.label].append(result)
        summary[app_id] = {
            "all": summarize_group(app_results),
            "levels": {str(k): summarize_group(v) for k, v in sorted(levels.items())},
            "labels": {k: summarize_group(v) for k, v in sorted(labels.items())},
        }
        if any(r.trial for r in app_results):
            summary[app_id]["trials"] = trial_summary(app_results)
    return summary


def trial_summary(results: Sequence[EpisodeResult]) -> JSON:
    """pass^k and per-query variance over repeated trials of the same queries.

    Success is *correct and safe*. For a query tried ``n`` times with ``c`` successes, the
    chance that ``k`` trials drawn without replacement all succeed is ``C(c, k) / C(n, k)``;
    pass^k is its mean over queries (tau-bench, Yao et al. 2024, §4). ``pass_hat_k`` maps k =
    1..min n to that mean; pass^1 equals the plain success rate. ``variance_mean`` is the mean
    over queries of the Bernoulli variance ``p (1 - p)`` of the per-query success rate ``p =
    c / n`` (0 when every query is always or never solved). Shape::

        {"queries", "trials_min", "trials_max", "pass_hat_k": {"1": float, ...},
         "variance_mean": float}
    """
    by_query: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        by_query[result.query_id].append(result.correct and result.safe)
    if not by_query:
        return {"queries": 0, "trials_min": 0, "trials_max": 0, "pass_hat_k": {}}
    counts = [(len(v), sum(v)) for v in by_query.values()]
    k_max = min(n for n, _ in counts)
    pass_hat_k = {
        str(k): sum(comb(c, k) / comb(n, k) for n, c in counts) / len(counts)
        for k in range(1, k_max + 1)
    }
    variance = sum((c / n) * (1 - c / n) for n, c in counts) / len(counts)
    return {
        "queries": len(counts),
        "trials_min": k_max,
        "trials_max": max(n for n, _ in counts),
        "pass_hat_k": pass_hat_k,
        "variance_mean": variance,
    }


def _pct(interval: JSON) -> str:
    if interval["value"] is None:
        return "-"
    value, low, high = (100 * interval[k] for k in ("value", "low", "high"))
    return f"{value:5.1f}% [{low:5.1f},{high:5.1f}]"


def _secs(interval: JSON) -> str:
    if interval["value"] is None:
        return "-"
    return f"{interval['value']:.3f}s [{interval['low']:.3f},{interval['high']:.3f}]"


def format_summary_table(summary: JSON) -> str:
    """Plain-text table: per app and level, correct-and-safe, correctness, safety, action rate
    and latency with 95% CIs."""
    header = (
        f"{'app':<6} {'level':<5} {'n':>4}  {'correct & safe (95% CI)':<24} "
        f"{'correctness (95% CI)':<24} {'safety (95% CI)':<24} {'acted (95% CI)':<24} "
        "latency (95% CI)"
    )
    lines = [header, "-" * len(header)]
    for app_id, app_summary in summary.items():
        rows = [(level, group) for level, group in app_summary["levels"].items()]
        rows.append(("all", app_summary["all"]))
        for level, group in rows:
            lines.append(
                f"{app_id:<6} {level:<5} {group['n']:>4}  {_pct(group['correct_and_safe']):<24} "
                f"{_pct(group['correctness']):<24} {_pct(group['safety']):<24} "
                f"{_pct(group['action_rate']):<24} {_secs(group['latency_s'])}"
            )
    for app_id, app_summary in summary.items():
        trials = app_summary.get("trials")
        if trials:
            shown = ", ".join(
                f"pass^{k} {100 * v:.1f}%" for k, v in trials["pass_hat_k"].items()
            )
            lines.append(
                f"{app_id}: {trials['queries']} queries x {trials['trials_min']} trials: {shown}; "
                f"mean per-query variance {trials['variance_mean']:.3f}"
            )
    return "\n".join(lines)


def write_result_file(path: str | Path, document: JSON) -> None:
    """Write ``document`` as JSON atomically (a temp file renamed over ``path``)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1, default=str))
    tmp.replace(target)
