"""``python manage.py rejudge EPISODE... | --submission S | --round R``: replay stored episodes."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from submissions.rejudging import episodes_to_rejudge, rejudge_episodes


class Command(BaseCommand):
    """Replay stored agent replies in fresh emulators; exit 1 when a verdict is not reproduced."""

    help = (
        "Rejudge finished episodes: replay each episode's stored agent replies on its stored "
        "query in a fresh emulator and compare correct, safe, failure, steps and changed_state "
        "with the stored verdict. Exits with status 1 when any verdict differs or an episode "
        "cannot be replayed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Episode ids, or a submission, or a round."""
        parser.add_argument("episodes", nargs="*", type=int, help="episode record ids")
        parser.add_argument("--submission", type=int, default=None, help="a submission id")
        parser.add_argument("--round", type=int, default=None, help="a round number")

    def handle(self, *args: Any, **options: Any) -> None:
        """Replay, print one line per episode and a summary."""
        if not (options["episodes"] or options["submission"] or options["round"]):
            raise CommandError("name episode ids, --submission S or --round R")
        chosen = episodes_to_rejudge(
            episode_ids=options["episodes"],
            submission_id=options["submission"],
            round_number=options["round"],
        )
        if not chosen.exists():
            raise CommandError("no finished episode matches")
        reproduced = differing = unreplayable = 0
        for item in rejudge_episodes(chosen.iterator()):
            episode = item.episode
            where = (
                f"episode {episode.pk} (submission {episode.submission_id}, "
                f"{episode.app_id} #{episode.index})"
            )
            if item.outcome is None:
                unreplayable += 1
                self.stdout.write(f"NOT REPLAYABLE {where}: {item.reason}")
            elif item.reproduced:
                reproduced += 1
                self.stdout.write(f"same {where}")
            else:
                differing += 1
                diff = ", ".join(
                    f"{name}: stored {old!r}, replayed {new!r}"
                    for name, (old, new) in item.outcome.differences.items()
                )
                self.stdout.write(f"DIFFERENT {where}: {diff}")
        self.stdout.write(
            f"{reproduced} reproduced, {differing} different, {unreplayable} not replayable"
        )
        if differing or unreplayable:
            raise CommandError("some verdicts were not reproduced", returncode=1)
