"""``python manage.py export_sft --app APP --count N --seed S --levels 1,2,3 --out FILE.jsonl``.

A thin command over :func:`training.sft.export_sft` (see docs/training.md).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluator.app import DependencyMissingError, UnknownAppError
from evaluator.registry import app_ids
from training.sft import SPLITS, export_sft


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--levels must be comma-separated integers, not {text!r}") from exc
    if not levels:
        raise CommandError("--levels names no level")
    return levels


class Command(BaseCommand):
    """Export oracle episodes, judged correct and safe, as chat-format JSONL + dataset card."""

    help = (
        "Write supervised fine-tuning examples: for each level, COUNT queries of the split's "
        "seed range are played by the oracle in the real emulator; episodes our judge scores "
        "correct and safe become chat examples (system, user observations, assistant replies). "
        "A dataset card README.md is written next to the file. Exits 1 when any episode was "
        "dropped for an infrastructure failure."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """--app, --count, --seed, --levels, --out, --split, --exclude."""
        parser.add_argument(
            "--app", required=True, help="app id, one of " + ", ".join(app_ids())
        )
        parser.add_argument("--count", type=int, required=True, help="queries per level")
        parser.add_argument(
            "--seed", type=int, required=True, help="seed within the split's range, [0, 2**127)"
        )
        parser.add_argument("--levels", default="1,2,3", help="comma-separated levels (1,2,3)")
        parser.add_argument("--out", required=True, type=Path, help="output FILE.jsonl")
        parser.add_argument("--split", default="train", choices=sorted(SPLITS))
        parser.add_argument(
            "--exclude",
            type=Path,
            default=None,
            help="an exported file whose queries must not appear (the training file)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the export and print its summary."""
        command = "python manage.py export_sft " + shlex.join(sys.argv[2:])
        try:
            summary = export_sft(
                options["app"],
                count=options["count"],
                seed=options["seed"],
                levels=_levels(options["levels"]),
                out=options["out"],
                split=options["split"],
                exclude=options["exclude"],
                command=command,
            )
        except (ValueError, UnknownAppError, DependencyMissingError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{summary.written} examples written to {options['out']} ({summary.split}, "
            f"levels {summary.levels}); dropped: {summary.dropped_incorrect} not correct and "
            f"safe, {summary.dropped_infrastructure} infrastructure, {summary.dropped_overlap} "
            f"overlapping; {summary.seconds} s"
        )
        if summary.dropped_infrastructure:
            raise CommandError("some episodes failed for infrastructure reasons")
