"""One episode's namespace on the shared cluster: create healthy, inject, measure, tear down.

Uses only the cluster's public functions (``Cluster.up``, ``ensure_namespace``,
``mint_namespace_kubeconfig``, ``wait_dataplane``, the prober). Several episodes run at once on
one cluster, each in its own namespace ``k8s-ep-<16 hex>``; the dataplane barrier is shared
and serialised by the cluster.
"""

from __future__ import annotations

import json
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
from apps.k8s.cluster.netns import NETNS_DIR
from apps.k8s.cluster.prober import PodEndpoint, list_pod_endpoints, measure_matrix
from apps.k8s.cluster.rest import KubeRest, resource_path

NAMESPACE_PREFIX = "k8s-ep-"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
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
        self.last_endpoints: list[PodEndpoint] = []

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
                self.rest.api, self.name,
                cfg.kubeconfig_dir / f"{self.name}-agent.kubeconfig", cfg.server_url,
                cfg.pki_dir / "ca.crt", rules=AGENT_RULES,
            )
            self.wait()
        except (ApiException, TimeoutError, OSError) as exc:
            raise EmulatorError(f"namespace {self.name} set-up failed: {exc}") from exc

    def _create(self, obj: manifests.Obj) -> None:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        body["metadata"] = _with_last_applied(obj)
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
            meta = _with_last_applied(policy)
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            body = {"metadata": meta, "spec": policy["spec"]}
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
            pod key -> ``app`` label). The probed pods stay in :attr:`last_endpoints` (the
            cross-check compares over exactly those).
        """
        pods = list_pod_endpoints(self.rest.api, [self.name], self.cluster.config)
        self.last_endpoints = pods
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

    def delete(
        self, timeout_s: float = TEARDOWN_TIMEOUT_S, *, wait_namespace: bool = False
    ) -> float:
        """Delete the workload (grace period 0) and the namespace; wait until every pod of the
        namespace and its network namespace are gone, and with ``wait_namespace`` also until
        the namespace object is (the namespace controller removes it ~5 s later on its own).

        Idempotent. Returns seconds waited. Raises :class:`EmulatorError` on timeout.
        """
        start = time.monotonic()
        if self.kubeconfig is not None:
            self.kubeconfig.unlink(missing_ok=True)
        if not self.created:
            return 0.0
        try:
            pods = self.rest.get(resource_path("pods", self.name))["items"]
            prefix = self.cluster.config.pod_netns_prefix
            pod_netns = [prefix + p["metadata"]["uid"] for p in pods]
            for resource in ("deployments", "replicasets", "pods"):
                self.rest.delete(resource_path(resource, self.name),
                                 propagationPolicy="Background", gracePeriodSeconds="0")
            self.rest.delete(resource_path("namespaces", name=self.name))
        except ApiException as exc:
            if exc.status != 404:
                raise EmulatorError(f"deleting {self.name}: {exc}") from exc
            pod_netns = []
        while True:
            left = [n for n in pod_netns if (NETNS_DIR / n).exists()]
            try:
                remaining = self.rest.get(resource_path("pods", self.name))["items"]
                if wait_namespace:
                    self.rest.get(resource_path("namespaces", name=self.name))
                    remaining = remaining or [{}]
            except ApiException as exc:
                if exc.status != 404:
                    raise EmulatorError(f"deleting {self.name}: {exc}") from exc
                remaining = []
            if not left and not remaining:
                break
            if time.monotonic() - start > timeout_s:
                raise EmulatorError(
                    f"namespace {self.name}: {len(remaining)} object(s) and {len(left)} pod "
                    f"network namespace(s) left after {timeout_s} s"
                )
            time.sleep(0.05)
        self.created = False
        return time.monotonic() - start


def _with_last_applied(obj: manifests.Obj) -> manifests.Obj:
    """``obj``'s metadata with the annotation ``kubectl apply`` keeps, as if it had been
    deployed with ``kubectl apply`` (so agents' ``apply`` merges without a warning)."""
    meta = json.loads(json.dumps(obj["metadata"]))
    applied = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], **obj,
               "metadata": {**obj["metadata"], "namespace": None}}
    applied["metadata"].pop("namespace")
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
        applied, separators=(",", ":"), sort_keys=True
    )
    return dict(meta)


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
