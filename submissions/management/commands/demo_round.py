"""``python manage.py demo_round``: serve the reference agents, start a round, wait for it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.registry import app_ids
from submissions.models import EpisodeRecord, Submission
from submissions.reference_agents import (
    reference_agent_specs,
    register_reference_agent,
    serve_reference_agent,
)
from submissions.selectors import standings
from submissions.services.rounds import round_close, round_create


class Command(BaseCommand):
    """Run one real evaluation round through Celery and Redis and print the standings."""

    help = (
        "Start the reference agents (oracle, null, heuristic, scripted) as local HTTP servers, "
        "register them, start an evaluation round on fresh queries (drawing from the sealed "
        "held-out packs of NETARENA_VARIANT_DIRS) and wait until it has finished; with --close, "
        "close it and print its standings. "
        "Needs a running Celery worker consuming every queue of "
        "`python -m evaluator.registry queues`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Options."""
        parser.add_argument(
            "--apps",
            default=",".join(app_ids()),
            help="comma-separated app ids (default: every registered app)",
        )
        parser.add_argument("--queries", type=int, default=12, help="queries per app")
        parser.add_argument(
            "--serve-agents", action="store_true", help="start the reference agent servers first"
        )
        parser.add_argument("--pidfile", default=None, help="write the agent servers' pids here")
        parser.add_argument(
            "--bind", default="127.0.0.1", help="address the agent servers listen on"
        )
        parser.add_argument(
            "--advertise",
            default="127.0.0.1",
            help="host name in the registered agent URLs (what the workers call)",
        )
        parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up after this")
        parser.add_argument(
            "--close",
            action="store_true",
            help="close the round once it has finished: its seed and salt are revealed, its "
            "held-out packs spent and published, and it becomes the board's ranking of record",
        )
        parser.add_argument(
            "--no-round",
            action="store_true",
            help="only serve and register the agents, then keep serving until stopped (a round "
            "is started elsewhere, e.g. on the site's rounds page)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Serve, register, start the round, poll until every submission is closed."""
        apps = [a.strip() for a in options["apps"].split(",") if a.strip()]
        if options["serve_agents"]:
            pids = []
            log_dir = Path(settings.BASE_DIR) / "var" / "run"
            for kind, protocol, agent_apps in reference_agent_specs(apps):
                served = serve_reference_agent(
                    kind=kind,
                    protocol=protocol,
                    apps=agent_apps,
                    vault_dir=settings.NETARENA["ORACLE_VAULT_DIR"],
                    log_dir=log_dir,
                    bind_host=options["bind"],
                    advertise_host=options["advertise"],
                )
                pids.append(str(served.process.pid))
                agent = register_reference_agent(served)
                self.stdout.write(f"serving {agent} ({protocol}) at {served.url}")
            if options["pidfile"]:
                Path(options["pidfile"]).write_text(" ".join(pids))
        if options["no_round"]:
            self.stdout.write("agents ready", ending="\n")
            self.stdout.flush()
            while True:  # until the process is stopped; the agent servers are its children
                time.sleep(3600)
        evaluation_round = round_create(apps=apps, queries_per_app=options["queries"])
        self.stdout.write(
            f"started {evaluation_round} on {apps}, {options['queries']} queries per app"
        )
        deadline = time.monotonic() + options["timeout_s"]
        submissions = Submission.objects.filter(round=evaluation_round)
        last_done = -1
        while submissions.exclude(status__in=["finished", "failed"]).exists():
            if time.monotonic() > deadline:
                raise CommandError(
                    f"{evaluation_round} did not finish within {options['timeout_s']} s"
                )
            done = (
                EpisodeRecord.objects.filter(submission__round=evaluation_round)
                .exclude(status__in=["pending", "running"])
                .count()
            )
            total = EpisodeRecord.objects.filter(submission__round=evaluation_round).count()
            if done != last_done:
                self.stdout.write(f"  {done}/{total} episodes done")
                last_done = done
            time.sleep(1.0)
        for submission in submissions:
            if submission.status == "failed":
                self.stdout.write(f"{submission}: FAILED: {submission.error}")
        if not options["close"]:
            self.stdout.write(f"{evaluation_round} finished; its standings show once it is closed")
            return
        round_close(round_id=evaluation_round.pk)
        for app_id in apps:
            self.stdout.write(f"\n{app_id}")
            for row in standings(app_id=app_id, round_number=evaluation_round.number):
                self.stdout.write(
                    f"  #{row.rank} {row.agent.name:<22} "
                    f"correct {100 * row.correctness.value:5.1f}% "
                    f"safe {100 * row.safety.value:5.1f}% "
                    f"latency {row.latency_s.value:.3f}s n={row.n}"
                    + (" OVERFIT (held-out gap below 0)" if row.overfit else "")
                )
