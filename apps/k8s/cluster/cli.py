"""Command-line actions shared by ``python -m apps.k8s.cluster`` and the Django commands."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Protocol

from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.prober import list_pod_endpoints, measure_matrix


class Writer(Protocol):
    """Anything with ``write(text)``: a text stream, Django's ``OutputWrapper``."""

    def write(self, msg: str, /) -> Any: ...


def cluster_action(action: str, out: Writer, *, as_json: bool = False,
                   timeout_s: float = 180.0) -> int:
    """Run ``up``, ``down`` or ``status`` and print the result to ``out``.

    Returns:
        Exit code: 0 on success; for ``status``, 0 if the cluster is running, 3 if not.
    """
    cluster = Cluster()
    start = time.monotonic()
    if action == "up":
        status = cluster.up(timeout_s=timeout_s)
    elif action == "down":
        cluster.down()
        status = cluster.status()
    elif action == "status":
        status = cluster.status()
    else:
        raise ValueError(f"unknown action {action!r}")
    elapsed = time.monotonic() - start
    data: dict[str, Any] = status.as_dict() | {"action": action, "elapsed_s": round(elapsed, 3)}
    if as_json:
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        state = "running" if status.running else "stopped"
        out.write(f"cluster {state} ({action} took {elapsed:.1f} s)\n")
        if status.running:
            out.write(f"  server:     {status.server}\n  kubeconfig: {status.kubeconfig}\n")
            out.write(f"  node ready: {status.node_ready}\n")
        for name, pid in status.components.items():
            rss = status.rss_bytes.get(name, 0) / 2**20
            out.write(f"  {name:<24} {'pid ' + str(pid) if pid else '-':<12} {rss:7.1f} MiB\n")
    if action == "status" and not status.running:
        return 3
    return 0


def connectivity_action(namespace: str, out: Writer, *, as_json: bool = False,
                        timeout_s: float = 0.5, wait_s: float = 60.0) -> int:
    """Wait for the dataplane, then print the measured pod -> pod:port matrix of ``namespace``.

    JSON shape: ``{"namespace", "pods": {name: ip}, "matrix": {src: {dst: {"TCP/80": bool}}},
    "probes", "elapsed_s"}`` with pod names without the namespace prefix.
    """
    cluster = Cluster()
    cluster.wait_dataplane([namespace], timeout_s=wait_s)
    endpoints = list_pod_endpoints(cluster.api_client(), [namespace], cluster.config)
    start = time.monotonic()
    matrix = measure_matrix(endpoints, timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    prefix = namespace + "/"
    short = {
        src.removeprefix(prefix): {dst.removeprefix(prefix): ports for dst, ports in row.items()}
        for src, row in matrix.items()
    }
    probes = sum(len(p) for row in matrix.values() for p in row.values())
    if as_json:
        out.write(json.dumps({
            "namespace": namespace,
            "pods": {e.name: e.ip for e in endpoints},
            "matrix": short,
            "probes": probes,
            "elapsed_s": round(elapsed, 3),
        }, indent=2, sort_keys=True) + "\n")
        return 0
    out.write(f"{namespace}: {len(endpoints)} pods, {probes} probes in {elapsed:.2f} s\n")
    for src, row in sorted(short.items()):
        for dst, ports in sorted(row.items()):
            allowed = [p for p, ok in sorted(ports.items()) if ok]
            out.write(f"  {src} -> {dst}: {', '.join(allowed) if allowed else 'none'}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m apps.k8s.cluster {up,down,status} [--json]`` or ``connectivity -n NS``."""
    import sys

    parser = argparse.ArgumentParser(prog="python -m apps.k8s.cluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--json", action="store_true")
        p.add_argument("--timeout", type=float, default=180.0, help="seconds (up)")
    p = sub.add_parser("connectivity")
    p.add_argument("--namespace", "-n", required=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--probe-timeout", type=float, default=0.5, help="seconds per probe")
    args = parser.parse_args(argv)
    if args.cmd == "connectivity":
        return connectivity_action(args.namespace, sys.stdout, as_json=args.json,
                                   timeout_s=args.probe_timeout)
    return cluster_action(args.cmd, sys.stdout, as_json=args.json, timeout_s=args.timeout)
