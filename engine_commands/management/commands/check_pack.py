"""``python manage.py check_pack DIR [--queries N] [--seed S] [--spent DIR ...]``.

A thin command over :func:`evaluator.pack_check.check_pack` (docs/writing-a-variant-pack.md,
"Checking a pack"). It never touches the database: Django's system and migration checks are
skipped.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.pack_check import add_arguments, run


class Command(BaseCommand):
    """Check a variant pack: determinism, ground truth, reference agents, scripted ceiling,
    novelty; exit 1 when any check fails (2 when the pack cannot be checked)."""

    help = (
        "Check a variant pack before trusting it: its queries are byte-identical when "
        "generated in separate processes, every ground truth passes the app's own checks, the "
        "oracle solves every query safely and the null agent none (real episodes), the public "
        "scripted agent solves at most 20%% of any label, and how many of its clause forms the "
        "public generator or spent packs already produce. Prints one line per check and per "
        "failed rule (rule and query); exits 1 when a check fails."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """The options of :func:`evaluator.pack_check.add_arguments`."""
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the checks and print the report."""
        status, text = run(argparse.Namespace(**options))
        self.stdout.write(text)
        if status:
            raise CommandError(
                "the pack failed a check" if status == 1 else "the pack could not be checked",
                returncode=status,
            )
