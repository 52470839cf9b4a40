"""Kubernetes manifests (``deploy/kubernetes/``, docs/deploy.md "On Kubernetes").

The worker Deployments are generated from docker-compose.yml's worker services and the app
registry (``python -m config.workers kubernetes``); the rendered manifests (``kubectl
kustomize``) carry the site's probes and scrape annotations; and the embedded cluster's API
server accepts every rendering in a server-side dry run (admission and schema validation of
the real kube-apiserver, nothing created). ``scripts/deploy_check.sh --kube`` runs them.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import reverse

from config import workers
from config.workers import (
    KUBE_WORKERS_FILE,
    compose_consumers,
    consumer_problems,
    kube_consumers,
    kube_workers_text,
)
from evaluator.registry import app_ids, worker_queues
from evaluator.testing import GuessApp, registered_app
from tests.conftest import require_tool, session_cluster
from tests.deploy.test_deploy import PRIVILEGED_QUEUES

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _workers() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(KUBE_WORKERS_FILE.read_text()) if d]


def _container(document: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = document["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_worker_deployments_are_generated_from_compose_and_the_registry() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "config.workers", "kubernetes", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert KUBE_WORKERS_FILE.read_text() == kube_workers_text(COMPOSE)
    consumers = kube_consumers(_workers())
    assert consumers == compose_consumers(COMPOSE)
    assert sorted(q for queues in consumers.values() for q in queues) == sorted(worker_queues())


def test_worker_deployments_have_the_privileges_of_their_compose_service() -> None:
    services = COMPOSE["services"]
    consumers = kube_consumers(_workers())
    for deployment in _workers():
        name = deployment["metadata"]["name"]
        container = _container(deployment)
        context = container["securityContext"]
        service = services[name]
        assert container["command"] == ["python", "-m", "config.workers", "start"]
        assert container["image"] == service["image"]
        assert bool(context.get("privileged")) == bool(PRIVILEGED_QUEUES & set(consumers[name]))
        assert (context.get("runAsUser") == 0) == (service.get("user") == "root"), name
        if not context.get("runAsUser") == 0:
            assert context == {"allowPrivilegeEscalation": False}, name
        refs = [next(iter(ref.values()))["name"] for ref in container["envFrom"]]
        assert refs == ["netarena-config", "netarena-secrets"]  # the Secret wins a clash
    malt = _container(next(d for d in _workers() if d["metadata"]["name"] == "worker-malt"))
    assert malt["securityContext"] == {
        "runAsUser": 0,
        "capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]},
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
    }
    assert {"name": "host-sys-fs-cgroup", "mountPath": "/sys/fs/cgroup"} in malt["volumeMounts"]
    k8s = _container(next(d for d in _workers() if d["metadata"]["name"] == "worker-k8s"))
    assert k8s["image"] == "netarena-k8s:latest"


def test_kubernetes_check_fails_when_a_registered_queue_has_no_consumer() -> None:
    """A registered app is consumed by the catch-all worker; without it, the check names the
    app's queue (and a Deployment consuming a queue twice is reported too)."""
    workers = _workers()
    without_rest = [d for d in workers if d["metadata"]["name"] != "worker-apps"]
    assert consumer_problems(kube_consumers(workers)) == []
    assert consumer_problems(kube_consumers(without_rest)) == []  # every app has its worker
    with registered_app({"guess": GuessApp}):
        assert consumer_problems(kube_consumers(workers)) == []
        assert consumer_problems(kube_consumers(without_rest)) == [
            "no worker consumes queue(s): guess"
        ]
    control_only = [d for d in workers if d["metadata"]["name"] == "worker-control"]
    assert consumer_problems(kube_consumers(control_only)) == [
        f"no worker consumes queue(s): {', '.join(app_ids())}"
    ]
    again = {**control_only[0], "metadata": {"name": "worker-control-again"}}
    assert consumer_problems(kube_consumers([*workers, again])) == [
        "queue 'control' is consumed by worker-control, worker-control-again"
    ]


def test_check_reads_manifests_and_finds_a_stale_worker_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check FILE`` reads Kubernetes manifests as well as compose files; ``kubernetes
    --check`` fails on a worker file that is not the generator's output."""
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all(_workers()[:1]))
    done = subprocess.run(
        [sys.executable, "-m", "config.workers", "check", str(manifests)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "no worker consumes queue(s): malt, route, k8s" in done.stderr
    stale = tmp_path / "workers.yaml"
    stale.write_text(KUBE_WORKERS_FILE.read_text().replace("NETARENA_ROUTE_POOL", "X"))
    monkeypatch.setattr(workers, "KUBE_WORKERS_FILE", stale)
    assert workers.main(["kubernetes", "--check"]) == 1
    assert "stale: regenerate" in capsys.readouterr().err


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture
def kube_tree(tmp_path: Path) -> Path:
    """A copy of deploy/kubernetes whose production overlay has its secrets.env (from the
    example, as an operator would start)."""
    tree = tmp_path / "kubernetes"
    shutil.copytree(KUBE, tree, ignore=shutil.ignore_patterns("secrets.env"))
    production = tree / "overlays" / "production"
    (production / "secrets.env").write_text(
        (production / "secrets.env.example").read_text().replace("=\n", "=value\n")
    )
    return tree


def _external(tree: Path) -> Path:
    """The production overlay with the external-services component switched on."""
    overlay = tree / "overlays" / "external"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../production]\ncomponents: [../../components/external-services]\n"
    )
    return overlay


def _named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name)


def test_manifests_render_with_probes_metrics_and_every_setting(kube_tree: Path) -> None:
    base = _kustomize(kube_tree / "base")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in base}
    assert {
        ("Deployment", "web"),
        ("Service", "web"),
        ("Deployment", "beat"),
        ("StatefulSet", "db"),
        ("Service", "db"),
        ("StatefulSet", "redis"),
        ("Service", "redis"),
        ("PersistentVolumeClaim", "vault"),
    } <= kinds
    assert consumer_problems(kube_consumers(base)) == []
    web = _named(base, "Deployment", "web")
    container = _container(web)
    assert container["startupProbe"]["httpGet"]["path"] == reverse("healthz")
    assert container["livenessProbe"]["httpGet"]["path"] == reverse("healthz")
    assert container["readinessProbe"]["httpGet"]["path"] == reverse("readyz")
    annotations = web["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == reverse("metrics")
    assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    # probes and scrapers send the pod address as Host: it is an allowed host
    assert {
        "name": "DJANGO_ALLOWED_HOSTS",
        "value": "$(DJANGO_ALLOWED_HOSTS),$(POD_IP)",
    } in container["env"]
    init = web["spec"]["template"]["spec"]["initContainers"][0]
    assert init["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert _named(base, "Deployment", "beat")["spec"]["strategy"]["type"] == "Recreate"
    # every setting docker-compose.yml gives the site comes from the ConfigMap or the Secret
    config = set(_named(base, "ConfigMap", "netarena-config")["data"])
    example = (kube_tree / "overlays" / "production" / "secrets.env.example").read_text()
    secret = {
        line.split("=")[0] for line in example.splitlines() if line and not line.startswith("#")
    }
    assert set(COMPOSE["services"]["web"]["environment"]) <= config | secret
    assert {"POSTGRES_PASSWORD", "DATABASE_URL", "DJANGO_SECRET_KEY"} <= secret

    production = _kustomize(kube_tree / "overlays" / "production")
    assert all(
        d["metadata"].get("namespace") == "netarena" for d in production if d["kind"] != "Namespace"
    )
    secret_name = next(d["metadata"]["name"] for d in production if d["kind"] == "Secret")
    assert secret_name.startswith("netarena-secrets-")  # hashed: a change rolls the pods
    assert {
        r["secretRef"]["name"]
        for r in _container(_named(production, "Deployment", "worker-control"))["envFrom"]
        if "secretRef" in r
    } == {secret_name}
    assert {d["kind"] for d in production} >= {"StatefulSet"}
    external = _kustomize(_external(kube_tree))
    assert not [d for d in external if d["kind"] == "StatefulSet"]
    assert {d["metadata"]["name"] for d in external if d["kind"] == "Service"} == {"web"}


@pytest.fixture(scope="session")
def api_server() -> Iterator[Path]:
    """The embedded cluster's admin kubeconfig, for the session
    (:func:`tests.conftest.session_cluster`)."""
    with session_cluster(kubectl=False) as config:
        yield config.admin_kubeconfig


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, ok: bool = True) -> str:
    done = subprocess.run(
        [require_tool("kubectl"), f"--kubeconfig={kubeconfig}", "--request-timeout=30s", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode == 0) == ok, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout if ok else done.stderr


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
def test_api_server_accepts_every_rendering_in_a_server_side_dry_run(
    api_server: Path, kube_tree: Path
) -> None:
    """``kubectl apply --dry-run=server`` of the production overlay (the base with everything
    an operator adds), the production overlay with external services and the check overlay,
    each in a scratch namespace of its own, in one request stream (an overlay's own Namespace
    object is left out: a dry run creates nothing for the others to land in). One misspelt
    copy of the web Deployment rides along and must be the only object refused: the dry run
    does validate."""
    tag = uuid.uuid4().hex[:8]
    renderings = {
        "production": kube_tree / "overlays" / "production",
        "external": _external(kube_tree),
        "check": ROOT / "scripts" / "deploy" / "kube-check",
    }
    namespaces = {label: f"deploy-{label}-{tag}" for label in renderings}
    documents = []
    for label, directory in renderings.items():
        for document in _kustomize(directory):
            if document["kind"] != "Namespace":
                document["metadata"]["namespace"] = namespaces[label]
                documents.append(document)
    broken = copy.deepcopy(_named(documents, "Deployment", "web"))
    broken["metadata"]["name"] = "web-misspelt"
    _container(broken)["readynessProbe"] = _container(broken).pop("readinessProbe")
    scratch = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
               for n in namespaces.values()]  # fmt: skip
    _kubectl(api_server, "create", "-f", "-", stdin=yaml.safe_dump_all(scratch))
    try:
        done = subprocess.run(
            [require_tool("kubectl"), f"--kubeconfig={api_server}", "--request-timeout=60s",
             "apply", "--dry-run=server", "-f", "-"],
            input=yaml.safe_dump_all([*documents, broken]),
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    finally:
        _kubectl(api_server, "delete", "namespace", *namespaces.values(), "--wait=false")
    applied = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(documents), done.stdout + done.stderr
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert 'unknown field "spec.template.spec.containers[0].readynessProbe"' in errors[0]
    # the workers and the StatefulSets of every rendering but the external one
    assert applied.count("deployment.apps/worker-k8s created (server dry run)") == 3
    assert applied.count("statefulset.apps/db created (server dry run)") == 2


def test_podman_pods_resolve_what_podman_lacks(tmp_path: Path) -> None:
    """``scripts/deploy/kube_pods.py`` (``deploy_check.sh --kube``): one Pod per workload at a
    fixed address, Service names as host aliases, ConfigMap, Secret and pod-address values and
    ``$(VAR)`` references resolved, claims as prefixed volumes, profiles as annotations."""
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all(_kustomize(ROOT / "scripts" / "deploy" / "kube-check")))
    secrets = tmp_path / "secrets.env"
    secrets.write_text("POSTGRES_PASSWORD=pw\nDJANGO_SECRET_KEY=key\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "deploy" / "kube_pods.py"), str(manifests),
         str(tmp_path / "pods"), "10.89.99", "t-", "--secret", f"netarena-secrets={secrets}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert list(plan)[:2] == ["db", "redis"]  # StatefulSets first
    assert set(plan) == {"db", "redis", "agents", "beat", "web", *kube_consumers(_workers())}
    assert plan["db"][:2] == ["t-db", "10.89.99.10"] and plan["db"][3:] == ["t-pgdata-db-0"]
    assert plan["worker-malt"][3:] == ["t-vault"]
    web = yaml.safe_load(Path(plan["web"][2]).read_text())
    aliases = {a["hostnames"][0]: a["ip"] for a in web["spec"]["hostAliases"]}
    assert aliases["db"] == plan["db"][1] and aliases["web"] == plan["web"][1]
    env = {e["name"]: e["value"] for e in web["spec"]["containers"][0]["env"]}
    assert env["DJANGO_ALLOWED_HOSTS"] == f"localhost,127.0.0.1,web,{plan['web'][1]}"
    assert env["DJANGO_SECRET_KEY"] == "key"
    assert web["spec"]["restartPolicy"] == "OnFailure"  # its init container runs once
    assert "readinessProbe" not in web["spec"]["containers"][0]
    assert web["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] == 8000
    db = yaml.safe_load(Path(plan["db"][2]).read_text())
    assert {"name": "POSTGRES_PASSWORD", "value": "pw"} in db["spec"]["containers"][0]["env"]
    malt = yaml.safe_load(Path(plan["worker-malt"][2]).read_text())
    annotations = malt["metadata"]["annotations"]
    assert annotations["container.seccomp.security.alpha.kubernetes.io/worker"] == "unconfined"
    assert "seccompProfile" not in malt["spec"]["containers"][0]["securityContext"]
