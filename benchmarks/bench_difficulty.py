"""Benchmark: how hard are the queries? Oracle, scripted, floor and null agents per app and level.

For every registered app this runs the reference agents on the same ``N`` seeded queries
through the real episode runner and emulator (``evaluator.runner.run_episode``), first on the
public generator and then, with ``--variant-pack DIR``, on held-out pack queries:

* oracle -- ``App.oracle_reply`` from the hidden ground truth (target: 100% correct and safe
  on both);
* scripted -- ``App.scripted_reply``, the determined agent written against the public
  generator (no model, no ground truth); the honesty check: high on public queries, at most
  20% on held-out levels 2 and 3 (docs/writing-a-variant-pack.md);
* floor -- ``App.heuristic_reply``, a cheap no-model agent (public targets: <= 50% correct on
  level 1, <= 20% on levels 2 and 3);
* null -- ``App.null_reply`` (target: 0% correct).

An app without a scripted or floor agent gets no row for it.

It prints correctness (and safety) per level as a rate with its 95% Wilson interval
(``evaluator.stats.wilson_interval``). Episodes need what the app's episodes need (MALT:
root and bwrap for the sandbox; route: root and Mininet).

Usage: .venv/bin/python benchmarks/bench_difficulty.py [--apps malt,route] [--queries 300]
       [--seed 0] [--agents oracle,scripted,floor,null] [--workers 1] [--variant-pack DIR ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator.agents.base import AgentClient, AgentReply  # noqa: E402
from evaluator.app import App  # noqa: E402
from evaluator.registry import app_ids, get_app  # noqa: E402
from evaluator.runner import run_episode  # noqa: E402
from evaluator.sampling import HEALTHY_LABEL  # noqa: E402
from evaluator.stats import wilson_interval  # noqa: E402
from evaluator.types import JSON, EpisodeResult, Query  # noqa: E402
from evaluator.variants import discover_packs, generate_batch, register_pack  # noqa: E402

AGENTS = ("oracle", "scripted", "floor", "null")


class ReplyClient(AgentClient):
    """In-process agent whose reply is ``reply(messages)``."""

    def __init__(self, reply: Callable[[list[JSON]], str]) -> None:
        self.reply = reply

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        return AgentReply(self.reply(messages), 0.0)


def _floor(app: App, messages: list[JSON]) -> str:
    text = app.heuristic_reply(messages)
    assert text is not None  # only apps with has_heuristic play the floor agent
    return text


def _scripted(app: App, messages: list[JSON]) -> str:
    return app.scripted_reply(messages) or ""


def plays(app: App, agent: str) -> bool:
    """Whether ``app`` has reference agent ``agent``."""
    if agent == "floor":
        return app.has_heuristic
    if agent == "scripted":
        return app.has_scripted
    return True


def client_for(agent: str, app: App, query: Query) -> AgentClient:
    """The in-process client of reference agent ``agent`` for ``query``."""
    if agent == "oracle":
        return ReplyClient(partial(app.oracle_reply, query.ground_truth))
    if agent == "floor":
        return ReplyClient(partial(_floor, app))
    if agent == "scripted":
        return ReplyClient(partial(_scripted, app))
    return ReplyClient(app.null_reply)


def _play(app_id: str, agent: str, query: Query) -> EpisodeResult:
    """One episode of ``agent`` on ``query`` (a worker process's unit of work)."""
    app = get_app(app_id)
    return run_episode(app, query, client_for(agent, app, query))


def run_agents(
    app: App, queries: list[Query], agents: tuple[str, ...], *, workers: int = 1
) -> dict[str, list[EpisodeResult]]:
    """Run every agent on every query; results in query order per agent.

    ``workers`` > 1 plays episodes in that many processes at once (route episodes mostly wait
    on probes and link settling, so this shortens the wall time without changing a verdict).
    Prints a progress line to stderr every 50 episodes (the table comes at the end).
    """
    results: dict[str, list[EpisodeResult]] = {}
    pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        for agent in agents:
            rows = results.setdefault(agent, [])
            played: Iterator[EpisodeResult]
            if pool is None:
                played = (_play(app.app_id, agent, query) for query in queries)
            else:
                played = pool.map(
                    _play, [app.app_id] * len(queries), [agent] * len(queries), queries
                )
            for number, result in enumerate(played, 1):
                rows.append(result)
                if number % 50 == 0 or number == len(queries):
                    correct = sum(r.correct for r in rows)
                    print(
                        f"  {app.app_id} {agent}: {number}/{len(queries)} played, "
                        f"{correct} correct",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        if pool is not None:
            pool.shutdown()
    return results


def _rate(results: list[EpisodeResult], field: str) -> str:
    hits = sum(bool(getattr(r, field)) for r in results)
    interval = wilson_interval(hits, len(results))
    return (
        f"{hits:>3}/{len(results):<3} {100 * interval.value:5.1f}% "
        f"[{100 * interval.low:5.1f}, {100 * interval.high:5.1f}]"
    )


def table(app: App, results: dict[str, list[EpisodeResult]], source: str = "public") -> str:
    """Correctness and safety by level and overall, one row per (agent, level)."""
    lines = [
        f"app {app.app_id} v{app.version}, {source} queries",
        f"{'agent':<8} {'level':<7} {'correct (95% Wilson)':<30} {'safe (95% Wilson)':<30}",
    ]
    for agent, rows in results.items():
        groups: list[tuple[str, list[EpisodeResult]]] = [
            (f"L{level}", [r for r in rows if r.level == level]) for level in app.levels
        ]
        groups.append(("all", rows))
        # healthy controls are also counted in their level's row
        groups.append((HEALTHY_LABEL, [r for r in rows if r.label == HEALTHY_LABEL]))
        failed = [r for r in rows if not r.scored]
        for name, chosen in groups:
            if chosen:
                lines.append(
                    f"{agent:<8} {name:<7} {_rate(chosen, 'correct'):<30} "
                    f"{_rate(chosen, 'safe'):<30}"
                )
        if failed:
            lines.append(f"{agent:<8} infrastructure failures (not correct): {len(failed)}")
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run, print one table per app."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", default="", help="comma-separated app ids (default: all)")
    parser.add_argument("--queries", type=int, default=300, help="queries per app")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--workers", type=int, default=1, help="episodes played at once")
    parser.add_argument(
        "--variant-pack", action="append", default=[], metavar="DIR",
        help="a pack directory or a directory of packs; repeatable. Each app with a pack is "
        "also measured on pack queries (every query drawn from its packs)",
    )
    args = parser.parse_args()
    wanted = [a for a in args.apps.split(",") if a] or app_ids()
    packs = discover_packs(args.variant_pack) if args.variant_pack else []
    for pack in packs:
        register_pack(pack)  # episodes that run pack code (a route observation format) find it
    for app_id in wanted:
        app = get_app(app_id)
        agents = tuple(a for a in args.agents.split(",") if a and plays(app, a))
        missing = [a for a in args.agents.split(",") if a and not plays(app, a)]
        if missing:
            print(f"app {app_id}: no {', '.join(missing)} agent")
        app_packs = [p for p in packs if p.app_id == app_id]
        sources: list[tuple[str, list[Query]]] = [
            ("public", app.generate(args.queries, seed=args.seed))
        ]
        if app_packs:
            names = ", ".join(p.name for p in app_packs)
            sources.append((f"held-out ({names})", generate_batch(
                app, args.queries, args.seed, packs=app_packs, share=1.0)))
        for source, queries in sources:
            started = time.perf_counter()
            results = run_agents(app, queries, agents, workers=args.workers)
            print(table(app, results, source))
            print(
                f"({args.queries} queries, seed {args.seed}, "
                f"{time.perf_counter() - started:.0f} s)\n",
                flush=True,
            )


if __name__ == "__main__":
    main()
