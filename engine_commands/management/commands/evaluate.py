"""``python manage.py evaluate``: evaluate one agent endpoint from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.cli import add_evaluate_arguments, run_evaluate


class Command(BaseCommand):
    """Generate fresh queries, run the agent on them, print a summary and write a result file."""

    help = (
        "Evaluate an agent endpoint on freshly generated queries; prints correctness, safety "
        "and latency per app and level with 95% CIs, and writes --json OUT."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Options shared with ``python -m evaluator evaluate``."""
        add_evaluate_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the evaluation; a non-zero status becomes a ``CommandError``."""
        import argparse

        status = run_evaluate(argparse.Namespace(**options), out=self.stdout)
        if status != 0:
            raise CommandError("evaluation did not run", returncode=status)
