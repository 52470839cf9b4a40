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

On Kubernetes (``deploy/kubernetes/``, docs/deploy.md "On Kubernetes") the worker Deployments
are generated from the same worker services: ``python -m config.workers kubernetes`` prints
one Deployment per compose worker (its queues, image, privileges and volumes translated to a
pod spec) and ``python -m config.workers kubernetes --check`` fails when
:data:`KUBE_WORKERS_FILE` differs from that output or when its Deployments leave a registered
queue without a consumer; ``check FILE`` runs that consumer check on any manifests, e.g. the
output of ``kubectl kustomize deploy/kubernetes/overlays/production``.
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
#: The generated worker Deployments of the Kubernetes manifests.
KUBE_WORKERS_FILE = (
    Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "base" / "workers.yaml"
)
#: ConfigMap and Secret every pod of the site takes its settings from (deploy/kubernetes/).
KUBE_CONFIG_MAP, KUBE_SECRET = "netarena-config", "netarena-secrets"


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


def _service_env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.partition("=")[::2] for item in env)
    return {str(key): str(value) for key, value in env.items()}


def compose_consumers(compose: Mapping[str, Any]) -> dict[str, list[str]]:
    """Service name -> the queues it consumes, for every worker service of a parsed compose
    file (a service whose environment sets ``NETARENA_WORKER_QUEUES``)."""
    consumers = {}
    for name, service in (compose.get("services") or {}).items():
        env = _service_env(service)
        if "NETARENA_WORKER_QUEUES" in env:
            consumers[name] = resolve_queues(
                env["NETARENA_WORKER_QUEUES"], env.get("NETARENA_WORKER_EXCEPT", "")
            )
    return consumers


def compose_problems(compose: Mapping[str, Any]) -> list[str]:
    """What is wrong with the workers of a parsed compose file (empty when nothing is)."""
    return consumer_problems(compose_consumers(compose))


def consumer_problems(consumers: Mapping[str, Sequence[str]]) -> list[str]:
    """What is wrong with ``consumers`` (worker name -> the queues it consumes): a registered
    queue nobody consumes, a queue two workers consume, a queue of no registered app."""
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


#: The compose ``security_opt`` values a worker may use, as pod ``securityContext`` fields.
_SECURITY_OPTS: dict[str, tuple[str, dict[str, str]]] = {
    "seccomp=unconfined": ("seccompProfile", {"type": "Unconfined"}),
    "apparmor=unconfined": ("appArmorProfile", {"type": "Unconfined"}),
}
#: Seconds a worker pod has to finish its episode when stopped (Celery's warm shutdown); an
#: episode still running then is returned to its queue (late acknowledgement).
KUBE_GRACE_S = 120


def _kube_volumes(service: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod volumes and container mounts of a compose service's ``volumes``: a named volume
    is a PersistentVolumeClaim of that name, an absolute path a ``hostPath``."""
    volumes, mounts = [], []
    for entry in service.get("volumes") or []:
        source, target, *mode = str(entry).split(":")
        if source.startswith("/"):
            name = "host" + source.replace("/", "-")
            volumes.append({"name": name, "hostPath": {"path": source, "type": "Directory"}})
        else:
            name = source
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": source}})
        mount: dict[str, Any] = {"name": name, "mountPath": target}
        if mode == ["ro"]:
            mount["readOnly"] = True
        mounts.append(mount)
    return volumes, mounts


def _kube_security(service: Mapping[str, Any]) -> dict[str, Any]:
    """A compose service's user, privileges, capabilities and profiles as a container
    ``securityContext``.

    Raises:
        ValueError: a ``security_opt`` with no Kubernetes equivalent here.
    """
    context: dict[str, Any] = {}
    if str(service.get("user", "")) in ("root", "0"):
        context["runAsUser"] = 0
    if service.get("privileged"):
        context["privileged"] = True
    if service.get("cap_add"):
        context["capabilities"] = {"add": [str(cap) for cap in service["cap_add"]]}
    for option in service.get("security_opt") or []:
        if option not in _SECURITY_OPTS:
            raise ValueError(f"security_opt {option!r} has no Kubernetes translation")
        field, value = _SECURITY_OPTS[option]
        context[field] = value
    if not context:  # the image's unprivileged user, and no way to gain more
        context["allowPrivilegeEscalation"] = False
    return context


def kube_worker_deployments(compose: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One Deployment per worker service of a parsed compose file: the same image, command,
    queues (the service's own ``NETARENA_*`` settings, i.e. those ``web`` does not have; the
    shared ones come from the ConfigMap and Secret), privileges and volumes."""
    services = compose.get("services") or {}
    shared = _service_env(services.get("web") or {})
    deployments = []
    for name in compose_consumers(compose):
        service = services[name]
        own = {k: v for k, v in _service_env(service).items() if k not in shared}
        volumes, mounts = _kube_volumes(service)
        command = service.get("command")
        container: dict[str, Any] = {
            "name": "worker",
            "image": str(service.get("image", "netarena:latest")),
            "imagePullPolicy": "IfNotPresent",
            "command": command.split() if isinstance(command, str) else list(command),
            "envFrom": [{"configMapRef": {"name": KUBE_CONFIG_MAP}},
                        {"secretRef": {"name": KUBE_SECRET}}],
            "env": [{"name": k, "value": v} for k, v in own.items()],
            "securityContext": _kube_security(service),
            "volumeMounts": mounts,
        }  # fmt: skip
        labels = {"app.kubernetes.io/component": name}
        deployments.append({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": dict(labels)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "terminationGracePeriodSeconds": KUBE_GRACE_S,
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        })  # fmt: skip
    return deployments


def kube_workers_text(compose: Mapping[str, Any]) -> str:
    """The text of :data:`KUBE_WORKERS_FILE` for a parsed compose file."""
    header = (
        "# Generated by `python -m config.workers kubernetes` from the worker services of\n"
        "# docker-compose.yml (queues from evaluator/registry.py): do not edit; regenerate.\n"
        "# `python -m config.workers kubernetes --check` fails when this file is stale.\n"
    )
    return header + yaml.safe_dump_all(
        kube_worker_deployments(compose), sort_keys=False, explicit_start=True
    )


def kube_consumers(documents: Sequence[Mapping[str, Any] | None]) -> dict[str, list[str]]:
    """Deployment name -> the queues it consumes, for every Deployment of parsed Kubernetes
    manifests whose container sets ``NETARENA_WORKER_QUEUES`` (a value, not a reference)."""
    consumers = {}
    for document in documents:
        if not document or document.get("kind") != "Deployment":
            continue
        for container in document["spec"]["template"]["spec"].get("containers") or []:
            env = {
                item["name"]: str(item["value"])
                for item in container.get("env") or []
                if "value" in item
            }
            if "NETARENA_WORKER_QUEUES" in env:
                consumers[document["metadata"]["name"]] = resolve_queues(
                    env["NETARENA_WORKER_QUEUES"], env.get("NETARENA_WORKER_EXCEPT", "")
                )
    return consumers


def file_problems(path: Path) -> list[str]:
    """:func:`consumer_problems` of a compose file or of (multi-document) Kubernetes manifests,
    e.g. ``kubectl kustomize deploy/kubernetes/base`` saved to a file."""
    documents = list(yaml.safe_load_all(path.read_text()))
    if len(documents) == 1 and isinstance(documents[0], dict) and "services" in documents[0]:
        return compose_problems(documents[0])
    return consumer_problems(kube_consumers(documents))


def main(argv: Sequence[str]) -> int:
    """``start`` (exec the worker of this environment), ``check [FILE]`` or
    ``kubernetes [--check]``; see the module."""
    if argv[:1] == ["start"] and len(argv) == 1:
        command = worker_command(os.environ)
        if command is None:
            print("no queue left for this worker: every app has a worker of its own; idle")  # noqa: T201
            sys.stdout.flush()
            os.execvp("sleep", ["sleep", "infinity"])  # noqa: S606 - fixed argv
        os.execvp(command[0], command)  # noqa: S606 - argv built by worker_command
    if argv[:1] == ["check"] and len(argv) <= 2:
        path = Path(argv[1]) if len(argv) == 2 else COMPOSE_FILE
        problems = file_problems(path)
        for problem in problems:
            print(f"{path}: {problem}", file=sys.stderr)  # noqa: T201
        return 1 if problems else 0
    if argv[:1] == ["kubernetes"] and argv[1:] in ([], ["--check"]):
        expected = kube_workers_text(yaml.safe_load(COMPOSE_FILE.read_text()))
        if not argv[1:]:
            sys.stdout.write(expected)
            return 0
        problems = file_problems(KUBE_WORKERS_FILE)
        if KUBE_WORKERS_FILE.read_text() != expected:
            problems.append(
                "stale: regenerate with `python -m config.workers kubernetes > "
                "deploy/kubernetes/base/workers.yaml`"
            )
        for problem in problems:
            print(f"{KUBE_WORKERS_FILE}: {problem}", file=sys.stderr)  # noqa: T201
        return 1 if problems else 0
    print(  # noqa: T201
        "usage: python -m config.workers start | check [docker-compose.yml | manifests.yaml]"
        " | kubernetes [--check]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
