"""``python manage.py k8s_connectivity --namespace NS [--json]``: measured pod connectivity.

Waits (bounded) until the dataplane reflects the API, then probes every pod -> pod:port pair
of the namespace from inside the pods' network namespaces (see docs/k8s-cluster.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    """Print the measured reachability matrix of one namespace."""

    help = "Probe every pod -> pod:containerPort pair of a namespace and print the matrix."

    def add_arguments(self, parser: CommandParser) -> None:
        """``--namespace``, ``--json``, ``--probe-timeout`` and ``--wait`` (seconds)."""
        parser.add_argument("--namespace", "-n", required=True)
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--probe-timeout", type=float, default=0.5, help="seconds per probe")
        parser.add_argument(
            "--wait", type=float, default=60.0, help="seconds to wait for the dataplane to converge"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Measure and print; a dataplane that does not converge is a ``CommandError``."""
        from apps.k8s.cluster.cli import connectivity_action

        try:
            connectivity_action(
                options["namespace"],
                self.stdout,
                as_json=options["json"],
                timeout_s=options["probe_timeout"],
                wait_s=options["wait"],
            )
        except TimeoutError as exc:
            raise CommandError(str(exc)) from exc
