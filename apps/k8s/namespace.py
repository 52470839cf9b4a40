"""One episode's namespace on the shared cluster: create healthy, inject, measure, tear down.

Uses only the cluster's public functions (``Cluster.up``, ``ensure_namespace``,
``mint_namespace_kubeconfig``, ``wait_dataplane``, the prober). Several episodes run at once on
one cluster, each in its own namespace ``k8s-ep-<16 hex>``; the dataplane barrier is shared
and serialised by the cluster.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import urllib3
from evaluator.app import DependencyMissingError, EmulatorError
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from apps.k8s import crosscheck, manifests
from apps.k8s.cluster.admission import quota, wait_admission
from apps.k8s.cluster.config import ClusterConfig, MissingBinaryError
from apps.k8s.cluster.control_plane import Cluster, ClusterError
from apps.k8s.cluster.health import NotEnforcedError
from apps.k8s.cluster.kubeconfig import mint_namespace_kubeconfig
from apps.k8s.cluster.netns import NETNS_DIR, NetnsError
from apps.k8s.cluster.prober import PodEndpoint, list_pod_endpoints, measure_matrix
from apps.k8s.cluster.rest import MERGE_PATCH, KubeRest, resource_path
from apps.k8s.cluster.sync import SyncTimeoutError

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
_RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{resource}/{name}"
REVOKE_TIMEOUT_S = 5.0
"""Bound on the wait until a revoked agent token is refused (RBAC follows a deleted
RoleBinding within milliseconds)."""

SNAPSHOT_SKIPPED = frozenset({
    "events", "events.k8s.io/events", "endpoints", "discovery.k8s.io/endpointslices",
    "coordination.k8s.io/leases", "apps/controllerrevisions",
    "storage.k8s.io/csistoragecapacities",
})
"""Namespaced resources that :meth:`EpisodeNamespace.snapshot` leaves out: records and objects
the control plane derives from the others (events, endpoints, endpoint slices) or that no
episode object produces; everything else the API server lists in a namespace is compared."""
_UNCOMPARED_META = ("resourceVersion", "managedFields", "generation", "creationTimestamp")
_ROLE_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_UP_LOCK = threading.Lock()
_UP_DONE: set[str] = set()

#: What the cluster raises when it fails under us (transport, API, node agent, time-outs):
#: infrastructure, never the agent's fault (the agent's own commands run in a subprocess whose
#: failures are observations).
CLUSTER_FAULTS: tuple[type[BaseException], ...] = (
    ApiException,
    urllib3.exceptions.HTTPError,
    ClusterError,
    NetnsError,
    SyncTimeoutError,
    NotEnforcedError,
    OSError,
)

ServiceMatrix = dict[tuple[str, str, str], bool | None]
"""``{(src_service, dst_service, "TCP/port"): allowed}``; None when the pods of a service
disagree or a service has no running pod."""


class NamespaceNotInSyncError(EmulatorError):
    """The enforcer does not enforce the episode namespace as the policy model states
    (:class:`apps.k8s.cluster.health.NotEnforcedError`): the episode is never judged on it.

    Who is at fault decides how the runner records it (``evaluator.runner.agent_could_cause``,
    docs/metrics.md): policies the enforcer refused (an IPv6 ipBlock and the like, which the
    episode namespace's admission rule refuses too) were written by someone in the namespace,
    so after the agent's reply they are the agent's failure; a namespace installed fail-closed
    as a whole (over the enforcer's budget, rules the kernel refused) may be the cluster's
    fault, so it is marked ``judge_disagreement`` (infrastructure).

    Attributes:
        details: ``{"namespace", "health": {namespace: {in_sync, refused, error, rules}}}``.
    """

    @classmethod
    def from_health(cls, name: str, exc: NotEnforcedError) -> NamespaceNotInSyncError:
        """The error for namespace ``name`` from the cluster's :class:`NotEnforcedError`."""
        err = cls(f"dataplane of {name} not in sync: {exc}", details={
            "namespace": name,
            "health": {ns: h.to_dict() for ns, h in exc.namespaces.items()}})
        err.judge_disagreement = any(h.error for h in exc.namespaces.values())
        return err


@contextmanager
def cluster_faults(action: str) -> Iterator[None]:
    """Turn a :data:`CLUSTER_FAULTS` exception raised during ``action`` into EmulatorError.

    Raises:
        EmulatorError: the cluster failed (``EmulatorError`` itself passes unchanged).
    """
    try:
        yield
    except EmulatorError:
        raise
    except CLUSTER_FAULTS as exc:
        raise EmulatorError(f"cluster failed during {action}: {type(exc).__name__}: {exc}") from exc


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

    def __init__(
        self, cluster: Cluster, name: str | None = None, *, labels: dict[str, str] | None = None
    ) -> None:
        self.cluster = cluster
        self.name = name or NAMESPACE_PREFIX + secrets.token_hex(8)
        self.labels = {"netarena/app": "k8s", **(labels or {})}
        self.rest = KubeRest(cluster.api_client())
        self.kubeconfig: Path | None = None
        self.agent_name: str | None = None
        self.created = False
        self.last_endpoints: list[PodEndpoint] = []

    def create(self, policies: dict[str, manifests.Obj], *, credentials: bool = True) -> None:
        """Create the namespace with the workload and ``policies``, its NetworkPolicy quota
        (:func:`apps.k8s.cluster.admission.quota`), mint the agent's credentials
        (ServiceAccount ``agent``; unless ``credentials`` is False) and wait until the
        admission rule and the quota are in force there and the dataplane enforces everything.

        Raises:
            EmulatorError: any API or readiness failure.
        """
        try:
            self.cluster.ensure_namespace(self.name, labels=self.labels)
            self.created = True
            for obj in manifests.workload():
                self._create(obj)
            for policy in policies.values():
                self._create(policy)
            self.rest.create(f"/api/v1/namespaces/{self.name}/resourcequotas", quota())
            wait_admission(self.rest, self.name)
            if credentials:
                self.grant("agent")
            self.wait()
        except (ApiException, TimeoutError, OSError) as exc:
            raise EmulatorError(f"namespace {self.name} set-up failed: {exc}") from exc

    def grant(self, agent_name: str) -> Path:
        """Mint the agent's credentials: ServiceAccount, Role (:data:`AGENT_RULES`) and
        RoleBinding ``agent_name`` and a kubeconfig with a fresh token for it
        (:func:`mint_namespace_kubeconfig`); sets :attr:`kubeconfig` and :attr:`agent_name`.

        Raises:
            kubernetes.client.rest.ApiException: on API errors.
        """
        cfg = self.cluster.config
        self.kubeconfig = mint_namespace_kubeconfig(
            self.rest.api, self.name,
            cfg.kubeconfig_dir / f"{self.name}-{agent_name}.kubeconfig", cfg.server_url,
            cfg.pki_dir / "ca.crt", name=agent_name, rules=AGENT_RULES,
        )
        self.agent_name = agent_name
        return self.kubeconfig

    def revoke(self, timeout_s: float = REVOKE_TIMEOUT_S) -> float:
        """Withdraw the agent's credentials and prove it: delete its RoleBinding, Role and
        ServiceAccount and the kubeconfig file, then retry a read the Role allowed (list
        NetworkPolicies) with the old token until the API server refuses it (401 or 403).

        Deleting the RoleBinding takes effect at once for authorization (RBAC); the token
        itself stays authenticated until the API server's token cache entry expires (measured
        on v1.33: refused 10.0 s after its ServiceAccount was deleted), but it then maps to an
        identity no binding names, so it can do nothing. A later :meth:`grant` uses a
        different ServiceAccount name for that reason. No-op without credentials.

        Returns:
            Seconds until the old token was refused.

        Raises:
            EmulatorError: the old token still worked after ``timeout_s``, or an API error.
        """
        if self.kubeconfig is None or self.agent_name is None:
            return 0.0
        start = time.monotonic()
        kubeconfig, name = self.kubeconfig, self.agent_name
        try:
            old = KubeRest(kube_config.new_client_from_config(config_file=str(kubeconfig)))
        except (OSError, ValueError, kube_config.ConfigException) as exc:
            raise EmulatorError(f"cannot prove the revocation of {self.name}/{name}: {exc}") \
                from exc
        try:
            for resource in ("rolebindings", "roles"):
                self._delete_if_present(_RBAC.format(ns=self.name, resource=resource, name=name))
            self._delete_if_present(resource_path("serviceaccounts", self.name, name))
        except ApiException as exc:
            raise EmulatorError(f"revoking {self.name}/{name}: {exc}") from exc
        kubeconfig.unlink(missing_ok=True)
        self.kubeconfig = self.agent_name = None
        while True:
            try:
                old.get(resource_path("networkpolicies", self.name))
            except ApiException as exc:
                if exc.status in (401, 403):
                    break
                raise EmulatorError(f"revoking {self.name}/{name}: {exc}") from exc
            if time.monotonic() - start > timeout_s:
                raise EmulatorError(f"token of {self.name}/{name} still works after {timeout_s} s")
            time.sleep(0.01)
        return time.monotonic() - start

    def _delete_if_present(self, path: str) -> None:
        try:
            self.rest.delete(path)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def snapshot(self) -> dict[str, str]:
        """Content digest of every object in the namespace and of the namespace itself.

        Lists every namespaced resource the API server serves (discovery, cached per
        process) except :data:`SNAPSHOT_SKIPPED`; each object contributes
        ``"<group/>resource/name": sha256`` of its JSON without the fields the server rewrites
        on every write (resourceVersion, managedFields, generation, creationTimestamp) and
        without ``status`` (pods keep ``phase`` and ``podIP``). NetworkPolicies also drop
        ``uid`` (a restore may re-create one). Two snapshots are equal when no object was
        added, removed or changed in labels, annotations, owners, finalizers, spec or data.

        Raises:
            kubernetes.client.rest.ApiException: on API errors (404: namespace gone).
        """
        result: dict[str, str] = {}
        ns_obj = self.rest.get(resource_path("namespaces", name=self.name))
        result["namespaces/" + self.name] = _digest("namespaces", ns_obj)
        for key, path in _namespaced_resources(self.rest):
            for obj in self.rest.get(path.format(ns=self.name))["items"]:
                result[f"{key}/{obj['metadata']['name']}"] = _digest(key, obj)
        return result

    def restore_policies(self, pristine: dict[str, manifests.Obj],
                         digests: dict[str, str]) -> int:
        """Admin write: make the NetworkPolicies exactly ``pristine`` again (the only objects
        :data:`AGENT_RULES` lets the agent create, change or delete): finalizers cleared,
        policies not in ``pristine`` deleted, missing ones created, changed ones (their
        digest differs from ``digests``, a :meth:`snapshot`) replaced.

        Returns:
            Number of writes made.

        Raises:
            kubernetes.client.rest.ApiException: on API errors.
        """
        writes = 0
        current = {p["metadata"]["name"]: p
                   for p in self.rest.get(resource_path("networkpolicies", self.name))["items"]}
        for name, obj in current.items():
            path = resource_path("networkpolicies", self.name, name)
            if obj["metadata"].get("finalizers"):
                self.rest.patch(path, {"metadata": {"finalizers": None}}, MERGE_PATCH)
                writes += 1
            if name not in pristine or obj["metadata"].get("deletionTimestamp"):
                self._delete_if_present(path)
                writes += 1
        gone_deadline = time.monotonic() + REVOKE_TIMEOUT_S
        for name, policy in pristine.items():
            obj = current.get(name)
            key = f"networking.k8s.io/networkpolicies/{name}"
            if obj is not None and not obj["metadata"].get("deletionTimestamp") \
                    and _digest("networking.k8s.io/networkpolicies", obj) == digests.get(key):
                continue
            if obj is not None and obj["metadata"].get("deletionTimestamp"):
                self._wait_gone(resource_path("networkpolicies", self.name, name),
                                gone_deadline)
                obj = None
            if obj is None:
                self._create(policy)
            else:
                self.replace_policies({name: policy})
            writes += 1
        return writes

    def _wait_gone(self, path: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                self.rest.get(path)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.02)

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
        """Wait until pods are ready and the dataplane reflects every write so far, and the
        enforcer reports the namespace in sync.

        Raises:
            EmulatorError: not within :data:`DATAPLANE_TIMEOUT_S`, or the namespace is not
                enforced as the model states (:class:`~apps.k8s.cluster.health.
                NotEnforcedError`): the episode must not be judged on it.
        """
        try:
            return self.cluster.wait_dataplane([self.name], timeout_s=DATAPLANE_TIMEOUT_S)
        except TimeoutError as exc:
            raise EmulatorError(f"dataplane of {self.name} not ready: {exc}") from exc
        except NotEnforcedError as exc:
            raise NamespaceNotInSyncError.from_health(self.name, exc) from exc

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

    def measure_services(
        self,
        *,
        check: bool,
        wait: bool = True,
        cross_check: bool = True,
        timings: dict[str, list[float]] | None = None,
    ) -> tuple[ServiceMatrix, bool]:
        """Probe the namespace and fold the result into services (:func:`service_matrix`).

        When ``check`` (pods or policies changed), first wait for the dataplane (unless not
        ``wait``: nothing was written since the last barrier) and afterwards, with
        ``cross_check``, compare the pod matrix with the policy model
        (:func:`apps.k8s.crosscheck.check`).

        Args:
            timings: seconds appended to its ``wait_s``, ``probe_s`` and ``crosscheck_s`` lists.

        Returns:
            (the service matrix, whether it was cross-checked).

        Raises:
            CrossCheckError: the dataplane disagrees with the policies (infrastructure).
            EmulatorError: the dataplane did not settle, or the namespace is not in sync.
        """
        times: dict[str, list[float]] = timings if timings is not None else {}
        t0 = time.perf_counter()
        if check and wait:
            self.wait()
        t1 = time.perf_counter()
        pod_matrix, apps = self.measure()
        t2 = time.perf_counter()
        if check and wait:
            times.setdefault("wait_s", []).append(t1 - t0)
        times.setdefault("probe_s", []).append(t2 - t1)
        checked = check and cross_check
        if checked:
            crosscheck.check(self.rest.api, self.name, pod_matrix, self.last_endpoints,
                             self.cluster.config)
            times.setdefault("crosscheck_s", []).append(time.perf_counter() - t2)
        return service_matrix(pod_matrix, apps), checked

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


_DISCOVERY_LOCK = threading.Lock()
_DISCOVERED: dict[str, list[tuple[str, str]]] = {}


def _namespaced_resources(rest: KubeRest) -> list[tuple[str, str]]:
    """``[(key, path template with {ns})]`` of every listable namespaced resource of the API
    server (core and every group's preferred version, subresources excluded), minus
    :data:`SNAPSHOT_SKIPPED`; keys are ``resource`` (core) or ``group/resource``. Discovered
    once per process and API server address."""
    host = rest.api.configuration.host
    with _DISCOVERY_LOCK:
        if host in _DISCOVERED:
            return _DISCOVERED[host]
        found: list[tuple[str, str]] = []
        versions = [("", "/api/v1")]
        for group in rest.get("/apis")["groups"]:
            versions.append((group["name"] + "/",
                             "/apis/" + group["preferredVersion"]["groupVersion"]))
        for prefix, base in versions:
            for res in rest.get(base)["resources"]:
                key = prefix + res["name"]
                if (res.get("namespaced") and "/" not in res["name"]
                        and "list" in res.get("verbs", []) and key not in SNAPSHOT_SKIPPED):
                    found.append((key, f"{base}/namespaces/{{ns}}/{res['name']}"))
        _DISCOVERED[host] = found
        return found


def _digest(key: str, obj: dict[str, Any]) -> str:
    """sha256 of ``obj`` without the fields that :meth:`EpisodeNamespace.snapshot` ignores."""
    body = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    meta = {k: v for k, v in obj["metadata"].items() if k not in _UNCOMPARED_META}
    if key.endswith("networkpolicies"):
        meta.pop("uid", None)
    if key == "pods":
        status = obj.get("status") or {}
        body["status"] = {"phase": status.get("phase"), "podIP": status.get("podIP")}
    body["metadata"] = meta
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def agent_writable_resources() -> set[str]:
    """Resources (``group/resource``) that :data:`AGENT_RULES` lets the agent create, change
    or delete, leaving out the authorization group's review requests (never stored)."""
    found = set()
    for rule in AGENT_RULES:
        if _ROLE_WRITE_VERBS & set(rule["verbs"]):
            for group in rule["apiGroups"]:
                if group == "authorization.k8s.io":
                    continue
                found |= {f"{group}/{r}" if group else r for r in rule["resources"]}
    return found


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
