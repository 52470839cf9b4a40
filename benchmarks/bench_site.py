"""Leaderboard page and standings API at scale (not a test).

Builds AGENTS agents with SUBMISSIONS finished submissions each (older ones are replaced on
the board by the newest) and EPISODES scored episodes in all, spread over the three apps with
their real levels and labels, in PostgreSQL with ``COPY``; rebuilds the maintained aggregates
(``python manage.py rebuild_aggregates``'s code); then times REQUESTS requests of the
leaderboard page and of the standings API with Django's test client and prints p50 and p95.

    scripts/services.sh start postgres          # prints the server's URL
    DATABASE_URL=postgres://postgres@127.0.0.1:5440/netarena_bench \\
        .venv/bin/python benchmarks/bench_site.py [--agents 1000] [--episodes 1000000]

The database must be empty (it is migrated here) unless ``--reuse`` times existing data.
Target: p50 <= 100 ms for both. Figures: docs/site-performance.md.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator.registry import app_ids  # noqa: E402

APPS = tuple(app_ids())


def _labels() -> dict[str, list[tuple[int, str]]]:
    """The (level, label) pairs each app generates (from 300 real queries per app)."""
    from evaluator.registry import get_app

    return {
        app: sorted({(q.level, q.label) for q in get_app(app).generate(300, seed=7)})
        for app in APPS
    }


def _copy(cursor: object, table: str, columns: list[str], rows: io.StringIO) -> None:
    rows.seek(0)
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:  # type: ignore[attr-defined]
        while chunk := rows.read(1 << 20):
            copy.write(chunk)


def build(agents: int, submissions_per_agent: int, episodes: int, seed: int) -> None:
    """Insert teams, agents, submissions and episodes with COPY, then rebuild the aggregates."""
    from django.db import connection

    from submissions.aggregates import aggregates_rebuild
    from submissions.models import Agent, Submission, Team

    rng = random.Random(seed)
    groups = _labels()
    now = datetime.now(UTC)
    teams = Team.objects.bulk_create(Team(name=f"team-{t}") for t in range(agents // 4 + 1))
    agent_rows = Agent.objects.bulk_create(
        Agent(
            team=teams[a // 4],
            name=f"agent-{a:04d}",
            endpoint_url="https://agent.example/",
            protocol="http-json",
        )
        for a in range(agents)
    )
    subs = Submission.objects.bulk_create(
        Submission(
            agent=agent,
            seed=rng.getrandbits(64),
            apps=list(APPS),
            queries_per_app=1,
            status="finished",
            created_at=now,
            started_at=now,
            finished_at=now - timedelta(days=submissions_per_agent - k),
        )
        for agent in agent_rows
        for k in range(submissions_per_agent)
    )
    per_submission = episodes // len(subs)
    columns = [
        "submission_id",
        "app_id",
        "app_version",
        "index",
        "query_id",
        "level",
        "label",
        "query",
        "status",
        "attempts",
        "correct",
        "safe",
        "latency_s",
        "wall_s",
        "agent_s",
        "steps",
        "changed_state",
        "blast_radius",
        "input_tokens",
        "output_tokens",
        "served_model",
        "failure",
        "details",
        "transcript",
    ]
    t0 = time.perf_counter()
    written = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor
        buffer = io.StringIO()
        for sub in subs:
            skill = rng.random()
            care = 0.6 + 0.4 * rng.random()
            for i in range(per_submission):
                app = APPS[i % len(APPS)]
                level, label = groups[app][(i // 3) % len(groups[app])]
                correct = rng.random() < skill / level
                safe = rng.random() < care
                changed = rng.random() < 0.8
                tokens = rng.random() < 0.5
                buffer.write(
                    f"{sub.pk}\t{app}\t1\t{i // 3}\t{app}-{sub.pk}-{i}\t{level}\t{label}\t{{}}\t"
                    f"done\t1\t{'t' if correct else 'f'}\t{'t' if safe else 'f'}\t"
                    f"{rng.random() * 5:.4f}\t{rng.random() * 20:.4f}\t{rng.random() * 3:.4f}\t"
                    f"{1 + rng.randrange(10)}\t{'t' if changed else 'f'}\t"
                    f"{rng.randrange(20) if not safe else 0}\t"
                    f"{rng.randrange(5000) if tokens else chr(92) + 'N'}\t"
                    f"{rng.randrange(800) if tokens else chr(92) + 'N'}\t\t"
                    f"{'' if correct else 'not_repaired'}\t{{}}\t[]\n"
                )
                written += 1
            if buffer.tell() > 32 << 20:
                _copy(raw, "submissions_episoderecord", columns, buffer)
                buffer = io.StringIO()
        _copy(raw, "submissions_episoderecord", columns, buffer)
    print(f"inserted {written} episodes in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    rows = aggregates_rebuild()
    print(f"rebuilt {rows} aggregate rows in {time.perf_counter() - t0:.1f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def measure(path: str, requests: int) -> tuple[float, float, float]:
    """p50 and p95 of the wall time (ms) of ``requests`` GETs of ``path`` after one warm-up
    request, and the median CPU time of this process per request (ms: the cost on an idle
    host, without the database server's share)."""
    from django.test import Client

    client = Client()
    assert client.get(path).status_code == 200
    times = []
    cpu = []
    for _ in range(requests):
        t0, c0 = time.perf_counter(), time.process_time()
        response = client.get(path)
        times.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.process_time() - c0))
        assert response.status_code == 200, response.status_code
    times.sort()
    return (
        statistics.median(times),
        times[max(0, round(0.95 * len(times)) - 1)],
        statistics.median(cpu),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--submissions", type=int, default=2, help="per agent")
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="time the data already there")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        parser.error("set DATABASE_URL to an empty PostgreSQL database")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    import django

    django.setup()
    from django.core.management import call_command

    from submissions.models import EpisodeRecord

    call_command("migrate", verbosity=0)
    if not args.reuse:
        if EpisodeRecord.objects.exists():
            parser.error("the database holds episodes: use an empty one, or --reuse")
        build(args.agents, args.submissions, args.episodes, args.seed)
    print(f"episodes in the database: {EpisodeRecord.objects.count()}")
    for label, path in (
        ("leaderboard page", "/"),
        ("leaderboard page, one app", "/?app=route"),
        ("standings API", "/api/v1/leaderboard/"),
        ("standings API, one app", "/api/v1/leaderboard/?app_id=k8s"),
    ):
        p50, p95, cpu = measure(path, args.requests)
        print(
            f"{label:<28} {path:<34} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   cpu {cpu:6.1f} ms",
            flush=True,
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
