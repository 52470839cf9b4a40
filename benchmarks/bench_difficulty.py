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
* null -- ``App.null_reply`` (target: 0% correct);
* adaptive -- a no-model agent that first learns from one *exposed* batch of a held-out pack
  exactly what a team sees after a practice submission once the pack is spent (each query's
  prompt and ground truth: ``--exposure-queries`` queries of the seed ``--exposure-seed``),
  then answers the measured batch (``apps.<app>.adaptive``, e.g. :mod:`apps.malt.adaptive`;
  targets: at least 80% on a fresh batch of the exposed pack, at most 20% on levels 2 and 3
  of a pack it never saw).

An app without a scripted, floor or adaptive agent gets no row for it.

**Exposed vs sealed.** With ``--exposed-pack A`` (and ``--sealed-pack B``, repeatable) the
adaptive agent learns from A's exposure batch and every agent is measured on a fresh batch of
A (seed ``--seed``) and on a batch of each B, instead of the public and ``--variant-pack``
batches; a last table puts the two side by side per agent and level.

It prints correctness (and safety) per level as a rate with its 95% Wilson interval
(``evaluator.stats.wilson_interval``). Episodes need what the app's episodes need (MALT:
root and bwrap for the sandbox; route: root and Mininet).

Usage: .venv/bin/python benchmarks/bench_difficulty.py [--apps malt,route] [--queries 300]
       [--seed 0] [--agents oracle,scripted,floor,null,adaptive] [--workers 1]
       [--variant-pack DIR ...] [--exposed-pack DIR [--sealed-pack DIR ...]]
       [--exposure-seed N] [--exposure-queries 200]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator.agents.base import AgentClient, AgentReply  # noqa: E402
from evaluator.app import App  # noqa: E402
from evaluator.registry import app_ids, get_app  # noqa: E402
from evaluator.runner import run_episode  # noqa: E402
from evaluator.sampling import HEALTHY_LABEL  # noqa: E402
from evaluator.stats import wilson_interval  # noqa: E402
from evaluator.types import JSON, EpisodeResult, Query  # noqa: E402
from evaluator.variants import (  # noqa: E402
    VariantPack,
    discover_packs,
    generate_batch,
    register_pack,
)

AGENTS = ("oracle", "scripted", "floor", "null")


class Learner(Protocol):
    """An app's adaptive agent after learning (``apps.<app>.adaptive.learner_from``)."""

    def reply(self, history: list[JSON]) -> str:
        """The next reply to the chat ``history``."""
        ...


#: Default size of the batch the adaptive agent learns from.
EXPOSURE_QUERIES = 200
#: The adaptive agent of each app that has one: ``learner_from(queries)`` returning an object
#: whose ``reply(history)`` answers (set by :func:`learn_exposure` before episodes run; worker
#: processes are forked after it, so they inherit it).
LEARNERS: dict[str, Learner] = {}


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
    if agent == "adaptive":
        return importlib.util.find_spec(f"apps.{app.app_id}.adaptive") is not None
    return True


def learn_exposure(app: App, pack: VariantPack, seed: int, count: int) -> Learner:
    """The adaptive agent of ``app`` after learning from the exposure batch: ``count`` queries
    of ``pack`` drawn with ``seed`` (their prompts and ground truths, what a team sees once
    the pack is spent). Stored in :data:`LEARNERS` for :func:`client_for`."""
    module = importlib.import_module(f"apps.{app.app_id}.adaptive")
    exposure = generate_batch(app, count, seed, packs=[pack], share=1.0)
    learner: Learner = module.learner_from(exposure)
    LEARNERS[app.app_id] = learner
    return learner


def client_for(agent: str, app: App, query: Query) -> AgentClient:
    """The in-process client of reference agent ``agent`` for ``query``."""
    if agent == "oracle":
        return ReplyClient(partial(app.oracle_reply, query.ground_truth))
    if agent == "floor":
        return ReplyClient(partial(_floor, app))
    if agent == "scripted":
        return ReplyClient(partial(_scripted, app))
    if agent == "adaptive":
        learner = LEARNERS.get(app.app_id)
        if learner is None:
            raise RuntimeError(f"the adaptive agent of {app.app_id} has learned nothing")
        return ReplyClient(learner.reply)
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


def _short(rows: list[EpisodeResult]) -> str:
    """``hits/n pct%`` of correct-and-safe episodes (``-`` for none)."""
    if not rows:
        return "-"
    hits = sum(r.correct and r.safe for r in rows)
    return f"{hits}/{len(rows)} {100 * hits / len(rows):.0f}%"


def exposure_table(
    app: App, measured: list[tuple[str, dict[str, list[EpisodeResult]]]]
) -> str:
    """Correct-and-safe rates per agent (rows) and source and level (columns): the exposed
    pack's fresh batch beside each sealed pack's batch."""
    header = f"{'agent':<9}"
    for source, _ in measured:
        header += f" | {source[:44]:<44}"
    sub = f"{'':<9}"
    for _ in measured:
        sub += " | " + " ".join(f"{name:<10}" for name in
                                [f"L{level}" for level in app.levels] + ["all"])
    lines = [f"app {app.app_id} v{app.version}: correct and safe, exposed vs sealed", header, sub]
    agents = list(measured[0][1]) if measured else []
    for agent in agents:
        line = f"{agent:<9}"
        for _, results in measured:
            rows = results.get(agent, [])
            cells = [_short([r for r in rows if r.level == level]) for level in app.levels]
            cells.append(_short(rows))
            line += " | " + " ".join(f"{cell:<10}" for cell in cells)
        lines.append(line)
    return "\n".join(lines)


def _one_pack(directory: str) -> VariantPack:
    packs = discover_packs([directory])
    if len(packs) != 1:
        raise SystemExit(f"{directory}: expected one pack, found {len(packs)}")
    register_pack(packs[0])
    return packs[0]


def main() -> None:
    """Parse arguments, run, print one table per app and source (and the exposed-vs-sealed
    table with ``--exposed-pack``)."""
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
    parser.add_argument(
        "--exposed-pack", default=None, metavar="DIR",
        help="the pack the adaptive agent learns from (one pack directory). With it the run "
        "measures a fresh batch of this pack and one of each --sealed-pack instead of the "
        "public and --variant-pack batches. Without it the adaptive agent learns from the "
        "first --variant-pack of the app",
    )
    parser.add_argument(
        "--sealed-pack", action="append", default=[], metavar="DIR",
        help="a pack the adaptive agent never saw (one pack directory; repeatable)",
    )
    parser.add_argument(
        "--exposure-seed", type=int, default=None,
        help="seed of the exposure batch (default: --seed + 1000003, never the measured one)",
    )
    parser.add_argument("--exposure-queries", type=int, default=EXPOSURE_QUERIES)
    args = parser.parse_args()
    exposure_seed = args.seed + 1000003 if args.exposure_seed is None else args.exposure_seed
    if exposure_seed == args.seed:
        parser.error("--exposure-seed must differ from --seed (the exposure is not the test)")
    wanted = [a for a in args.apps.split(",") if a] or app_ids()
    packs = discover_packs(args.variant_pack) if args.variant_pack else []
    for pack in packs:
        register_pack(pack)  # episodes that run pack code (a route observation format) find it
    exposed = _one_pack(args.exposed_pack) if args.exposed_pack else None
    sealed = [_one_pack(d) for d in args.sealed_pack]
    for app_id in wanted:
        app = get_app(app_id)
        agents = tuple(a for a in args.agents.split(",") if a and plays(app, a))
        missing = [a for a in args.agents.split(",") if a and not plays(app, a)]
        if missing:
            print(f"app {app_id}: no {', '.join(missing)} agent")
        app_packs = [p for p in packs if p.app_id == app_id]
        sources: list[tuple[str, list[Query]]] = []
        teacher = exposed if exposed is not None and exposed.app_id == app_id else None
        if exposed is not None:
            if teacher is None:
                print(f"app {app_id}: skipped (--exposed-pack is a pack of {exposed.app_id})")
                continue
            sources.append((f"exposed ({teacher.name})", generate_batch(
                app, args.queries, args.seed, packs=[teacher], share=1.0)))
            sources.extend(
                (f"sealed ({p.name})", generate_batch(
                    app, args.queries, args.seed, packs=[p], share=1.0))
                for p in sealed if p.app_id == app_id
            )
        else:
            sources.append(("public", app.generate(args.queries, seed=args.seed)))
            if app_packs:
                names = ", ".join(p.name for p in app_packs)
                sources.append((f"held-out ({names})", generate_batch(
                    app, args.queries, args.seed, packs=app_packs, share=1.0)))
            teacher = app_packs[0] if app_packs else None
        if "adaptive" in agents:
            if teacher is None:
                parser.error(f"app {app_id}: the adaptive agent needs --exposed-pack or a "
                             "--variant-pack to learn from")
            started = time.perf_counter()
            learner = learn_exposure(app, teacher, exposure_seed, args.exposure_queries)
            print(
                f"adaptive ({app_id}) learned from {args.exposure_queries} queries of pack "
                f"{teacher.name}, seed {exposure_seed}: {learner} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        measured: list[tuple[str, dict[str, list[EpisodeResult]]]] = []
        for source, queries in sources:
            started = time.perf_counter()
            results = run_agents(app, queries, agents, workers=args.workers)
            measured.append((source, results))
            print(table(app, results, source))
            print(
                f"({args.queries} queries, seed {args.seed}, "
                f"{time.perf_counter() - started:.0f} s)\n",
                flush=True,
            )
        if exposed is not None:
            print(exposure_table(app, measured) + "\n", flush=True)


if __name__ == "__main__":
    main()
