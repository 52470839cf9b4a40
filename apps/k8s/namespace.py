"""One episode's namespace on the shared cluster: create healthy, inject, measure, tear down.

Uses only the cluster's public functions (``Cluster.up``, ``ensure_namespace``,
``mint_namespace_kubeconfig``, ``wait_dataplane``, the prober). Several episodes run at once on
one cluster, each in its own namespace ``k8s-ep-<16 hex>``; the dataplane barrier is shared
and serialised by the cluster.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

from evaluator.app import DependencyMissingError, EmulatorError
from kubernetes.client.rest import ApiException

from apps.k8s import manifests
from apps.k8s.cluster.config import ClusterConfig, MissingBinaryError
from apps.k8s.cluster.control_plane import Cluster, ClusterError
from apps.k8s.cluster.kubeconfig import mint_namespace_kubeconfig
from apps.k8s.cluster.prober import list_pod_endpoints, measure_matrix
from apps.k8s.cluster.rest import KubeRest, resource_path

NAMESPACE_PREFIX = "k8s-ep-"
PROBE_TIMEOUT_S = 0.5
"""Per-probe timeout; a blocked probe is refused in well under a millisecond."""
DATAPLANE_TIMEOUT_S = 60.0
TEARDOWN_TIMEOUT_S = 90.0

_READ = ["get", "list", "watch"]
AGENT_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods", "services", "endpoints", "events"],
     "verbs": _READ},
    {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": _READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": [*_READ, "create", "update", "patch", "delete", "deletecollection"]},
    {"apiGroups": ["authorization.k8s.io"],
     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
)
"""The agent's Role (RBAC, https://kubernetes.io/docs/reference/access-authn-authz/rbac/):
read the workload of its namespace, change only NetworkPolicies; no ``pods/exec`` or other
subresource, no secrets or configmaps, nothing cluster-scoped, no RBAC objects."""

_KIND_RESOURCES = {"Deployment": "deployments", "Service": "services",
                   "NetworkPolicy": "networkpolicies"}
_UP_LOCK = threading.Lock()
_UP_DONE: set[str] = set()

ServiceMatrix = dict[tuple[str, str, str], bool | None]
"""``{(src_service, dst_service, "TCP/port"): allowed}``; None when the pods of a service
disagree or a service has no running pod."""


def shared_cluster(config: ClusterConfig | None = None) -> Cluster:
    """The cluster of ``config`` (default instance), brought up once per process.

    Raises:
        DependencyMissingError: cluster binaries are missing.
        EmulatorError: the cluster could not start.
    """
    cluster = Cluster(config)
    key = str(cluster.config.state_dir)
    with _UP_LOCK:
        if key not in _UP_DONE or not cluster.status().running:
            try:
                cluster.up()
            except MissingBinaryError as exc:
                raise DependencyMissingError(str(exc)) from exc
            except (ClusterError, OSError, TimeoutError) as exc:
                raise EmulatorError(f"cluster did not start: {exc}") from exc
            _UP_DONE.add(key)
    return cluster


class EpisodeNamespace:
    """The namespace of one episode and the admin operations on it.

    Attributes:
        name: namespace name; kubeconfig: the agent's namespace-scoped kubeconfig (after
            :meth:`create`).
    """

    def __init__(self, cluster: Cluster, name: str | None = None) -> None:
        self.cluster = cluster
        self.name = name or NAMESPACE_PREFIX + secrets.token_hex(8)
        self.rest = KubeRest(cluster.api_client())
        self.kubeconfig: Path | None = None
        self.created = False

    def create(self, policies: dict[str, manifests.Obj]) -> None:
        """Create the namespace with the workload and ``policies``, mint the agent's
        credentials and wait until the dataplane enforces everything.

        Raises:
            EmulatorError: any API or readiness failure.
        """
        try:
            self.cluster.ensure_namespace(self.name, labels={"netarena/app": "k8s"})
            self.created = True
            for obj in manifests.workload():
                self._create(obj)
            for policy in policies.values():
                self._create(policy)
            cfg = self.cluster.config
            self.kubeconfig = mint_namespace_kubeconfig(
                self.cluster.api_client(), self.name,
                cfg.kubeconfig_dir / f"{self.name}-agent.kubeconfig", cfg.server_url,
                cfg.pki_dir / "ca.crt", rules=AGENT_RULES,
            )
            self.wait()
        except (ApiException, TimeoutError, OSError) as exc:
            raise EmulatorError(f"namespace {self.name} set-up failed: {exc}") from exc

    def _create(self, obj: manifests.Obj) -> None:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        self.rest.create(resource_path(_KIND_RESOURCES[obj["kind"]], self.name), body)

    def replace_policies(self, policies: dict[str, manifests.Obj]) -> None:
        """Admin write: set the given policies (create or replace by name)."""
        for name, policy in policies.items():
            path = resource_path("networkpolicies", self.name, name)
            try:
                current = self.rest.get(path)
            except ApiException as exc:
                if exc.status != 404:
                    raise EmulatorError(f"reading policy {name}: {exc}") from exc
                self._create(policy)
                continue
            body = {"metadata": {"name": name,
                                 "resourceVersion": current["metadata"]["resourceVersion"]},
                    "spec": policy["spec"]}
            self.rest.replace(path, body)

    def wait(self) -> float:
        """Wait until pods are ready and the dataplane reflects every write so far.

        Raises:
            EmulatorError: not within :data:`DATAPLANE_TIMEOUT_S`.
        """
        try:
            return self.cluster.wait_dataplane([self.name], timeout_s=DATAPLANE_TIMEOUT_S)
        except TimeoutError as exc:
            raise EmulatorError(f"dataplane of {self.name} not ready: {exc}") from exc

    def measure(self) -> tuple[dict[str, dict[str, dict[str, bool]]], dict[str, str]]:
        """Probe every running pod to every pod port.

        Returns:
            (pod matrix ``{"ns/src": {"ns/dst": {"TCP/port": bool}}}``,
            pod key -> ``app`` label).
        """
        pods = list_pod_endpoints(self.cluster.api_client(), [self.name], self.cluster.config)
        apps = {p.key: p.labels.get(manifests.APP_LABEL, "") for p in pods}
        return measure_matrix(pods, timeout_s=PROBE_TIMEOUT_S), apps

    def fingerprint(self) -> tuple[tuple[str, str], ...]:
        """Resource versions of pods and policies (changes whenever the agent changes either)."""
        items = []
        for resource in ("pods", "networkpolicies"):
            for obj in self.rest.get(resource_path(resource, self.name))["items"]:
                meta = obj["metadata"]
                items.append((f"{resource}/{meta['name']}", meta["resourceVersion"]))
        return tuple(sorted(items))

    def delete(self, timeout_s: float = TEARDOWN_TIMEOUT_S) -> float:
        """Delete the namespace and wait until it (and so every pod netns) is gone.

        Idempotent. Returns seconds waited. Raises :class:`EmulatorError` on timeout.
        """
        start = time.monotonic()
        if self.kubeconfig is not None:
            self.kubeconfig.unlink(missing_ok=True)
        if not self.created:
            return 0.0
        path = resource_path("namespaces", name=self.name)
        try:
            self.rest.delete(path)
        except ApiException as exc:
            if exc.status != 404:
                raise EmulatorError(f"deleting {self.name}: {exc}") from exc
        while True:
            try:
                self.rest.get(path)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise EmulatorError(f"deleting {self.name}: {exc}") from exc
            if time.monotonic() - start > timeout_s:
                raise EmulatorError(f"namespace {self.name} not gone after {timeout_s} s")
            time.sleep(0.1)
        self.created = False
        return time.monotonic() - start


def service_matrix(
    pod_matrix: dict[str, dict[str, dict[str, bool]]], apps: dict[str, str]
) -> ServiceMatrix:
    """Fold a pod matrix into services over the probe plan of the manifests.

    A triple is True/False when every probe between pods of the two services agrees, and None
    when they disagree or a service has no running pod (both always a mismatch).
    """
    seen: dict[tuple[str, str, str], set[bool]] = {}
    for src, row in pod_matrix.items():
        for dst, ports in row.items():
            for key, ok in ports.items():
                seen.setdefault((apps.get(src, ""), apps.get(dst, ""), key), set()).add(ok)
    result: ServiceMatrix = {}
    for triple in manifests.probe_plan():
        values = seen.get(triple)
        result[triple] = next(iter(values)) if values and len(values) == 1 else None
    return result


def describe_pods(apps: dict[str, str]) -> dict[str, Any]:
    """Pod -> service map for verdict details."""
    return dict(sorted(apps.items()))
