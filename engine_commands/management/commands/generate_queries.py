"""``python manage.py generate_queries --app A --seed S --count N``: regenerate a batch."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.app import UnknownAppError
from evaluator.commitment import query_listing, round_commitment
from evaluator.registry import get_app


class Command(BaseCommand):
    """Print the queries a seed generates (one JSON object per line), to check a closed round."""

    help = (
        "Regenerate the queries of a seed exactly as a submission or round did: one JSON line "
        "per query with its fingerprint (SHA-256 of prompt and ground truth), then a last line "
        "with the round commitment of this seed and the apps' generator versions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Options."""
        parser.add_argument(
            "--app", required=True, help="app id, or a comma-separated list (a round's apps)"
        )
        parser.add_argument("--seed", required=True, type=int, help="the revealed seed")
        parser.add_argument("--count", required=True, type=int, help="queries per app")
        parser.add_argument("--level", type=int, default=None, help="only this level")
        parser.add_argument(
            "--ground-truth", action="store_true", help="include each query's ground truth"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Generate and print."""
        try:
            apps = [get_app(a.strip()) for a in options["app"].split(",") if a.strip()]
        except UnknownAppError as exc:
            raise CommandError(str(exc)) from None
        if not apps:
            raise CommandError("--app names no app")
        if options["count"] < 1:
            raise CommandError("--count must be at least 1")
        for app in apps:
            try:
                rows = query_listing(
                    app,
                    options["seed"],
                    options["count"],
                    level=options["level"],
                    ground_truth=options["ground_truth"],
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            for row in rows:
                self.stdout.write(json.dumps(row, sort_keys=True))
        versions = {app.app_id: app.version for app in apps}
        digest = round_commitment(options["seed"], versions)
        self.stdout.write(json.dumps({"commitment": digest, "versions": versions}))
