"""Seeded random NetworkPolicy sets over a small two-namespace world, for differential tests.

A *world* is two namespaces with three pods each. Every pod declares the same three named
ports and gets random labels; the namespaces get random labels. A policy set is 1-4 random
NetworkPolicies covering pod/namespace selectors (matchLabels and matchExpressions), both
policy types, absent and empty ``from``/``to``, numbered, named and ranged (``endPort``) ports,
TCP and UDP, and ipBlocks.

Nothing an agent could write is excluded any more: Ingress and Egress policies (and policies
with both) select pods of both namespaces; one port name maps to different numbers on different
pods (``http`` is TCP 80 or 81, ``web`` TCP 8080 or 9090, ``dns`` UDP 5353 or 5354); named
ports appear in egress rules with and without ``to``; ipBlocks include ``10.0.0.0/8``, which
covers the pod network (our model and our enforcer match pod IPs in ipBlocks, as Kubernetes'
e2e suite expects; nca does not, and :func:`apps.k8s.cluster.nca_oracle.nca_allowed_ports`
translates ipBlocks into pod peers so that its answer uses the same reading). Divergences 2-4
of kube-router (docs/k8s-cluster.md) come out of this generator too.

Still avoided, because the *oracle* (nca 2.1.0) is wrong there, not the cluster:

* ``operator: Exists`` or ``DoesNotExist`` in a peer's podSelector together with a
  namespaceSelector: nca then matches only pods of the policy's own namespace. Such peers use
  ``In``/``NotIn``/matchLabels.
* nca drops a pod from the whole analysis ("Ignoring the pod") when a policy names a port the
  pod lacks or declares with another protocol. Every pod declares every name and policies use a
  name only with its protocol.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

NAMED_NUMBERS = {"http": ("TCP", (80, 81)), "web": ("TCP", (8080, 9090)),
                 "dns": ("UDP", (5353, 5354))}
PORTS = tuple((proto, n) for proto, numbers in NAMED_NUMBERS.values() for n in numbers)
NAMED_PORTS = (("TCP", "http"), ("TCP", "web"), ("UDP", "dns"))
POD_LABELS = {"app": ("a", "b", "c"), "tier": ("web", "db")}
NS_LABELS = {"team": ("x", "y"), "env": ("prod", "dev")}
IP_BLOCKS = ("192.168.0.0/16", "192.168.7.0/24", "172.16.0.0/12", "10.0.0.0/8")


def world_namespaces(world: str) -> tuple[str, str]:
    """The two namespace names of ``world``."""
    return f"{world}-a", f"{world}-b"


def pod_manifests(world: str, rng: random.Random) -> list[Obj]:
    """Six bare pods (three per namespace) with random labels; each declares every port name
    of :data:`NAMED_NUMBERS` with one of its numbers, chosen per pod."""
    pods = []
    for ns in world_namespaces(world):
        for i in range(3):
            ports = [
                {"containerPort": rng.choice(numbers), "protocol": proto, "name": name}
                for name, (proto, numbers) in NAMED_NUMBERS.items()
            ]
            pods.append({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i}", "namespace": ns, "labels": random_pod_labels(rng)},
                "spec": {"containers": [{"name": "main", "image": "netarena/none",
                                         "ports": ports}]},
            })
    return pods


def random_pod_labels(rng: random.Random) -> dict[str, str]:
    """Random values for every key of :data:`POD_LABELS` (some keys dropped)."""
    return {k: rng.choice(v) for k, v in POD_LABELS.items() if rng.random() < 0.85}


def random_ns_labels(rng: random.Random) -> dict[str, str]:
    """Random values for every key of :data:`NS_LABELS` (some keys dropped)."""
    return {k: rng.choice(v) for k, v in NS_LABELS.items() if rng.random() < 0.85}


def _selector(
    rng: random.Random, labels: Mapping[str, tuple[str, ...]], *, allow_exists: bool = True
) -> Obj:
    roll = rng.random()
    if roll < 0.25:
        return {}
    key = rng.choice(sorted(labels))
    if roll < 0.7:
        return {"matchLabels": {key: rng.choice(labels[key])}}
    ops = ("In", "NotIn", "Exists", "DoesNotExist") if allow_exists else ("In", "NotIn")
    op = rng.choice(ops)
    expr: Obj = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = sorted(set(rng.sample(labels[key], rng.randint(1, len(labels[key])))))
    return {"matchExpressions": [expr]}


def _peer(rng: random.Random) -> Obj:
    roll = rng.random()
    if roll < 0.1:
        block = rng.choice(IP_BLOCKS)
        peer: Obj = {"ipBlock": {"cidr": block}}
        if block == "192.168.0.0/16" and rng.random() < 0.5:
            peer["ipBlock"]["except"] = ["192.168.7.0/24"]
        return peer
    if roll < 0.45:
        return {"podSelector": _selector(rng, POD_LABELS)}
    if roll < 0.7:
        return {"namespaceSelector": _selector(rng, NS_LABELS)}
    return {
        "podSelector": _selector(rng, POD_LABELS, allow_exists=False),
        "namespaceSelector": _selector(rng, NS_LABELS),
    }


def _ports(rng: random.Random) -> list[Obj] | None:
    if rng.random() < 0.35:
        return None
    ports = []
    for _ in range(rng.randint(1, 2)):
        roll = rng.random()
        if roll < 0.4:
            proto, number = rng.choice(PORTS)
            ports.append({"protocol": proto, "port": number})
        elif roll < 0.7:
            proto, name = rng.choice(NAMED_PORTS)
            ports.append({"protocol": proto, "port": name})
        elif roll < 0.85:
            low = rng.choice((70, 80, 5000, 8000))
            ports.append({"protocol": rng.choice(("TCP", "UDP")), "port": low,
                          "endPort": low + rng.choice((10, 100, 1000))})
        else:
            ports.append({"protocol": "UDP"})
    return ports


def _rules(rng: random.Random, direction: str) -> list[Obj]:
    peers_key = "from" if direction == "ingress" else "to"
    rules = []
    for _ in range(rng.choice((0, 1, 1, 2))):
        rule: Obj = {}
        if rng.random() < 0.8:
            rule[peers_key] = [_peer(rng) for _ in range(rng.randint(1, 2))]
        ports = _ports(rng)
        if ports is not None:
            rule["ports"] = ports
        rules.append(rule)
    return rules


def random_policies(world: str, rng: random.Random) -> list[Obj]:
    """1-4 NetworkPolicies in either namespace: Ingress, Egress or both (with or without
    ``policyTypes``), so egress rules restrict pods that ingress rules admit."""
    policies = []
    for i in range(rng.randint(1, 4)):
        ns = rng.choice(world_namespaces(world))
        spec: Obj = {"podSelector": _selector(rng, POD_LABELS)}
        kind = rng.choice(("ingress", "egress", "both"))
        if kind in ("ingress", "both"):
            spec["ingress"] = _rules(rng, "ingress")
        if kind in ("egress", "both"):
            spec["egress"] = _rules(rng, "egress")
        if kind == "egress" or rng.random() < 0.7:
            spec["policyTypes"] = [t for t, k in (("Ingress", "ingress"), ("Egress", "egress"))
                                   if k in spec]
        policies.append({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"np{i}", "namespace": ns},
            "spec": spec,
        })
    return policies
