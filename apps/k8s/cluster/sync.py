"""Bounded waits: pods ready, and the dataplane reflecting every earlier API change.

The dataplane barrier works with a sentinel: a namespace ``netarena-sync`` with a server pod,
two client pods and a NetworkPolicy that admits a client only when three labels agree on one
fresh *epoch* value — the policy's peer selector, the client pod's label and the namespace's
label — and only on that client's own port. Each barrier switches to the other client: it
gives that client, the namespace and the policy a new epoch (and the client's port), then
probes client -> server:port until the connection succeeds.

Why the client and the port alternate: the enforcer (:mod:`apps.k8s.cluster.enforcer`) turns
selectors into ipsets of pod IPs, so a stale dataplane keeps admitting the IP of the previously
admitted client whatever its labels now say; the newly chosen client was denied under the
previous epoch (its label was ``idle``). Its port is opened only by a new table, so the probe
passes only through a sync that saw all three writes of the new epoch.

Why this proves the earlier changes are in force: each enforcer sync starts with consistent
LISTs of Pods, Namespaces and NetworkPolicies (a LIST is a linearizable read of the API server)
and installs the whole filter table with one ``iptables-restore`` (its ipsets before it). A
sync that admits the new client therefore LISTed after the three sentinel writes, hence saw
every pod, namespace and NetworkPolicy change written before them. Pods must already have
their IP (see :func:`wait_pods_ready`), because the node agent's status patch is a write of its own.

Health: after every install the enforcer writes the per-namespace sync health of that sync to
its status file (:mod:`apps.k8s.cluster.health`), with the epoch when namespace, pods and gate
policy all carried it in that sync's LISTs
(:func:`apps.k8s.cluster.enforcer.sentinel_epoch`). Once the probe passes, the barrier waits
for the status of its own epoch (or of a later sync: the epoch only changes under the barrier's
lock) and keeps it in :attr:`DataplaneSync.last_status`; that health therefore describes a
sync that read every write made before the barrier.
"""

from __future__ import annotations

import fcntl
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from apps.k8s.cluster.health import STATUS_FILE, EnforcerStatus, read_status
from apps.k8s.cluster.prober import Probe, probe_once
from apps.k8s.cluster.rest import KubeRest, resource_path

if TYPE_CHECKING:
    from apps.k8s.cluster.config import ClusterConfig

SYNC_NAMESPACE = "netarena-sync"
EPOCH_LABEL = "netarena.io/sync-epoch"
SYNC_PORTS = (7, 9)
"""Client ``i`` probes the server on ``SYNC_PORTS[i]``."""
POLL_INTERVAL_S = 0.01
IDLE = "idle"


class SyncTimeoutError(TimeoutError):
    """A bounded wait ran out of time; the message says what was still missing."""


def wait_pods_ready(
    api: client.ApiClient, namespaces: Iterable[str], timeout_s: float = 60.0
) -> float:
    """Wait until every pod in ``namespaces`` is Running, Ready and has an IP, and every
    Deployment has all its replicas updated and available.

    Returns:
        Seconds waited.

    Raises:
        SyncTimeoutError: with the names of the pods/deployments still not ready.
    """
    rest = KubeRest(api)
    start = time.monotonic()
    names = list(namespaces)
    while True:
        missing: list[str] = []
        for ns in names:
            pods = rest.get(resource_path("pods", ns))["items"]
            for pod in pods:
                st = pod.get("status") or {}
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in st.get("conditions") or []
                )
                if pod["metadata"].get("deletionTimestamp") or not (
                    st.get("phase") == "Running" and ready and st.get("podIP")
                ):
                    missing.append(f"pod {ns}/{pod['metadata']['name']}")
            deps = rest.get(resource_path("deployments", ns))["items"]
            for dep in deps:
                want = dep["spec"].get("replicas", 1)
                st = dep.get("status") or {}
                if (
                    st.get("observedGeneration", 0) < dep["metadata"].get("generation", 0)
                    or st.get("updatedReplicas", 0) != want
                    or st.get("availableReplicas", 0) != want
                    or st.get("replicas", 0) != want
                ):
                    missing.append(f"deployment {ns}/{dep['metadata']['name']}")
        if not missing:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise SyncTimeoutError(f"not ready after {timeout_s} s: {', '.join(missing[:10])}")
        time.sleep(0.05)


class DataplaneSync:
    """The sentinel of one cluster; see the module docstring."""

    def __init__(self, api: client.ApiClient, config: ClusterConfig) -> None:
        """``api``: an admin client of the cluster; ``config``: its configuration (run dir,
        pod namespace prefix). Takes no ``Cluster`` so that this module does not import
        ``control_plane`` (which imports this one)."""
        self.config = config
        self.api = api
        self.rest = KubeRest(self.api)
        self.last_status: EnforcerStatus | None = None
        """The enforcer's report of the sync that passed the last barrier (see the module
        docstring)."""

    @property
    def status_path(self) -> Path:
        """The enforcer's status file (:data:`apps.k8s.cluster.health.STATUS_FILE`)."""
        return self.config.run_dir / STATUS_FILE

    def install(self, timeout_s: float = 60.0) -> float:
        """Create the sentinel objects (idempotent) and pass one barrier.

        Returns:
            Seconds taken. Raises :class:`SyncTimeoutError` if the enforcer does not enforce.
        """
        start = time.monotonic()
        epoch = "init"
        rest = self.rest
        rest.create_or_keep(
            resource_path("namespaces"),
            {"metadata": {"name": SYNC_NAMESPACE, "labels": {EPOCH_LABEL: epoch}}},
        )
        # The ServiceAccount admission plugin rejects pods until the "default" ServiceAccount
        # exists; the controller-manager creates it shortly after the namespace.
        while True:
            try:
                rest.get(resource_path("serviceaccounts", SYNC_NAMESPACE, "default"))
                break
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() - start > timeout_s:
                    raise
            time.sleep(0.05)
        for role, labels, ports in (
            ("server", {"app": "sync-server"}, SYNC_PORTS),
            ("client-0", {"app": "sync-client", EPOCH_LABEL: epoch}, ()),
            ("client-1", {"app": "sync-client", EPOCH_LABEL: IDLE}, ()),
        ):
            container: dict[str, Any] = {"name": "c", "image": "netarena/none"}
            if ports:
                container["ports"] = [{"containerPort": p, "protocol": "TCP"} for p in ports]
            rest.create_or_keep(
                resource_path("pods", SYNC_NAMESPACE),
                {"metadata": {"name": f"sync-{role}", "labels": labels},
                 "spec": {"containers": [container]}},
            )
        rest.create_or_keep(
            resource_path("networkpolicies", SYNC_NAMESPACE), self._policy(epoch, SYNC_PORTS[0])
        )
        wait_pods_ready(self.api, [SYNC_NAMESPACE], max(1.0, timeout_s - _since(start)))
        # Until the enforcer has synced the gate policy the server is unprotected and any
        # probe passes: first wait until the idle client is refused on the port the gate
        # opens now. (Which client is idle depends on the barriers passed so far: a restarted
        # enforcer finds the sentinel as the last barrier left it.)
        pods = self._pods()
        gate = rest.get(resource_path("networkpolicies", SYNC_NAMESPACE, "sync-gate"))
        rule = gate["spec"]["ingress"][0]
        current = rule["from"][0]["podSelector"]["matchLabels"][EPOCH_LABEL]
        port = int(rule["ports"][0]["port"])
        idle = next(pods[f"sync-client-{i}"] for i in (1, 0)
                    if _labels(pods[f"sync-client-{i}"]).get(EPOCH_LABEL) != current)
        probe = Probe(self._netns(idle), pods["sync-server"]["status"]["podIP"], port)
        while probe_once(probe, timeout_s=0.2):
            if _since(start) > timeout_s:
                raise SyncTimeoutError("the enforcer does not enforce the sentinel policy")
            time.sleep(POLL_INTERVAL_S)
        self.barrier(max(1.0, timeout_s - _since(start)))
        return time.monotonic() - start

    def barrier(self, timeout_s: float = 30.0) -> float:
        """Return once the dataplane reflects every pod, namespace and NetworkPolicy write made
        before this call (serialised across processes by a lock file).

        Returns:
            Seconds from the sentinel writes to the first admitted probe.

        Raises:
            SyncTimeoutError: if that does not happen within ``timeout_s``.
        """
        lock_path = self.config.run_dir / "sync.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._barrier_locked(timeout_s)

    def _pods(self) -> dict[str, dict[str, Any]]:
        items = self.rest.get(resource_path("pods", SYNC_NAMESPACE))["items"]
        return {p["metadata"]["name"]: p for p in items}

    def _netns(self, pod: dict[str, Any]) -> str:
        return self.config.pod_netns_prefix + pod["metadata"]["uid"]

    def _barrier_locked(self, timeout_s: float) -> float:
        rest = self.rest
        start = time.monotonic()
        pods = self._pods()
        policy_path = resource_path("networkpolicies", SYNC_NAMESPACE, "sync-gate")
        try:
            old_epoch = rest.get(policy_path)["spec"]["ingress"][0]["from"][0]["podSelector"][
                "matchLabels"][EPOCH_LABEL]
            server_ip = pods["sync-server"]["status"]["podIP"]
            clients = [pods["sync-client-0"], pods["sync-client-1"]]
        except KeyError as exc:
            raise SyncTimeoutError(f"sentinel objects missing in {SYNC_NAMESPACE}: {exc}") from exc
        old = 0 if _labels(clients[0]).get(EPOCH_LABEL) == old_epoch else 1
        new = 1 - old
        epoch = uuid.uuid4().hex[:16]
        rest.patch(
            resource_path("namespaces", name=SYNC_NAMESPACE),
            {"metadata": {"labels": {EPOCH_LABEL: epoch}}},
        )
        rest.patch(
            resource_path("pods", SYNC_NAMESPACE, f"sync-client-{new}"),
            {"metadata": {"labels": {EPOCH_LABEL: epoch}}},
        )
        rest.patch(
            resource_path("pods", SYNC_NAMESPACE, f"sync-client-{old}"),
            {"metadata": {"labels": {EPOCH_LABEL: IDLE}}},
        )
        rest.replace(policy_path, self._policy(epoch, SYNC_PORTS[new]))
        probe = Probe(self._netns(clients[new]), server_ip, SYNC_PORTS[new])
        while not probe_once(probe, timeout_s=0.2):
            if time.monotonic() - start > timeout_s:
                raise SyncTimeoutError(f"dataplane did not converge within {timeout_s} s")
            time.sleep(POLL_INTERVAL_S)
        # the enforcer writes the status right after the install that admitted the probe
        while True:
            status = read_status(self.status_path)
            if status is not None and status.sentinel_epoch == epoch:
                self.last_status = status
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise SyncTimeoutError(
                    f"the enforcer reported no health for barrier epoch {epoch} in "
                    f"{self.status_path} within {timeout_s} s (an enforcer of another version? "
                    "`python -m apps.k8s.cluster up` restarts it)")
            time.sleep(POLL_INTERVAL_S / 2)

    @staticmethod
    def _policy(epoch: str, port: int) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "sync-gate", "namespace": SYNC_NAMESPACE},
            "spec": {
                "podSelector": {"matchLabels": {"app": "sync-server"}},
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{
                        "podSelector": {"matchLabels": {EPOCH_LABEL: epoch}},
                        "namespaceSelector": {"matchLabels": {EPOCH_LABEL: epoch}},
                    }],
                    "ports": [{"protocol": "TCP", "port": port}],
                }],
            },
        }


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def _since(start: float) -> float:
    return time.monotonic() - start

