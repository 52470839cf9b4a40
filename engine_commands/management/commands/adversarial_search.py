"""``manage.py adversarial_search --agent NAME|--agent-url URL --app APP --budget N --seed S``.

A thin command over :func:`training.adversarial_search.adversarial_search` (docs/training.md).
It never touches the database: Django's system and migration checks are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.agents import LOOPBACK_NETWORKS, PROTOCOLS, make_client
from evaluator.app import UnknownAppError
from evaluator.oracle_vault import OracleVault
from evaluator.registry import get_app
from training.adversarial_search import (
    REFERENCE_AGENTS,
    ClientFactory,
    Pull,
    adversarial_search,
    format_report,
    reference_clients,
    write_batch,
)


class Command(BaseCommand):
    """Search for the queries an agent fails with a bandit over labels and operand features."""

    help = (
        "Adversarial query search: Thompson sampling over label (and operand feature) arms "
        "spends BUDGET episodes where the agent fails most, then the same budget on the "
        "generator's own distribution; prints both failure rates (95%% Wilson) and the lift, "
        "and writes the failed queries, hardest arms first, as a replayable batch JSONL."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """Options."""
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--agent", choices=REFERENCE_AGENTS, help="reference agent, in process")
        who.add_argument("--agent-url", help="a served agent's endpoint")
        parser.add_argument("--protocol", choices=PROTOCOLS, default="openai-chat")
        parser.add_argument("--model", default=None, help="model name for openai-chat")
        parser.add_argument("--api-key-env", default=None, help="variable holding the API key")
        parser.add_argument("--timeout-s", type=float, default=60.0, help="per-reply deadline")
        parser.add_argument(
            "--allow-network",
            action="append",
            default=None,
            help="CIDR the agent may live in (default: loopback); repeatable",
        )
        parser.add_argument(
            "--oracle-vault", default=None, help="vault shared with a served oracle agent"
        )
        parser.add_argument("--app", required=True, help="app id")
        parser.add_argument("--budget", type=int, required=True, help="bandit episodes")
        parser.add_argument("--seed", type=int, required=True, help="search seed")
        parser.add_argument(
            "--out",
            default=None,
            help="batch JSONL of the hardest queries (the report goes to OUT.report.json)",
        )
        parser.add_argument(
            "--labels-only", action="store_true", help="arms are label combinations only"
        )
        parser.add_argument("--no-uniform", action="store_true", help="skip the uniform baseline")
        parser.add_argument("--max-steps", type=int, default=None, help="step budget")
        parser.add_argument("--quiet", action="store_true", help="no per-episode lines")

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the search, print the report, write the batch. Raises ``CommandError`` on bad
        options (unknown app, budget < 1, an endpoint refused by the outbound guard)."""
        try:
            app = get_app(options["app"])
        except UnknownAppError as exc:
            raise CommandError(str(exc)) from None
        if options["budget"] < 1:
            raise CommandError("--budget must be at least 1")
        client = None
        if options["agent"]:
            try:
                client_for: ClientFactory = reference_clients(options["agent"], app)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            agent = {"protocol": "in-process", "agent": options["agent"]}
        else:
            api_key = os.environ.get(options["api_key_env"]) if options["api_key_env"] else None
            allowed = options["allow_network"] or list(LOOPBACK_NETWORKS)
            try:
                client = make_client(
                    options["protocol"],
                    options["agent_url"],
                    api_key=api_key,
                    model=options["model"],
                    timeout_s=options["timeout_s"],
                    allowed_networks=allowed,
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            shared = client
            client_for = lambda query: shared  # noqa: E731 - one endpoint for every episode
            agent = client.describe()
        vault = OracleVault(options["oracle_vault"]) if options["oracle_vault"] else None

        def progress(pull: Pull) -> None:
            if options["quiet"]:
                return
            r = pull.result
            mark = "infra" if not r.scored else "FAIL " if pull.failed else "ok   "
            self.stdout.write(
                f"{pull.phase:<7} {mark} {pull.arm:<28} {r.query_id} steps={r.steps}"
                f"{'' if r.failure is None else ' failure=' + r.failure}"
            )
            self.stdout.flush()

        try:
            result = adversarial_search(
                app,
                client_for,
                budget=options["budget"],
                seed=options["seed"],
                agent=agent,
                features=not options["labels_only"],
                uniform=not options["no_uniform"],
                vault=vault,
                max_steps=options["max_steps"],
                on_pull=progress,
            )
        finally:
            if client is not None:
                client.close()
        report = result.report()
        self.stdout.write(format_report(report))
        if options["out"]:
            out = Path(options["out"])
            count = write_batch(out, result.hardest())
            report_path = out.with_name(out.name + ".report.json")
            report["command"] = "adversarial_search " + " ".join(
                f"--{k.replace('_', '-')} {v}"
                for k, v in options.items()
                if k in {"agent", "agent_url", "app", "budget", "seed"} and v is not None
            )
            report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            self.stdout.write(f"wrote {count} queries to {out} and the report to {report_path}")
