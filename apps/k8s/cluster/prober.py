"""Measure pod-to-pod reachability from inside the pods' network namespaces.

A TCP probe succeeds when the three-way handshake completes; a UDP probe when the echo of a
datagram comes back. The enforcer REJECTs forbidden packets (ICMP port unreachable), so a blocked
probe fails fast with ECONNREFUSED instead of waiting for the timeout; a port with no listener
looks the same, which is why the node agent listens on every declared containerPort. Every
probe opens a fresh socket (conntrack keeps established flows alive across policy changes).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.netns import join_netns, socket_in_netns
from apps.k8s.cluster.rest import KubeRest, resource_path

PROBE_PAYLOAD = b"netarena-probe"


@dataclass(frozen=True)
class PodEndpoint:
    """A running pod as the prober sees it.

    Attributes:
        namespace / name: the pod's identity; netns: its network namespace name.
        ip: pod IP; labels: pod labels; ports: declared ``(protocol, port, name)`` triples.
    """

    namespace: str
    name: str
    ip: str
    netns: str
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    ports: tuple[tuple[str, int, str], ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Probe:
    """One reachability question: from ``src`` to ``dst_ip:port/protocol``."""

    src_netns: str
    dst_ip: str
    port: int
    protocol: str = "TCP"


SocketFactory = Callable[[str, int], socket.socket]
"""``(netns, SOCK_STREAM | SOCK_DGRAM) -> an AF_INET socket in that network namespace``."""


def _socket_via_helper(netns: str, kind: int) -> socket.socket:
    return socket_in_netns(netns, socket.AF_INET, kind)


def probe_once(
    probe: Probe, timeout_s: float = 0.5, make_socket: SocketFactory = _socket_via_helper
) -> bool:
    """Run one probe; True if the destination answered.

    Args:
        make_socket: how to get a socket in the source namespace (default: a helper thread
            joins it, so the caller's thread stays where it is).

    Raises:
        OSError: only if the source namespace cannot be entered (missing pod namespace).
    """
    if probe.protocol == "UDP":
        sock = make_socket(probe.src_netns, socket.SOCK_DGRAM)
        with sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect((probe.dst_ip, probe.port))
                sock.send(PROBE_PAYLOAD)
                return sock.recv(256) == PROBE_PAYLOAD
            except OSError:
                return False
    sock = make_socket(probe.src_netns, socket.SOCK_STREAM)
    with sock:
        sock.settimeout(timeout_s)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        try:
            sock.connect((probe.dst_ip, probe.port))
            return True
        except OSError:
            return False


_pool_thread = threading.local()


def _socket_in_pool_thread(netns: str, kind: int) -> socket.socket:
    """A socket in ``netns`` created by the calling pool thread itself, which moves into
    ``netns`` first unless it is already there (one ``setns`` per change of source instead of
    one helper thread per probe)."""
    if getattr(_pool_thread, "netns", None) != netns:
        _pool_thread.netns = None
        join_netns(netns)
        _pool_thread.netns = netns
    return socket.socket(socket.AF_INET, kind)


def probe_many(
    probes: Sequence[Probe], timeout_s: float = 0.5, workers: int = 64
) -> list[bool]:
    """Run ``probes`` in parallel (threads of a private pool); results in input order.

    Each pool thread joins the source namespace of its probe itself (the pool and its threads
    end with the call, so no other code ever runs in a moved thread). Probes are handed out
    grouped by source, so a thread mostly stays in one namespace.

    Args:
        timeout_s: per-probe timeout in seconds (a blocked probe usually fails in < 1 ms).
        workers: maximum concurrent probes.
    """
    if not probes:
        return []
    order = sorted(range(len(probes)), key=lambda i: probes[i].src_netns)
    results = [False] * len(probes)

    def run(index: int) -> None:
        results[index] = probe_once(probes[index], timeout_s, _socket_in_pool_thread)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(probes))),
                            thread_name_prefix="netarena-probe") as pool:
        list(pool.map(run, order))
    return results


def list_pod_endpoints(
    api: client.ApiClient,
    namespaces: Iterable[str],
    config: ClusterConfig | None = None,
    label_selector: str | None = None,
) -> list[PodEndpoint]:
    """Running pods with an IP in ``namespaces``, sorted by ``namespace/name``."""
    cfg = config or ClusterConfig()
    rest = KubeRest(api)
    result = []
    for ns in namespaces:
        query = {"labelSelector": label_selector} if label_selector else {}
        items = rest.get(resource_path("pods", ns), **query)["items"]
        for pod in items:
            status, meta = pod.get("status") or {}, pod["metadata"]
            if status.get("phase") != "Running" or not status.get("podIP"):
                continue
            if meta.get("deletionTimestamp") or pod["spec"].get("hostNetwork"):
                continue
            ports = tuple(
                (p.get("protocol", "TCP"), int(p["containerPort"]), p.get("name", ""))
                for c in pod["spec"].get("containers", [])
                for p in c.get("ports") or []
            )
            result.append(PodEndpoint(
                namespace=meta["namespace"], name=meta["name"], ip=status["podIP"],
                netns=cfg.pod_netns_prefix + meta["uid"],
                labels=dict(meta.get("labels") or {}), ports=ports,
            ))
    return sorted(result, key=lambda e: e.key)


ConnectivityMatrix = dict[str, dict[str, dict[str, bool]]]
"""``matrix[src_key][dst_key]["TCP/80"]`` = reachable."""


def measure_matrix(
    endpoints: Sequence[PodEndpoint],
    *,
    sources: Sequence[PodEndpoint] | None = None,
    include_self: bool = False,
    timeout_s: float = 0.5,
    workers: int = 64,
) -> ConnectivityMatrix:
    """Probe every source -> every destination's declared ports.

    Args:
        endpoints: destinations (and sources unless ``sources`` is given).
        include_self: also probe a pod to itself (always allowed by Kubernetes semantics).

    Returns:
        ``{src: {dst: {"PROTO/port": bool}}}`` keyed by ``namespace/name``.
    """
    srcs = list(sources) if sources is not None else list(endpoints)
    plan: list[tuple[str, str, str]] = []
    probes: list[Probe] = []
    for src in srcs:
        for dst in endpoints:
            if dst.key == src.key and not include_self:
                continue
            for proto, port, _name in sorted(set(dst.ports)):
                if proto not in ("TCP", "UDP"):
                    continue
                plan.append((src.key, dst.key, f"{proto}/{port}"))
                probes.append(Probe(src.netns, dst.ip, port, proto))
    results = probe_many(probes, timeout_s=timeout_s, workers=workers)
    matrix: ConnectivityMatrix = {}
    for (src_key, dst_key, port_key), ok in zip(plan, results, strict=True):
        matrix.setdefault(src_key, {}).setdefault(dst_key, {})[port_key] = ok
    return matrix
