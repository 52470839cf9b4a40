"""Linux network-namespace helpers: the cluster namespace, pod namespaces, sockets inside them.

Pods use the routed point-to-point layout of the CNI ``ptp`` plugin
(https://www.cni.dev/plugins/current/main/ptp/): the pod's ``eth0`` holds ``podIP/32`` and a
default route via the link-local gateway ``169.254.1.1``, which sits on the cluster-namespace end
of the veth; the cluster namespace routes ``podIP/32`` to that veth. No bridge, so iptables sees
every pod-to-pod packet in the FORWARD chain of the cluster namespace, where the enforcer's
NetworkPolicy rules live.

All commands need root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

NETNS_DIR = Path("/run/netns")
GATEWAY_IP = "169.254.1.1"
CLONE_NEWNET = 0x40000000

T = TypeVar("T")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message carries its stderr."""


def run_ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip [-n NETNS] ARGS...`` and return stdout.

    Raises:
        NetnsError: if ``check`` and the command exits non-zero.
    """
    cmd = ["ip"] + (["-n", netns] if netns else []) + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


def run_ip_batch(lines: list[str], netns: str | None = None) -> None:
    """Run many ``ip`` commands in one process (``ip -batch -``), stopping at the first error.

    Raises:
        NetnsError: with the stderr of ``ip`` when a line fails.
    """
    if not lines:
        return
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise NetnsError(f"ip -batch failed: {proc.stderr.strip()}")


def netns_exists(name: str) -> bool:
    """True if ``/run/netns/<name>`` exists."""
    return (NETNS_DIR / name).exists()


def list_netns(prefix: str = "") -> list[str]:
    """Names of the named network namespaces starting with ``prefix``."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def delete_netns(name: str) -> None:
    """Delete a named network namespace (with its interfaces and iptables rules) if it exists."""
    if netns_exists(name):
        run_ip("netns", "delete", name, check=False)


def sysctl(netns: str, key: str, value: str) -> None:
    """Set ``/proc/sys/<key>`` inside ``netns`` (per-namespace sysctls such as ip_forward)."""
    path = "/proc/sys/" + key.replace(".", "/")
    _in_netns(netns, lambda: Path(path).write_text(value))


def create_cluster_netns(netns: str, host_veth: str, host_ip: str, node_ip: str, plen: int) -> None:
    """Create the cluster namespace linked to the root namespace by a veth pair.

    The root end ``host_veth`` gets ``host_ip/plen``; the namespace end ``eth0`` gets
    ``node_ip/plen`` and a default route via ``host_ip`` (kube-apiserver wants a default route
    to pick its advertise address, and refuses to start without one). Idempotent callers should
    check :func:`netns_exists` first.
    """
    run_ip("netns", "add", netns)
    run_ip("link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    run_ip("addr", "add", f"{host_ip}/{plen}", "dev", host_veth)
    run_ip("link", "set", host_veth, "up")
    run_ip_batch(
        [
            "link set lo up",
            f"addr add {node_ip}/{plen} dev eth0",
            "link set eth0 up",
            f"route add default via {host_ip}",
        ],
        netns=netns,
    )
    sysctl(netns, "net.ipv4.ip_forward", "1")
    sysctl(netns, "net.ipv4.conf.all.rp_filter", "0")
    sysctl(netns, "net.ipv4.conf.default.rp_filter", "0")
    unlimit_icmp(netns)


ICMP_UNLIMITED = (
    ("net.ipv4.icmp_ratelimit", "0"),
    ("net.ipv4.icmp_ratemask", "0"),
    ("net.ipv4.icmp_msgs_per_sec", "1000000"),
    ("net.ipv4.icmp_msgs_burst", "1000000"),
)
"""ICMP sysctls of the cluster namespace (ip-sysctl.rst, kernel documentation): by default the
kernel sends at most one "port unreachable" per destination per second after a small burst
(``icmp_ratelimit`` 1000 ms for the types of ``icmp_ratemask``) and 1000 per second in all
(``icmp_msgs_per_sec``, burst 50). The enforcer REJECTs denied connections with exactly that
message, so under the limits a blocked probe waits for its timeout instead of failing at once
(same answer, measured 1 s instead of 50 ms for a 121-probe matrix)."""


def unlimit_icmp(netns: str) -> None:
    """Lift the ICMP rate limits of :data:`ICMP_UNLIMITED` in ``netns`` (idempotent; a key the
    kernel lacks, e.g. the per-namespace ``icmp_msgs_*`` of older kernels, is left alone)."""
    for key, value in ICMP_UNLIMITED:
        try:
            sysctl(netns, key, value)
        except OSError:
            continue


def pod_link_name(uid: str) -> str:
    """Cluster-side veth name of a pod: 15 characters at most (IFNAMSIZ - 1)."""
    return "nkp" + hashlib.sha256(uid.encode()).hexdigest()[:12]


def create_pod_netns(cluster_netns: str, pod_netns: str, link: str, pod_ip: str) -> None:
    """Create ``pod_netns`` with ``eth0`` = ``pod_ip/32`` routed from ``cluster_netns``.

    Raises:
        NetnsError: if any step fails (the caller should :func:`delete_pod_netns` to clean up).
    """
    run_ip("netns", "add", pod_netns)
    run_ip_batch(
        [
            f"link add {link} type veth peer name eth0 netns {pod_netns}",
            f"addr add {GATEWAY_IP}/32 dev {link}",
            f"link set {link} up",
            f"route replace {pod_ip}/32 dev {link} scope link",
        ],
        netns=cluster_netns,
    )
    run_ip_batch(
        [
            "link set lo up",
            f"addr add {pod_ip}/32 dev eth0",
            "link set eth0 up",
            f"route add {GATEWAY_IP} dev eth0 scope link",
            f"route add default via {GATEWAY_IP} dev eth0",
        ],
        netns=pod_netns,
    )


def delete_pod_netns(cluster_netns: str, pod_netns: str, link: str) -> None:
    """Remove a pod namespace and its veth (deleting one end deletes the pair and the route)."""
    if netns_exists(cluster_netns):
        run_ip("link", "delete", link, netns=cluster_netns, check=False)
    delete_netns(pod_netns)


def _in_netns(netns: str, func: Callable[[], T]) -> T:
    """Run ``func`` in a helper thread that has joined ``netns``; return its result.

    ``setns(CLONE_NEWNET)`` changes only the calling thread, and sockets stay bound to the
    namespace they were created in, so a socket returned by ``func`` keeps working from any
    thread (man 2 setns, man 7 network_namespaces).
    """
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            join_netns(netns)  # this thread only; it ends with ``func``
            result.append(func())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller thread
            error.append(exc)

    thread = threading.Thread(target=target, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def join_netns(netns: str) -> None:
    """Move the *calling thread* into network namespace ``netns`` for good (``setns``).

    Only for threads that exist for that purpose (the prober's pool threads, which die with
    their pool); any other thread should use :func:`socket_in_netns`.

    Raises:
        OSError: the namespace does not exist or setns fails.
    """
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def socket_in_netns(netns: str, family: int, kind: int) -> socket.socket:
    """Create a socket that lives in network namespace ``netns``.

    Raises:
        OSError: if the namespace does not exist or setns fails.
    """
    return _in_netns(netns, lambda: socket.socket(family, kind))
