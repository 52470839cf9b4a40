"""Benchmark: the embedded Kubernetes cluster (docs/k8s-cluster.md). Prints medians.

Stages:

- ``start``: ``Cluster.up()`` from nothing (certificates, etcd, kube-apiserver ready,
  controller-manager, node agent Ready, the enforcer enforcing the sentinel policy); ``down``
  likewise. Memory: resident set of every component right after start and after the workload.
- ``policy change``: a 12-pod Online-Boutique-shaped namespace; each change flips a deny-all
  ingress policy on or off. Reported: the barrier (``wait_dataplane``) after the write, and the
  directly observed latency (write -> first probe that sees the new state; polling one pair).
- ``probe 12x12``: the full pod -> pod:port matrix of the 12 services (132 ordered pairs).

Needs root and the binaries of ``scripts/build_k8s.sh``. Leaves the cluster down unless
``--keep`` is given.

Usage: .venv/bin/python benchmarks/bench_k8s_cluster.py [--starts 3] [--changes 10] [--probes 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.k8s.cluster.control_plane import Cluster  # noqa: E402
from apps.k8s.cluster.prober import (  # noqa: E402
    PodEndpoint,
    Probe,
    list_pod_endpoints,
    measure_matrix,
    probe_once,
)
from apps.k8s.cluster.rest import KubeRest, resource_path  # noqa: E402
from apps.k8s.cluster.sync import wait_pods_ready  # noqa: E402

NS = "bench-boutique"
SERVICES = {  # Online Boutique services and their container ports
    "frontend": 8080, "cartservice": 7070, "productcatalogservice": 3550,
    "currencyservice": 7000, "paymentservice": 50051, "shippingservice": 50051,
    "emailservice": 8080, "checkoutservice": 5050, "recommendationservice": 8080,
    "adservice": 9555, "redis-cart": 6379, "loadgenerator": 8089,
}


def _median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:8.1f} ms (n={len(samples)}, " \
           f"min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})"


def _mib(cluster: Cluster) -> str:
    rss = cluster.status().rss_bytes
    parts = ", ".join(f"{k} {v / 2**20:.0f}" for k, v in rss.items())
    return f"{sum(rss.values()) / 2**20:.0f} MiB total ({parts})"


def _deploy_boutique(cluster: Cluster) -> list[PodEndpoint]:
    rest = KubeRest(cluster.api_client())
    cluster.ensure_namespace(NS)
    for name, port in SERVICES.items():
        labels = {"app": name}
        rest.create_or_keep(resource_path("deployments", NS), {
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": f"boutique/{name}",
                                         "ports": [{"containerPort": port}]}]}}},
        })
        rest.create_or_keep(resource_path("services", NS), {
            "metadata": {"name": name},
            "spec": {"selector": labels, "ports": [{"port": port, "targetPort": port}]},
        })
    wait_pods_ready(cluster.api_client(), [NS], timeout_s=120)
    return list_pod_endpoints(cluster.api_client(), [NS], cluster.config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()

    cluster = Cluster()
    cluster.down()
    starts, downs = [], []
    for i in range(args.starts):
        t0 = time.monotonic()
        cluster.up()
        starts.append(time.monotonic() - t0)
        if i == 0:
            print(f"memory after start:   {_mib(cluster)}")
        if i < args.starts - 1:
            t0 = time.monotonic()
            cluster.down()
            downs.append(time.monotonic() - t0)
    print(f"start (up):           {_median_ms(starts)}")
    if downs:
        print(f"stop (down):          {_median_ms(downs)}")

    t0 = time.monotonic()
    endpoints = _deploy_boutique(cluster)
    print(f"12 deployments ready: {(time.monotonic() - t0) * 1000:8.1f} ms")
    print(f"memory with workload: {_mib(cluster)}")
    by_name = {e.labels["app"]: e for e in endpoints}
    rest = KubeRest(cluster.api_client())
    policy = {"metadata": {"name": "deny-all"},
              "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    watch = Probe(by_name["frontend"].netns, by_name["cartservice"].ip,
                  SERVICES["cartservice"])
    barrier, observed = [], []

    def flip(i: int) -> bool:
        deny = i % 2 == 0
        if deny:
            rest.create(resource_path("networkpolicies", NS), policy)
        else:
            rest.delete(resource_path("networkpolicies", NS, "deny-all"))
        return deny

    for i in range(args.changes):  # latency seen by polling one affected pair
        t0 = time.monotonic()
        deny = flip(i)
        while probe_once(watch, timeout_s=0.2) == deny:
            if time.monotonic() - t0 > 30:
                raise TimeoutError("policy change not observed within 30 s")
        observed.append(time.monotonic() - t0)
    for i in range(args.changes):  # the generic barrier, checked against the same pair
        t0 = time.monotonic()
        deny = flip(i + args.changes)
        cluster.wait_dataplane(timeout_s=30)
        barrier.append(time.monotonic() - t0)
        if probe_once(watch, timeout_s=0.5) == deny:
            raise AssertionError("barrier returned before the change was in force")
    print(f"policy change seen:   {_median_ms(observed)}  (write -> first probe in new state)")
    print(f"policy change barrier:{_median_ms(barrier)}  (write -> wait_dataplane returns)")

    probes = []
    for _ in range(args.probes):
        t0 = time.monotonic()
        matrix = measure_matrix(endpoints, timeout_s=0.5)
        probes.append(time.monotonic() - t0)
    pairs = sum(len(row) for row in matrix.values())
    print(f"probe 12x12 matrix:   {_median_ms(probes)}  ({pairs} pairs)")

    if not args.keep:
        t0 = time.monotonic()
        cluster.down()
        print(f"final down:           {(time.monotonic() - t0) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
