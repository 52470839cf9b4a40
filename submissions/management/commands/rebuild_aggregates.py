"""``python manage.py rebuild_aggregates [--submission S ...]``: recompute the leaderboard sums."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from submissions.aggregates import aggregates_rebuild


class Command(BaseCommand):
    """Recompute the maintained per-group episode sums (``EpisodeAggregate``) from the episodes."""

    help = (
        "Recompute the leaderboard's maintained sums (one row per submission, app, level and "
        "label) from the stored episodes: all of them, or those of the given submissions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Optional submission ids."""
        parser.add_argument(
            "--submission", type=int, action="append", default=None, help="a submission id"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Rebuild and print how many group rows were written."""
        written = aggregates_rebuild(submission_ids=options["submission"])
        self.stdout.write(f"rebuilt {written} aggregate rows")
