"""``python manage.py k8s_cluster up|down|status``: the embedded Kubernetes cluster.

A thin wrapper over :mod:`apps.k8s.cluster` (see docs/k8s-cluster.md). Needs root and the
binaries from ``scripts/build_k8s.sh``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    """Start, stop or inspect the cluster (etcd, kube-apiserver, controller-manager, node agent,
    the NetworkPolicy enforcer) inside its own network namespace."""

    help = (
        "up: start the embedded cluster (idempotent) and print the admin kubeconfig path; "
        "down: stop it and remove every process, namespace and rule; status: exit 3 if stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``action`` plus ``--json`` and ``--timeout`` (seconds, for ``up``)."""
        parser.add_argument("action", choices=["up", "down", "status"])
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds for 'up'")

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the action; failures become a ``CommandError`` with the component's log tail."""
        from apps.k8s.cluster.cli import cluster_action
        from apps.k8s.cluster.config import MissingBinaryError
        from apps.k8s.cluster.control_plane import ClusterError

        try:
            rc = cluster_action(
                options["action"],
                self.stdout,
                as_json=options["json"],
                timeout_s=options["timeout"],
            )
        except (ClusterError, MissingBinaryError, TimeoutError) as exc:
            raise CommandError(str(exc)) from exc
        if rc != 0:
            raise CommandError("cluster is not running", returncode=rc)
