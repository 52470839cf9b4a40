"""``python manage.py serve_agent``: serve a reference agent over HTTP.

The same options as ``python -m evaluator.reference`` (see ``evaluator/reference/cli.py``).
The command never touches the database: it skips Django's system and migration checks.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.reference.agents import AgentConfigError
from evaluator.reference.cli import add_arguments, run


class Command(BaseCommand):
    """Serve an oracle, null, heuristic or llm reference agent on one protocol."""

    help = "Serve a reference agent (oracle, null, heuristic, llm) on one agent protocol."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the options of ``evaluator.reference.cli``."""
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        """Serve until interrupted. Raises ``CommandError`` on bad options or a busy port."""

        def write_line(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            run(argparse.Namespace(**options), write_line)
        except AgentConfigError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            where = f"{options['host']}:{options['port']}"
            raise CommandError(f"cannot listen on {where}: {exc}") from None
