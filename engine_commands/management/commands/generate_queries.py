"""``python manage.py generate_queries --app A --seed S --count N``: regenerate a batch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.app import UnknownAppError
from evaluator.commitment import query_listing, round_commitment
from evaluator.registry import get_app
from evaluator.variants import (
    VariantPackError,
    discover_packs,
    pack_unarchive,
    packs_commitment,
)


class Command(BaseCommand):
    """Print the queries a seed generates (one JSON object per line), to check a closed round."""

    help = (
        "Regenerate the queries of a seed exactly as a submission or round did: one JSON line "
        "per query with its fingerprint (SHA-256 of prompt and ground truth); with --salt, a "
        "last line with the round commitment of the seed, salt and the apps' versions; with "
        "--variant-pack, the round's published packs are mixed in at --held-out-share."
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
        parser.add_argument(
            "--salt", default=None, help="the revealed salt: also print the round commitment"
        )
        parser.add_argument(
            "--variant-pack", action="append", default=[], metavar="DIR",
            help="a published pack the round drew from: its archive (.tar.gz, as the site serves "
            "it at /packs/<sha256>.tar.gz), its directory or a directory of packs; repeatable",
        )
        parser.add_argument(
            "--held-out-share", type=float, default=None,
            help="share of queries drawn from the packs, as the round published it",
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
        unpacked = tempfile.TemporaryDirectory(prefix="netarena-packs-")
        self._unpacked = unpacked  # removed with the command object
        try:
            entries = [
                pack_unarchive(entry, Path(unpacked.name) / str(i))
                if entry.endswith((".tar.gz", ".tgz"))
                else entry
                for i, entry in enumerate(options["variant_pack"])
            ]
            packs = discover_packs(entries) if entries else []
        except VariantPackError as exc:
            raise CommandError(str(exc)) from None
        share = options["held_out_share"]
        if packs and share is None:
            raise CommandError("--variant-pack needs the round's --held-out-share")
        for app in apps:
            try:
                rows = query_listing(
                    app,
                    options["seed"],
                    options["count"],
                    level=options["level"],
                    ground_truth=options["ground_truth"],
                    packs=[p for p in packs if p.app_id == app.app_id],
                    held_out_share=share or 0.0,
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            for row in rows:
                self.stdout.write(json.dumps(row, sort_keys=True))
        if options["salt"] is not None:
            versions = {app.app_id: app.version for app in apps}
            committed = packs_commitment([p for p in packs if p.app_id in versions])
            digest = round_commitment(
                options["seed"], versions, options["salt"], committed, share
            )
            self.stdout.write(
                json.dumps({"commitment": digest, "versions": versions, "packs": committed})
            )
