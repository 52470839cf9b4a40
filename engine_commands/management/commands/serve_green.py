"""``python manage.py serve_green``: serve the AgentBeats green agent of one app over A2A.

The same options as ``python -m evaluator.green`` (see ``evaluator/green/cli.py``;
docs/agentbeats.md). The command never touches the database: it skips Django's system and
migration checks.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.green.cli import add_arguments, run


class Command(BaseCommand):
    """Serve the green agent (the assessor) of one app."""

    help = (
        "Serve the AgentBeats green agent of one app: an A2A server that assesses the purple "
        "agent named in each request and streams a result per query and a summary."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the options of ``evaluator.green.cli``."""
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        """Serve until interrupted. Raises ``CommandError`` when the port cannot be bound, or
        no app is given (``--app`` or ``NETARENA_GREEN_APP``), or ``NETARENA_GREEN_ALLOW_NETWORKS``
        is malformed."""

        def write_line(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            run(argparse.Namespace(**options), write_line)
        except OSError as exc:
            where = f"{options['host']}:{options['port']}"
            raise CommandError(f"cannot listen on {where}: {exc}") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
