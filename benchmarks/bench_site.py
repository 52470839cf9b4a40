"""Leaderboard page and API cost with a realistic amount of data (not a test).

Builds a throw-away SQLite database with AGENTS agents, each with one finished submission of
QUERIES episodes per app, then times the leaderboard page and the JSON API (median of runs).

    .venv/bin/python benchmarks/bench_site.py [--agents 20] [--queries 100] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    db = Path(tempfile.mkdtemp()) / "bench.sqlite3"
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from submissions.models import Agent, EpisodeRecord, Submission, Team

    call_command("migrate", verbosity=0)
    rng = random.Random(0)
    team = Team.objects.create(name="bench")
    apps = ["malt", "route", "k8s"]
    for a in range(args.agents):
        agent = Agent.objects.create(
            team=team, name=f"agent-{a}", endpoint_url="https://a.example", protocol="http-json"
        )
        skill = rng.random()
        sub = Submission.objects.create(
            agent=agent,
            seed=a,
            apps=apps,
            queries_per_app=args.queries,
            status="finished",
            finished_at=timezone.now(),
        )
        EpisodeRecord.objects.bulk_create(
            EpisodeRecord(
                submission=sub,
                app_id=app,
                index=i,
                query_id=f"{app}-{a}-{i}",
                level=1 + i % 3,
                label=["add", "remove+count", "DR", "RI+CP"][i % 4],
                query={},
                status="done",
                correct=rng.random() < skill,
                safe=rng.random() < 0.9,
                latency_s=rng.random(),
                wall_s=1.0,
                agent_s=0.5,
                steps=1 + i % 5,
            )
            for app in apps
            for i in range(args.queries)
        )
    client = Client()
    for path in ("/", "/api/v1/leaderboard/"):
        client.get(path)  # warm up
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - t0)
            assert response.status_code == 200
        print(
            f"{path:<24} agents={args.agents} episodes/agent/app={args.queries} "
            f"median {1000 * statistics.median(times):.1f} ms  (min {1000 * min(times):.1f})"
        )


if __name__ == "__main__":
    main()
