"""Celery workers of the deployment: one definition parameterised by queue, and its check.

Every worker service of ``docker-compose.yml`` runs ``python -m config.workers start`` and
says which queues it consumes in its environment:

* ``NETARENA_WORKER_QUEUES``: comma-separated queue names (``control`` or app ids), or
  :data:`REST` for "every queue of the registry not in ``NETARENA_WORKER_EXCEPT``";
* ``NETARENA_WORKER_EXCEPT``: comma-separated queues that other workers consume (with
  :data:`REST` only);
* ``NETARENA_WORKER_CONCURRENCY`` (default 1) and ``NETARENA_WORKER_NAME`` (the Celery node
  name before ``@``; default the queue when there is one, else ``apps``).

Apps whose episodes need more than the runtime image (privileges, binaries) have a worker
service of their own; one ``REST`` worker consumes the queues of every other registered app, so
an app added to ``evaluator/registry.py`` is served with no change to the deployment files.

``python -m config.workers check [FILE]`` fails (exit 1) when a queue of the registry has no
consumer in the compose file, when two workers consume one queue, or when a worker names a
queue the registry does not have. Neither needs Django settings or a database.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from evaluator.registry import worker_queues

#: ``NETARENA_WORKER_QUEUES`` value of the worker consuming every queue no other worker does.
REST = "*"
#: The compose file checked by default.
COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def resolve_queues(queues: str, exclude: str = "") -> list[str]:
    """The queues a worker consumes given its ``NETARENA_WORKER_QUEUES`` and
    ``NETARENA_WORKER_EXCEPT`` values (:data:`REST`: the registry's queues less ``exclude``,
    in registry order; possibly none)."""
    if queues.strip() == REST:
        excluded = set(_names(exclude))
        return [queue for queue in worker_queues() if queue not in excluded]
    return _names(queues)


def worker_command(env: Mapping[str, str]) -> list[str] | None:
    """The ``celery worker`` command line for a worker environment ``env``; None when it has
    no queue to consume (a :data:`REST` worker while every app has a worker of its own).

    Raises:
        ValueError: ``NETARENA_WORKER_QUEUES`` is not set.
    """
    if not env.get("NETARENA_WORKER_QUEUES", "").strip():
        raise ValueError("NETARENA_WORKER_QUEUES is not set (queue names, or '*')")
    queues = resolve_queues(env["NETARENA_WORKER_QUEUES"], env.get("NETARENA_WORKER_EXCEPT", ""))
    if not queues:
        return None
    name = env.get("NETARENA_WORKER_NAME") or (queues[0] if len(queues) == 1 else "apps")
    concurrency = env.get("NETARENA_WORKER_CONCURRENCY") or "1"
    return [
        "celery", "-A", "config", "worker", "-Q", ",".join(queues),
        "--concurrency", concurrency, "--hostname", f"{name}@%h", "--loglevel", "INFO",
    ]  # fmt: skip


def compose_consumers(compose: Mapping[str, Any]) -> dict[str, list[str]]:
    """Service name -> the queues it consumes, for every worker service of a parsed compose
    file (a service whose environment sets ``NETARENA_WORKER_QUEUES``)."""
    consumers = {}
    for name, service in (compose.get("services") or {}).items():
        env = service.get("environment") or {}
        if isinstance(env, list):  # the KEY=VALUE list form
            env = dict(item.partition("=")[::2] for item in env)
        if "NETARENA_WORKER_QUEUES" in env:
            consumers[name] = resolve_queues(
                str(env["NETARENA_WORKER_QUEUES"]), str(env.get("NETARENA_WORKER_EXCEPT", ""))
            )
    return consumers


def compose_problems(compose: Mapping[str, Any]) -> list[str]:
    """What is wrong with the workers of a parsed compose file (empty when nothing is)."""
    consumers = compose_consumers(compose)
    registered = worker_queues()
    problems = []
    owners: dict[str, list[str]] = {}
    for service, queues in consumers.items():
        for queue in queues:
            owners.setdefault(queue, []).append(service)
            if queue not in registered:
                problems.append(f"{service} consumes {queue!r}, a queue of no registered app")
    missing = [queue for queue in registered if queue not in owners]
    if missing:
        problems.append(f"no worker consumes queue(s): {', '.join(missing)}")
    for queue, services in owners.items():
        if len(services) > 1:
            problems.append(f"queue {queue!r} is consumed by {', '.join(services)}")
    return problems


def main(argv: Sequence[str]) -> int:
    """``start`` (exec the worker of this environment) or ``check [FILE]``; see the module."""
    if argv[:1] == ["start"] and len(argv) == 1:
        command = worker_command(os.environ)
        if command is None:
            print("no queue left for this worker: every app has a worker of its own; idle")  # noqa: T201
            sys.stdout.flush()
            os.execvp("sleep", ["sleep", "infinity"])  # noqa: S606 - fixed argv
        os.execvp(command[0], command)  # noqa: S606 - argv built by worker_command
    if argv[:1] == ["check"] and len(argv) <= 2:
        path = Path(argv[1]) if len(argv) == 2 else COMPOSE_FILE
        problems = compose_problems(yaml.safe_load(path.read_text()))
        for problem in problems:
            print(f"{path}: {problem}", file=sys.stderr)  # noqa: T201
        return 1 if problems else 0
    print("usage: python -m config.workers start | check [docker-compose.yml]", file=sys.stderr)  # noqa: T201
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
