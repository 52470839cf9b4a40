"""Online Boutique as our own Kubernetes manifests: workloads, Services and NetworkPolicies.

Written from the public facts of Google's microservices demo (Online Boutique, the paper's
Appendix D.1 workload; https://github.com/GoogleCloudPlatform/microservices-demo, README and
architecture diagram): the twelve services, their ``app`` labels, the container ports the
services listen on, and who calls whom. No manifest text is copied; every object below is
built here.

Healthy NetworkPolicy set (our own, least-privilege reading of the architecture):

* ``default-deny`` selects every pod and denies all ingress and all egress;
* one policy per service (named like the service) selects ``app=<service>`` and
  - admits each intended caller by one ingress rule ``from app=<caller>`` on the service's
    port/TCP (services without callers admit nothing);
  - lets every caller (:data:`EGRESS_ALLOW_LISTS`) talk to exactly the services it calls, one
    egress rule per dependency on its port/TCP; services that call nothing in the namespace
    keep unrestricted egress (``egress: [{}]``, as Online Boutique's own policies do).

So every intended connection is allowed twice -- by the caller's egress rule and by the
callee's ingress rule -- and a fault on either end blocks it.

Probes go to pod IPs on container ports (the embedded cluster has no Service routing or DNS,
docs/k8s-cluster.md), so the expected matrix is stated on container ports.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

#: service -> container port (TCP), from Online Boutique's public manifests/README.
SERVICE_PORTS: dict[str, int] = {
    "frontend": 8080,
    "cartservice": 7070,
    "productcatalogservice": 3550,
    "currencyservice": 7000,
    "paymentservice": 50051,
    "shippingservice": 50051,
    "emailservice": 8080,
    "checkoutservice": 5050,
    "recommendationservice": 8080,
    "adservice": 9555,
    "redis-cart": 6379,
}

#: Every workload of the namespace, in display order; loadgenerator listens on nothing.
SERVICES: tuple[str, ...] = (
    "frontend",
    "cartservice",
    "productcatalogservice",
    "currencyservice",
    "paymentservice",
    "shippingservice",
    "emailservice",
    "checkoutservice",
    "recommendationservice",
    "adservice",
    "redis-cart",
    "loadgenerator",
)

#: caller -> services it calls (Online Boutique architecture diagram).
CALLS: dict[str, tuple[str, ...]] = {
    "loadgenerator": ("frontend",),
    "frontend": (
        "adservice",
        "cartservice",
        "checkoutservice",
        "currencyservice",
        "productcatalogservice",
        "recommendationservice",
        "shippingservice",
    ),
    "checkoutservice": (
        "cartservice",
        "currencyservice",
        "emailservice",
        "paymentservice",
        "productcatalogservice",
        "shippingservice",
    ),
    "recommendationservice": ("productcatalogservice",),
    "cartservice": ("redis-cart",),
}

#: Services whose egress is an explicit allow-list: every caller names the services it calls
#: (least privilege on both ends of each connection); services that call nothing inside the
#: namespace keep unrestricted egress (they reach external APIs).
EGRESS_ALLOW_LISTS: tuple[str, ...] = tuple(CALLS)

#: Name of the deny-all policy.
DENY_ALL = "default-deny"

#: Label key every workload carries and every healthy policy selects on.
APP_LABEL = "app"

#: Extra pod labels (realism: policies and agents may select on them).
TIERS: dict[str, str] = {
    "frontend": "web",
    "loadgenerator": "test",
    "redis-cart": "data",
}


def callers_of(service: str) -> tuple[str, ...]:
    """Services that call ``service``, in :data:`SERVICES` order."""
    return tuple(c for c in SERVICES if service in CALLS.get(c, ()))


def expected_edges() -> set[tuple[str, str, str]]:
    """The intended connectivity: ``{(src, dst, "TCP/port")}``, one per architecture edge."""
    return {
        (src, dst, f"TCP/{SERVICE_PORTS[dst]}") for src, dsts in CALLS.items() for dst in dsts
    }


def probe_plan() -> list[tuple[str, str, str]]:
    """Every probed ``(src, dst, "TCP/port")``: each service to each other service's port."""
    return [
        (src, dst, f"TCP/{SERVICE_PORTS[dst]}")
        for src in SERVICES
        for dst in SERVICES
        if dst != src and dst in SERVICE_PORTS
    ]


def _labels(service: str) -> dict[str, str]:
    labels = {APP_LABEL: service}
    labels["tier"] = TIERS.get(service, "backend")
    return labels


def deployment(service: str) -> Obj:
    """One-replica Deployment of ``service`` (the image is never pulled by the embedded
    cluster; its node agent opens a listener for every declared container port)."""
    container: Obj = {
        "name": "server" if service != "loadgenerator" else "main",
        "image": f"onlineboutique/{service}:v0",
    }
    if service in SERVICE_PORTS:
        container["ports"] = [{"containerPort": SERVICE_PORTS[service], "protocol": "TCP"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": service, "labels": {APP_LABEL: service}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {APP_LABEL: service}},
            "template": {
                "metadata": {"labels": _labels(service)},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
            },
        },
    }


def service_object(service: str) -> Obj:
    """ClusterIP Service of ``service`` (port = container port)."""
    port = SERVICE_PORTS[service]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "labels": {APP_LABEL: service}},
        "spec": {
            "selector": {APP_LABEL: service},
            "ports": [{"name": "tcp", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _peer(service: str) -> Obj:
    return {"podSelector": {"matchLabels": {APP_LABEL: service}}}


def _ports(service: str) -> list[Obj]:
    return [{"port": SERVICE_PORTS[service], "protocol": "TCP"}]


def deny_all_policy() -> Obj:
    """``default-deny``: every pod isolated for ingress and egress."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": DENY_ALL},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def service_policy(service: str) -> Obj:
    """The healthy policy of ``service`` (see the module docstring)."""
    ingress = [
        {"from": [_peer(caller)], "ports": _ports(service)} for caller in callers_of(service)
    ] if service in SERVICE_PORTS else []
    if service in EGRESS_ALLOW_LISTS:
        egress = [{"to": [_peer(dep)], "ports": _ports(dep)} for dep in CALLS[service]]
    else:
        egress = [{}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": service},
        "spec": {
            "podSelector": {"matchLabels": {APP_LABEL: service}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def healthy_policies() -> dict[str, Obj]:
    """Every policy of the healthy namespace, by name (deny-all first)."""
    policies = {DENY_ALL: deny_all_policy()}
    for service in SERVICES:
        policies[service] = service_policy(service)
    return policies


def workload() -> list[Obj]:
    """Deployments and Services of the namespace (no policies)."""
    objs = [deployment(s) for s in SERVICES]
    objs += [service_object(s) for s in SERVICES if s in SERVICE_PORTS]
    return objs


def policy_copy(policies: dict[str, Obj]) -> dict[str, Obj]:
    """Deep copy of a policy set (fault injection edits copies)."""
    return copy.deepcopy(policies)


def starting_policies(ground_truth: dict[str, Any]) -> dict[str, Obj]:
    """The policies an episode writes over the public healthy set at reset, by name.

    The injected version ``ground_truth["policies"][name]`` of every name in
    ``ground_truth["repair"]``, plus every ``{name: policy}`` of the optional
    ``ground_truth["baseline"]`` (created when the public set has no policy of that name).
    Empty for a public healthy control. Public queries have no baseline and expect the public
    connectivity; a variant pack (docs/writing-a-variant-pack.md, "k8s packs") may declare
    another intended connectivity and another healthy set, as long as the repair (applied by
    the oracle) together with the baseline and the untouched public policies realises it.
    """
    written = {name: ground_truth["policies"][name] for name in ground_truth.get("repair") or {}}
    written.update(ground_truth.get("baseline") or {})
    return written
