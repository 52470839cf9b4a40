"""The node agent: a minimal kubelet for network-policy experiments, on the official client.

What it does, mirroring the kubelet's duties that matter for networking
(https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/):

* registers the Node (addresses, capacity, podCIDR, Ready condition) and renews its Lease in
  ``kube-node-lease`` every 10 s (https://kubernetes.io/docs/concepts/architecture/nodes/#heartbeats);
* binds unscheduled pods to itself (the ``pods/binding`` subresource, as a scheduler does);
* turns each pod bound to it into a network namespace with an IP from the node's pod CIDR
  (routed veth), opens real TCP and UDP listeners on every declared containerPort, and patches
  the pod status (Running, Ready, podIP, hostIP, containerStatuses);
* finishes graceful deletions (tears the namespace down, then deletes with grace period 0);
* on start, reconciles: adopts pods whose namespace exists, recreates missing ones, removes
  namespaces of pods that are gone.

There is no container runtime: images are not pulled and no process runs in the pod.

Run as ``python -m apps.k8s.cluster.node_agent --state-dir DIR`` (root).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from apps.k8s.cluster import netns
from apps.k8s.cluster.config import K8S_VERSION, ClusterConfig
from apps.k8s.cluster.listeners import ListenerSet
from apps.k8s.cluster.rest import STRATEGIC_PATCH, KubeRest, resource_path

log = logging.getLogger("node_agent")

LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
Pod = dict[str, Any]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_ports(pod: Pod) -> list[tuple[str, int]]:
    """``[(protocol, containerPort)]`` declared by all containers of ``pod``."""
    ports = []
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports") or []:
            ports.append((port.get("protocol", "TCP"), int(port["containerPort"])))
    return ports


class IpAllocator:
    """Hands out pod IPs from a CIDR, skipping the network, the first host and used addresses.

    Allocation walks forward from the last handed-out address so that a freed IP is not reused
    at once (stale conntrack entries of a deleted pod cannot leak into a new one).
    """

    def __init__(self, cidr: str) -> None:
        self._net = ipaddress.ip_network(cidr)
        self._used: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        self._next = int(self._net.network_address) + 2

    def reserve(self, ip: str) -> bool:
        """Mark ``ip`` as used; False if it is outside the CIDR or already used."""
        addr = ipaddress.ip_address(ip)
        if addr not in self._net or addr in self._used:
            return False
        self._used.add(addr)
        return True

    def allocate(self) -> str:
        """Return a free IP.

        Raises:
            RuntimeError: when the CIDR is exhausted.
        """
        first = int(self._net.network_address) + 2
        last = int(self._net.broadcast_address) - 1
        for _ in range(last - first + 1):
            candidate = ipaddress.ip_address(self._next)
            self._next = self._next + 1 if self._next < last else first
            if candidate not in self._used:
                self._used.add(candidate)
                return str(candidate)
        raise RuntimeError(f"pod CIDR {self._net} exhausted")

    def release(self, ip: str) -> None:
        """Return ``ip`` to the pool."""
        self._used.discard(ipaddress.ip_address(ip))


class NodeAgent:
    """Keeps the Node alive and the pods bound to it materialised as network namespaces."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        kubeconfig = str(config.kubeconfig_dir / "node-agent.kubeconfig")
        self.api = kube_config.new_client_from_config(config_file=kubeconfig)
        self._lease_api = kube_config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.rest = KubeRest(self.api)
        self.listeners = ListenerSet()
        self.ips = IpAllocator(config.pod_cidr)
        self.pods: dict[str, dict[str, str]] = {}  # uid -> {"ns", "name", "ip", "netns", "link"}
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None

    # ------------------------------------------------------------------ node and lease

    def register_node(self) -> None:
        """Create the Node, or refresh its status if it exists."""
        cfg = self.config
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "4096", "ephemeral-storage": "100Gi"}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": cfg.node_name,
                "labels": {
                    "kubernetes.io/hostname": cfg.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "node-role.kubernetes.io/netarena": "",
                },
            },
            "spec": {"podCIDR": cfg.pod_cidr, "podCIDRs": [cfg.pod_cidr]},
        }
        self.rest.create_or_keep(resource_path("nodes"), body)
        now = _now()
        conditions = [
            {"type": t, "status": "False", "reason": f"No{t}", "message": "netarena node agent",
             "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
        ]
        conditions.append({
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "netarena node agent is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
        status = {"status": {
            "addresses": [
                {"type": "InternalIP", "address": cfg.node_ip},
                {"type": "Hostname", "address": cfg.node_name},
            ],
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "netarena", "systemUUID": "netarena", "bootID": "netarena",
                "kernelVersion": Path("/proc/sys/kernel/osrelease").read_text().strip(),
                "osImage": "netarena netns pods", "containerRuntimeVersion": "netns://0.1",
                "kubeletVersion": f"{K8S_VERSION}-netarena", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64",
            },
        }}
        self.rest.patch(
            resource_path("nodes", name=cfg.node_name, subresource="status"), status,
            STRATEGIC_PATCH,
        )

    def _renew_lease_forever(self) -> None:
        rest = KubeRest(self._lease_api)
        name, ns = self.config.node_name, "kube-node-lease"
        while not self._stop.is_set():
            body = {
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_DURATION_S,
                    "renewTime": _now_micro(),
                },
            }
            try:
                try:
                    rest.patch(resource_path("leases", ns, name), {"spec": body["spec"]})
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    rest.create(resource_path("leases", ns), body)
            except Exception:  # noqa: BLE001 - keep heartbeating through API hiccups
                log.exception("lease renewal failed")
            self._stop.wait(LEASE_RENEW_S)

    # ------------------------------------------------------------------ pods

    def _netns_name(self, uid: str) -> str:
        return self.config.pod_netns_prefix + uid

    def _bind(self, pod: Pod) -> None:
        meta = pod["metadata"]
        selector = pod["spec"].get("nodeSelector") or {}
        labels = {
            "kubernetes.io/hostname": self.config.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if any(labels.get(k) != v for k, v in selector.items()):
            return  # stays Pending, as with a scheduler that finds no fitting node
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.config.node_name},
        }
        try:
            self.rest.create(
                resource_path("pods", meta["namespace"], meta["name"], "binding"), body
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def _setup(self, pod: Pod) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        if uid in self.pods:
            return
        host_network = bool(spec.get("hostNetwork"))
        ns_name = self._netns_name(uid)
        link = netns.pod_link_name(uid)
        old_ip = (pod.get("status") or {}).get("podIP")
        if host_network:
            ip = self.config.node_ip
        elif old_ip and self.ips.reserve(old_ip):
            ip = old_ip
        else:
            ip = self.ips.allocate()
        record = {"ns": meta["namespace"], "name": meta["name"], "ip": ip, "netns": ns_name,
                  "link": link, "host_network": "1" if host_network else ""}
        if not host_network:
            try:
                if not netns.netns_exists(ns_name):
                    netns.create_pod_netns(self.config.netns, ns_name, link, ip)
                self.listeners.add(uid, ns_name, pod_ports(pod))
            except (OSError, netns.NetnsError):
                log.exception("pod %s/%s: network setup failed", meta["namespace"], meta["name"])
                netns.delete_pod_netns(self.config.netns, ns_name, link)
                self.ips.release(ip)
                self.listeners.remove(uid)
                return
        self.pods[uid] = record
        self._patch_running(pod, ip)
        log.info("pod %s/%s running at %s", meta["namespace"], meta["name"], ip)

    def _patch_running(self, pod: Pod, ip: str) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        now = _now()
        start = (pod.get("status") or {}).get("startTime") or now
        statuses = [
            {
                "name": c["name"], "image": c.get("image", ""), "imageID": "",
                "containerID": f"netns://{meta['uid']}/{c['name']}",
                "ready": True, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": start}},
            }
            for c in spec.get("containers", [])
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                      "PodScheduled")
        ]
        init_statuses = [
            {
                "name": c["name"], "image": c.get("image", ""), "imageID": "",
                "ready": True, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                         "startedAt": start, "finishedAt": start}},
            }
            for c in spec.get("initContainers") or []
        ]
        body: dict[str, Any] = {"status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": self.config.node_ip,
            "hostIPs": [{"ip": self.config.node_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": start,
            "containerStatuses": statuses,
            "qosClass": "BestEffort",
        }}
        if init_statuses:
            body["status"]["initContainerStatuses"] = init_statuses
        try:
            self.rest.patch(
                resource_path("pods", meta["namespace"], meta["name"], "status"), body,
                STRATEGIC_PATCH,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _teardown(self, uid: str) -> None:
        record = self.pods.pop(uid, None)
        self.listeners.remove(uid)
        ns_name, link = self._netns_name(uid), netns.pod_link_name(uid)
        netns.delete_pod_netns(self.config.netns, ns_name, link)
        if record and not record["host_network"]:
            self.ips.release(record["ip"])

    def _finish_deletion(self, pod: Pod) -> None:
        meta = pod["metadata"]
        self._teardown(meta["uid"])
        try:
            self.rest.delete(
                resource_path("pods", meta["namespace"], meta["name"]),
                {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        log.info("pod %s/%s deleted", meta["namespace"], meta["name"])

    def handle(self, event_type: str, pod: Pod) -> None:
        """Apply one watch event (``ADDED``/``MODIFIED``/``DELETED``) for ``pod`` (a dict)."""
        meta, spec = pod["metadata"], pod.get("spec", {})
        uid = meta["uid"]
        node = spec.get("nodeName")
        if event_type == "DELETED":
            if uid in self.pods or netns.netns_exists(self._netns_name(uid)):
                self._teardown(uid)
            return
        if not node:
            if not meta.get("deletionTimestamp"):
                self._bind(pod)
            return
        if node != self.config.node_name:
            return
        if meta.get("deletionTimestamp"):
            self._finish_deletion(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            self._teardown(uid)
            return
        if uid not in self.pods:
            self._setup(pod)

    # ------------------------------------------------------------------ main loop

    def _list_pods(self) -> tuple[list[Pod], str]:
        data = self.rest.get(resource_path("pods"))
        return data["items"], data["metadata"]["resourceVersion"]

    def reconcile(self) -> str:
        """Bring namespaces and listeners in line with the API; return the list resourceVersion.

        After an agent restart the listeners are gone (they lived in the old process) while the
        namespaces remain: known pods are re-adopted with the same IP.
        """
        pods, rv = self._list_pods()
        live: set[str] = set()
        for pod in pods:
            uid = pod["metadata"]["uid"]
            live.add(uid)
            if uid in self.pods and not self.listeners.has(uid):
                self.pods.pop(uid)
            self.handle("MODIFIED", pod)
        for uid in list(self.pods):
            if uid not in live:
                self._teardown(uid)
        prefix = self.config.pod_netns_prefix
        for name in netns.list_netns(prefix):
            uid = name[len(prefix):]
            if uid not in live:
                self._teardown(uid)
        return rv

    def run(self) -> None:
        """Register, start heartbeats, reconcile, then follow the pod watch until stopped."""
        self.register_node()
        self.listeners.start()
        threading.Thread(target=self._renew_lease_forever, name="lease", daemon=True).start()
        rv = self.reconcile()
        while not self._stop.is_set():
            self._watch = watch.Watch()
            try:
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=rv, timeout_seconds=300, allow_watch_bookmarks=True,
                ):
                    kind, obj = event["type"], event["raw_object"]
                    if kind == "ERROR":
                        raise ApiException(status=obj.get("code", 500), reason=obj.get("reason"))
                    rv = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    try:
                        self.handle(kind, obj)
                    except Exception:  # noqa: BLE001 - one bad pod must not stop the node
                        log.exception("handling %s %s failed", kind, obj["metadata"].get("name"))
            except ApiException as exc:
                if self._stop.is_set():
                    break
                log.info("watch ended (%s); relisting", exc.status)
                rv = self.reconcile()
            except Exception:  # noqa: BLE001 - network hiccup: relist and continue
                if self._stop.is_set():
                    break
                log.exception("watch failed; relisting")
                self._stop.wait(0.5)
                try:
                    rv = self.reconcile()
                except Exception:  # noqa: BLE001
                    log.exception("relist failed")

    def stop(self) -> None:
        """Stop the loops (namespaces stay; ``k8s_cluster down`` removes them)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the agent daemon."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    agent = NodeAgent(ClusterConfig(state_dir=args.state_dir))

    def on_signal(signum: int, _frame: object) -> None:
        agent.stop()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    log.info("starting node agent for %s", agent.config.node_name)
    try:
        agent.run()
    finally:
        log.info("node agent stopped after %.1f s", time.monotonic() - started)


if __name__ == "__main__":
    main()
