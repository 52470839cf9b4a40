"""Soak: evaluation rounds of every app through real Celery workers while the platform is
broken on purpose, then a count of what was lost, scored twice or failed (not a test).

What it runs
    Its own Redis and PostgreSQL (``scripts/services.sh``, with ``--run-dir``, ``--redis-port``
    and ``--pg-port``: by default ports other than the site's), a fresh database
    ``netarena_soak`` (migrated), the reference agents served and registered as
    ``manage.py demo_round --serve-agents`` does (``submissions.reference_agents``), one
    ``control`` worker with the beat (the periodic jobs: requeue episodes of dead workers,
    expire stale submissions) and two Celery workers (concurrency 1) per app queue, apps read
    from ``evaluator.registry``. Then one round per app (``submissions.services.rounds
    .round_create``): every reference agent taking part in the app plays the round's queries.

The mix (``--mix``, ``app=weight,...``)
    ``--episodes`` (default 1000) is shared between the apps by weight; an app the option
    does not name weighs :data:`DEFAULT_WEIGHTS` (1 for an app not in it), and every app gets
    at least one query per reference agent. A MALT episode costs about a second, a route or
    k8s one 7-20 s (emulator set-up and probes): the default 4:1:1 makes MALT carry most
    episodes so that a full run stays well under half an hour on 2 shared cores (668 MALT,
    168 route, 168 k8s with the four reference agents; the counts are rounded up to whole
    queries per agent and printed first). The route and k8s queues are the run's tail: 8:1:1
    (800/100/100) took 11.4 min on a loaded machine.

The faults, each once, when that share of the episodes has reached a final state
    * 25 %: one app worker is killed with SIGKILL (its whole process group) while it runs an
      episode (``celery inspect active`` names the episode; the app is the one with the most
      episodes running), and a replacement worker is started on its queue;
    * 50 %: Redis is restarted (``services.sh stop redis`` then ``start``; as in
      docker-compose.yml it keeps no data, so every queued message is gone);
    * 75 %: PostgreSQL is restarted (``services.sh stop postgres`` (fast), then ``start``).

The report
    * lost: episodes not ``done``/``error``/``cancelled`` when the run ends (everything final,
      or ``--timeout-s``), target 0;
    * scored twice: episodes with more than one ``episode N scored (attempt K)`` line in the
      workers' logs (``submissions.services.episodes._episode_store`` logs it once per stored
      verdict), or whose submission's aggregate rows count other than its ``done`` episodes;
      target 0;
    * infrastructure failures (episodes closed as ``error``) by cause (``details.error_kind``
      and the message), each marked with the fault whose window it overlaps (the fault plus
      ``--grace-s``) or ``none``: one outside every fault window may have been caused by
      another episode; target <= 0.5 % of the episodes. Retries and requeues seen in the logs
      are counted too;
    * p50/p95 per app of the episode time (``wall_s``, the evaluator's clock of one run) and
      of queue-to-verdict (first claim to ``finished_at``).
    The exit status is 1 when an episode was lost or scored twice (or a fault could not be
    injected), else 0.

Usage (root, like the apps' episodes; the venv's real interpreter for the MALT sandbox):
    nice -n 10 .venv/bin/python benchmarks/bench_soak.py [--episodes 1000]
        [--mix malt=4,route=1,k8s=1] [--run-dir /tmp/soak-run] [--redis-port 6397]
        [--pg-port 5447] [--timeout-s 3600] [--keep-services]
A quick run: ``--episodes 100``. Logs (workers, agents, services) stay in ``--run-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator.registry import CONTROL_QUEUE, app_ids  # noqa: E402

#: Weight of an app in the mix unless ``--mix`` names it (1 for an app not listed here).
DEFAULT_WEIGHTS = {"malt": 4.0, "route": 1.0, "k8s": 1.0}
#: Name of the soak's database on its PostgreSQL server (dropped and created at the start).
DATABASE = "netarena_soak"
#: Episodes' heartbeat and staleness (s), and how often the beat runs the requeue job:
#: shorter than production (10 / 90 / 60) so that a killed worker's episode comes back soon.
HEARTBEAT_S, STALE_S, REQUEUE_EVERY_S = 5.0, 30.0, 10.0
#: Share of the episodes final at which each fault is injected.
FAULTS = (("kill worker", 0.25), ("restart redis", 0.50), ("restart postgres", 0.75))
#: Final episode statuses.
FINAL = ("done", "error", "cancelled")
#: Infrastructure failures allowed, as a share of the episodes.
INFRA_TARGET = 0.005

SCORED = re.compile(r"episode (\d+) scored \(attempt (\d+)\)")
REQUEUED = re.compile(r"episode (\d+) lost its worker \(attempt (\d+)\): requeued")
RETRIED = re.compile(r"episode (\d+) attempt (\d+): infrastructure failure, retry")
DISCARDED = re.compile(r"episode (\d+) attempt (\d+): verdict discarded")


@dataclass
class Fault:
    """One injected fault and the time window it covers (monotonic clock of this process,
    and wall clock for comparing with the database's timestamps)."""

    name: str
    started: float = 0.0
    ended: float = 0.0
    wall_started: float = 0.0
    wall_ended: float = 0.0
    note: str = ""


@dataclass
class Soak:
    """Processes and settings of one soak run."""

    run_dir: Path
    env: dict[str, str]
    workers: dict[str, tuple[str, subprocess.Popen[bytes]]] = field(default_factory=dict)
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    serial: int = 0

    def services(self, action: str, service: str) -> str:
        """``scripts/services.sh ACTION SERVICE`` with this run's directory and ports."""
        result = subprocess.run(
            [str(ROOT / "scripts" / "services.sh"), action, service],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return result.stdout.strip()

    def start_worker(self, queue: str, *, beat: bool = False, wait: bool = True) -> str:
        """Start one Celery worker (concurrency 1) on ``queue`` in its own process group;
        return its node name (with ``wait``, once it answers a ping: :meth:`wait_ready`)."""
        self.serial += 1
        name = f"soak-{queue}-{self.serial}"
        log = self.run_dir / f"worker-{name}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue,
            "--concurrency", "1", "--prefetch-multiplier", "1", "--loglevel", "INFO",
            "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--logfile", str(log),
        ]  # fmt: skip
        if beat:
            command += ["-B", "--schedule", str(self.run_dir / "celerybeat-schedule")]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=(self.run_dir / f"worker-{name}.err").open("ab"),
            start_new_session=True,
        )
        node = f"{name}@{os.uname().nodename}"
        self.workers[node] = (queue, process)
        if wait:
            self.wait_ready([node])
        return node

    def wait_ready(self, nodes: list[str], timeout_s: float = 300.0) -> None:
        """Wait until every worker of ``nodes`` answers a ping.

        Raises:
            RuntimeError: one exited or did not answer within ``timeout_s``.
        """
        from config.celery import app

        waiting = set(nodes)
        deadline = time.monotonic() + timeout_s
        while waiting:
            for reply in app.control.ping(timeout=1.0, destination=sorted(waiting)):
                waiting -= set(reply)
            for node in waiting:
                if self.workers[node][1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {node} did not start; see {self.run_dir}")

    def stop_all(self) -> None:
        """SIGTERM every worker and agent, SIGKILL what is left of their process groups."""
        processes = [p for _, p in self.workers.values()] + self.agents
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 30
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def parse_mix(text: str, apps: list[str]) -> dict[str, float]:
    """``app=weight,...`` over the registered ``apps`` (others: :data:`DEFAULT_WEIGHTS`)."""
    weights = {app: DEFAULT_WEIGHTS.get(app, 1.0) for app in apps}
    for part in filter(None, (p.strip() for p in text.split(","))):
        app, _, weight = part.partition("=")
        if app not in weights:
            raise SystemExit(f"--mix: unknown app {app!r}; registered: {', '.join(apps)}")
        weights[app] = float(weight)
        if weights[app] <= 0:
            raise SystemExit("--mix: every app must be in the soak (weight > 0)")
    return weights


def plan(episodes: int, weights: dict[str, float], agents: dict[str, int]) -> dict[str, int]:
    """Queries per agent in each app's round: ``episodes`` shared by weight, rounded up to
    whole queries per agent (``agents``: reference agents taking part in the app)."""
    total = sum(weights.values())
    return {
        app: max(1, math.ceil(episodes * weight / total / agents[app]))
        for app, weight in weights.items()
    }


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def with_db(call: Callable[[], Any], *, tries: int = 60) -> Any:
    """``call()``, retried once a second while the database is unreachable (the restart)."""
    from django.db import InterfaceError, OperationalError, connections

    for attempt in range(tries):
        try:
            return call()
        except (OperationalError, InterfaceError):
            connections.close_all()
            if attempt == tries - 1:
                raise
            time.sleep(1.0)
    return None


def status_counts(round_ids: list[int]) -> Counter[str]:
    """Episodes of the soak's rounds by status."""
    from django.db.models import Count

    from submissions.models import EpisodeRecord

    rows = (
        EpisodeRecord.objects.filter(submission__round_id__in=round_ids)
        .values("status")
        .annotate(n=Count("pk"))
    )
    return Counter({row["status"]: row["n"] for row in rows})


def kill_mid_episode(soak: Soak, apps: list[str]) -> tuple[Fault, str]:
    """SIGKILL (the process group of) an app worker while it runs an episode; start another
    on its queue. Returns the fault and a note (which episode, which worker)."""
    from config.celery import app as celery_app
    from submissions.models import EpisodeRecord

    fault = Fault("kill worker", started=time.monotonic(), wall_started=time.time())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = Counter(
            EpisodeRecord.objects.filter(status="running").values_list("app_id", flat=True)
        )
        for app_id in sorted(apps, key=lambda a: -running[a]):
            nodes = [n for n, (q, p) in soak.workers.items() if q == app_id and p.poll() is None]
            active = celery_app.control.inspect(destination=nodes, timeout=2.0).active() or {}
            for node, tasks in active.items():
                for task in tasks:
                    args = task.get("args") or []
                    if isinstance(args, str):  # older Celery: the repr of the list
                        args = [int(a) for a in re.findall(r"\d+", args)]
                    if not args:
                        continue
                    episode = EpisodeRecord.objects.filter(pk=int(args[0])).first()
                    if episode is None or episode.status != "running":
                        continue
                    queue, process = soak.workers[node]
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
                    episode.refresh_from_db()
                    replacement = soak.start_worker(queue)
                    fault.note = (
                        f"{node} killed mid-episode {episode.pk} ({app_id}, attempt "
                        f"{episode.attempts}, status {episode.status} after the kill); "
                        f"replacement {replacement}"
                    )
                    fault.ended = time.monotonic()
                    fault.wall_ended = time.time()
                    return fault, str(episode.pk)
        time.sleep(0.2)
    fault.note = "FAILED: no worker was running an episode within 120 s"
    fault.ended, fault.wall_ended = time.monotonic(), time.time()
    return fault, ""


def restart(soak: Soak, service: str, down_s: float) -> Fault:
    """Stop ``service`` (redis|postgres), wait ``down_s`` seconds, start it again."""
    from django.db import connections

    fault = Fault(f"restart {service}", started=time.monotonic(), wall_started=time.time())
    soak.services("stop", service)
    connections.close_all()
    time.sleep(down_s)
    soak.services("start", service)
    fault.ended, fault.wall_ended = time.monotonic(), time.time()
    fault.note = f"down {fault.ended - fault.started:.1f} s"
    return fault


def logs_scan(run_dir: Path) -> dict[str, Counter[int]]:
    """Per event (scored, requeued, retried, discarded): episode id -> lines in all worker logs."""
    events: dict[str, Counter[int]] = defaultdict(Counter)
    patterns = {"scored": SCORED, "requeued": REQUEUED, "retried": RETRIED,
                "discarded": DISCARDED}  # fmt: skip
    for log in sorted(run_dir.glob("worker-*.log")):
        text = log.read_text(errors="replace")
        for event, pattern in patterns.items():
            for match in pattern.finditer(text):
                events[event][int(match.group(1))] += 1
    return events


def report(
    t0: float,
    round_ids: list[int],
    apps: list[str],
    faults: list[Fault],
    run_dir: Path,
    grace_s: float,
    wall_s: float,
) -> bool:
    """Print the report (``t0``: the run's start, monotonic clock); return True when nothing
    was lost or scored twice."""
    from django.db.models import Sum

    from submissions.models import EpisodeAggregate, EpisodeRecord, Submission

    episodes = list(
        EpisodeRecord.objects.filter(submission__round_id__in=round_ids).values(
            "pk", "app_id", "status", "attempts", "wall_s", "started_at", "finished_at",
            "failure", "details", "submission_id",
        )
    )  # fmt: skip
    events = logs_scan(run_dir)
    total = len(episodes)
    lost = [e for e in episodes if e["status"] not in FINAL]
    twice = {pk: n for pk, n in events["scored"].items() if n > 1}
    done_ids = {e["pk"] for e in episodes if e["status"] == "done"}
    unlogged = sorted(done_ids - set(events["scored"]))
    # aggregate rows (total level) against the done episodes of each submission and app
    done_by = Counter((e["submission_id"], e["app_id"]) for e in episodes if e["status"] == "done")
    sums = (
        EpisodeAggregate.objects.filter(submission__round_id__in=round_ids, level=0)
        .values("submission_id", "app_id")
        .annotate(n=Sum("n"))
    )
    aggregated = {(r["submission_id"], r["app_id"]): r["n"] or 0 for r in sums}
    mismatched = sorted(k for k in set(done_by) | set(aggregated)
                        if done_by.get(k, 0) != aggregated.get(k, 0))  # fmt: skip
    errors = [e for e in episodes if e["status"] == "error"]
    open_submissions = Submission.objects.filter(
        round_id__in=round_ids, status__in=["queued", "running"]
    ).count()

    def window(e: Mapping[str, Any]) -> str:
        """The fault(s) whose window (the fault, then ``grace_s``) holds the episode's end,
        else those its run overlaps, else "none"."""
        start = e["started_at"].timestamp() if e["started_at"] else 0.0
        end = e["finished_at"].timestamp() if e["finished_at"] else time.time()
        hits = [f.name for f in faults if f.wall_started <= end <= f.wall_ended + grace_s]
        hits = hits or [f.name for f in faults
                        if start <= f.wall_ended + grace_s and end >= f.wall_started]  # fmt: skip
        return "+".join(hits) or "none"

    print(f"\n=== soak report: {total} episodes in {wall_s / 60:.1f} min ===")
    print("\nfaults injected:")
    for f in faults:
        print(f"  {f.name:<17} at +{f.started - t0:4.0f} s  {f.note}")
    by_app = Counter(e["app_id"] for e in episodes)
    print(f"\n{'app':<6} {'episodes':>8} {'done':>6} {'error':>6} {'lost':>5} {'retried':>7} "
          f"{'requeued':>8} {'p50 s':>7} {'p95 s':>7} {'q2v p50':>8} {'q2v p95':>8}")  # fmt: skip
    for app in apps:
        mine = [e for e in episodes if e["app_id"] == app]
        walls = [e["wall_s"] for e in mine if e["status"] == "done" and e["wall_s"] is not None]
        q2v = [
            (e["finished_at"] - e["started_at"]).total_seconds()
            for e in mine
            if e["status"] in ("done", "error") and e["started_at"] and e["finished_at"]
        ]
        ids = {e["pk"] for e in mine}
        print(
            f"{app:<6} {by_app[app]:>8} {sum(e['status'] == 'done' for e in mine):>6} "
            f"{sum(e['status'] == 'error' for e in mine):>6} "
            f"{sum(e['status'] not in FINAL for e in mine):>5} "
            f"{sum(n for pk, n in events['retried'].items() if pk in ids):>7} "
            f"{sum(n for pk, n in events['requeued'].items() if pk in ids):>8} "
            f"{percentile(walls, 0.5):>7.2f} {percentile(walls, 0.95):>7.2f} "
            f"{percentile(q2v, 0.5):>8.2f} {percentile(q2v, 0.95):>8.2f}"
        )
    print("  (p50/p95: the episode's wall_s; q2v: last claim to verdict stored, seconds)")
    print("\ninfrastructure failures (episodes closed as error) by cause:")
    causes = Counter(
        (e["app_id"], (e["details"] or {}).get("error_kind", "?"), e["failure"][:90], window(e))
        for e in errors
    )
    for (app, kind, message, during), n in causes.most_common():
        print(f"  {n:>4}  {app:<6} {kind:<22} during {during:<16} {message}")
    if not causes:
        print("     0")
    outside = sum(n for (_, _, _, during), n in causes.items() if during == "none")
    discarded = sum(events["discarded"].values())
    share = len(errors) / total if total else 0.0
    ok = not lost and not twice and not mismatched
    print("\nsummary:")
    print(f"  episodes lost (not final):          {len(lost):>5}   target 0"
          f"{'' if not lost else '  FAIL: ' + str([e['pk'] for e in lost][:20])}")  # fmt: skip
    print(f"  episodes scored twice (logs):       {len(twice):>5}   target 0"
          f"{'' if not twice else '  FAIL: ' + str(sorted(twice)[:20])}")  # fmt: skip
    print(f"  aggregates != done episodes:        {len(mismatched):>5}   target 0"
          f"{'' if not mismatched else '  FAIL: ' + str(mismatched[:10])}")  # fmt: skip
    print(f"  done with no 'scored' log line:     {len(unlogged):>5}   (log check coverage)")
    print(f"  infrastructure failures:            {len(errors):>5}   {100 * share:.2f}% "
          f"(target <= {100 * INFRA_TARGET:.1f}%: {'ok' if share <= INFRA_TARGET else 'OVER'})")
    print(f"    outside every fault window:       {outside:>5}   (may be caused by another "
          "episode; target 0)")
    print(f"  verdicts discarded (late runs):     {discarded:>5}")
    print(f"  submissions still open:             {open_submissions:>5}")
    print(f"  result: {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:  # noqa: PLR0915 - one linear run
    """Set up, run the rounds with the faults, report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=1000, help="episodes in all (about)")
    parser.add_argument("--mix", default="", help="app=weight,... (default: see the docstring)")
    parser.add_argument("--run-dir", default=os.environ.get("NETARENA_RUN_DIR", "/tmp/soak-run"))
    parser.add_argument(
        "--redis-port", default=os.environ.get("NETARENA_REDIS_PORT", "6397")
    )
    parser.add_argument("--pg-port", default=os.environ.get("NETARENA_PG_PORT", "5447"))
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="give up after this")
    parser.add_argument("--grace-s", type=float, default=60.0,
                        help="a fault's window lasts this long after it ends")  # fmt: skip
    parser.add_argument("--down-s", type=float, default=3.0,
                        help="seconds Redis and PostgreSQL stay down")  # fmt: skip
    parser.add_argument("--keep-services", action="store_true",
                        help="leave Redis and PostgreSQL running at the end")  # fmt: skip
    args = parser.parse_args()
    apps = app_ids()
    weights = parse_mix(args.mix, apps)
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("worker-*"):
        old.unlink()
    vault = run_dir / "vault"
    vault.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.update(
        NETARENA_RUN_DIR=str(run_dir),
        NETARENA_REDIS_PORT=str(args.redis_port),
        NETARENA_PG_PORT=str(args.pg_port),
    )
    soak = Soak(run_dir, env)
    broker = soak.services("start", "redis")
    pg_url = soak.services("start", "postgres")
    import psycopg
    import redis

    redis.Redis.from_url(broker).flushdb()
    admin_url = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    env.update(
        DATABASE_URL=pg_url.rsplit("/", 1)[0] + f"/{DATABASE}",
        CELERY_BROKER_URL=broker,
        CELERY_RESULT_BACKEND=broker,
        NETARENA_ORACLE_VAULT_DIR=str(vault),
        NETARENA_EPISODE_HEARTBEAT_S=str(HEARTBEAT_S),
        NETARENA_EPISODE_STALE_S=str(STALE_S),
        NETARENA_REQUEUE_EVERY_S=str(REQUEUE_EVERY_S),
        NETARENA_EPISODE_RETRY_BACKOFF_S="5",
        NETARENA_VARIANT_DIRS="",
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONWARNINGS="ignore:You're running the worker with superuser privileges",
    )
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    from evaluator.registry import get_app
    from submissions.reference_agents import (
        reference_agent_specs,
        register_reference_agent,
        serve_reference_agent,
    )
    from submissions.services.rounds import round_create

    call_command("migrate", verbosity=0)
    faults: list[Fault] = []
    ok = False
    t0 = time.monotonic()
    try:
        per_app: Counter[str] = Counter()
        for kind, protocol, agent_apps in reference_agent_specs(apps):
            served = serve_reference_agent(
                kind=kind, protocol=protocol, apps=agent_apps, vault_dir=vault, log_dir=run_dir
            )
            soak.agents.append(served.process)
            register_reference_agent(served)
            per_app.update(agent_apps)
        queries = plan(args.episodes, weights, per_app)
        print("mix: " + ", ".join(
            f"{a} {queries[a]} queries x {per_app[a]} agents = {queries[a] * per_app[a]} "
            f"episodes (weight {weights[a]:g})" for a in apps))  # fmt: skip
        for app_id in apps:
            get_app(app_id)  # fail here, not in a worker, if an app cannot load
        nodes = [soak.start_worker(CONTROL_QUEUE, beat=True, wait=False)]
        nodes += [soak.start_worker(a, wait=False) for a in apps for _ in range(2)]
        soak.wait_ready(nodes)
        print(f"workers: {', '.join(sorted(soak.workers))}", flush=True)
        t0 = time.monotonic()
        round_ids = [
            round_create(apps=[app_id], queries_per_app=queries[app_id]).pk for app_id in apps
        ]
        total = sum(queries[a] * per_app[a] for a in apps)
        pending_faults = list(FAULTS)
        last_print = 0.0
        while True:
            counts = with_db(lambda: status_counts(round_ids))
            final = sum(counts[s] for s in FINAL)
            if pending_faults and final >= pending_faults[0][1] * total:
                name, _ = pending_faults.pop(0)
                print(f"  [{time.monotonic() - t0:6.0f} s] {final}/{total} final: {name}",
                      flush=True)  # fmt: skip
                if name == "kill worker":
                    fault, _ = with_db(lambda: kill_mid_episode(soak, apps))
                elif name == "restart redis":
                    fault = restart(soak, "redis", args.down_s)
                else:
                    fault = restart(soak, "postgres", args.down_s)
                print(f"           {fault.note}", flush=True)
                faults.append(fault)
                continue
            if final >= total and sum(counts.values()) >= total:
                break
            if time.monotonic() - t0 > args.timeout_s:
                print(f"timed out after {args.timeout_s:.0f} s", flush=True)
                break
            if time.monotonic() - last_print > 30:
                last_print = time.monotonic()
                print(f"  [{time.monotonic() - t0:6.0f} s] {final}/{total} final "
                      f"{dict(sorted(counts.items()))}", flush=True)  # fmt: skip
            time.sleep(1.0)
        wall_s = time.monotonic() - t0
        time.sleep(2.0)  # the last log lines
        ok = with_db(lambda: report(t0, round_ids, apps, faults, run_dir, args.grace_s, wall_s))
        ok = ok and len(faults) == len(FAULTS) and not any("FAILED" in f.note for f in faults)
    finally:
        soak.stop_all()
        if not args.keep_services:
            soak.services("stop", "redis")
            soak.services("stop", "postgres")
    print(f"logs: {run_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
