"""Seeded random NetworkPolicy sets over a small two-namespace world, for differential tests.

A *world* is two namespaces with three pods each. Every pod declares the same three named
ports and gets random labels; the namespaces get random labels. A policy set is 1-4 random
NetworkPolicies covering pod/namespace selectors (matchLabels and matchExpressions), both
policy types, absent and empty ``from``/``to``, numbered, named and ranged (``endPort``) ports,
TCP and UDP, and ipBlocks.

Excluded on purpose, each a known divergence between the two sides (docs/k8s-cluster.md):

1. ipBlocks that contain pod or node IPs (research note §5): Kubernetes leaves "ipBlock vs pod
   IP" to the implementation; nca treats pods and IP ranges as disjoint while iptables
   implementations match the address. All generated ipBlocks lie in 192.168.0.0/16 and
   172.16.0.0/12, disjoint from the pod CIDR 10.244.0.0/16 and 10.250.0.0/30.
2. Named ports in an egress rule without ``to``: kube-router v2.10.0 resolves the name only
   against pods of the policy's own namespace and then opens the resulting numbers towards every
   destination (pkg/controllers/netpol/policy.go, ``len(specEgressRule.To) == 0`` branch), where
   Kubernetes resolves the name per destination pod. Such rules get numeric ports only.
3. ``operator: Exists`` or ``DoesNotExist`` in a peer's podSelector together with a
   namespaceSelector: nca 2.1.0 then matches only pods of the policy's own namespace (checked by
   hand: ``In``, ``NotIn`` and matchLabels match the other namespace's pods, ``Exists`` and
   ``DoesNotExist`` do not). Such peers use ``In``/``NotIn``/matchLabels.
4. A pod selected both by policies with ingress rules and by policies with egress rules:
   kube-router v2.10.0 runs every policy selecting a pod in one per-pod chain for traffic in
   both directions, so an ingress rule that admits the destination also admits the source's
   egress (and vice versa) when both pods are on the node (same class as k3s-io/k3s#2390).
   Worlds keep Ingress policies in namespace ``-a`` and Egress policies in ``-b``.
5. nca 2.1.0 drops a pod from the whole analysis ("Ignoring the pod") when a policy names a
   port the pod lacks or declares with another protocol. Every pod declares every name and
   policies use a name only with its protocol.
6. One port name resolving to different numbers on different target pods: kube-router v2.10.0
   numbers its per-port ipsets by Go map iteration order, which changes between syncs, and
   refreshing a reused set name left members of the other port in it (seen: pod with
   ``web=8080`` in the set for port 80 after a few syncs). Names map to the same number on
   every pod (``http``=TCP 80, ``web``=TCP 8080, ``dns``=UDP 5353), so named ports are still
   resolved by name but uniformly.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

PORTS = (("TCP", 80), ("TCP", 8080), ("UDP", 5353))
NAMED_PORTS = (("TCP", "http"), ("TCP", "web"), ("UDP", "dns"))
POD_LABELS = {"app": ("a", "b", "c"), "tier": ("web", "db")}
NS_LABELS = {"team": ("x", "y"), "env": ("prod", "dev")}
IP_BLOCKS = ("192.168.0.0/16", "192.168.7.0/24", "172.16.0.0/12")


def world_namespaces(world: str) -> tuple[str, str]:
    """The two namespace names of ``world``."""
    return f"{world}-a", f"{world}-b"


def pod_manifests(world: str, rng: random.Random) -> list[Obj]:
    """Six bare pods (three per namespace) with random labels and per-pod port names."""
    pods = []
    for ns in world_namespaces(world):
        for i in range(3):
            ports = [
                {"containerPort": 80, "protocol": "TCP", "name": "http"},
                {"containerPort": 8080, "protocol": "TCP", "name": "web"},
                {"containerPort": 5353, "protocol": "UDP", "name": "dns"},
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


def _ports(rng: random.Random, *, named: bool = True) -> list[Obj] | None:
    if rng.random() < 0.35:
        return None
    ports = []
    for _ in range(rng.randint(1, 2)):
        roll = rng.random()
        if roll < 0.4:
            proto, number = rng.choice(PORTS)
            ports.append({"protocol": proto, "port": number})
        elif roll < 0.7 and named:
            proto, name = rng.choice(NAMED_PORTS)
            ports.append({"protocol": proto, "port": name})
        elif roll < 0.7:
            proto, number = rng.choice(PORTS)
            ports.append({"protocol": proto, "port": number})
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
        ports = _ports(rng, named=direction == "ingress" or peers_key in rule)
        if ports is not None:
            rule["ports"] = ports
        rules.append(rule)
    return rules


def random_policies(world: str, rng: random.Random) -> list[Obj]:
    """1-4 NetworkPolicies: Ingress-only ones in namespace ``-a``, Egress-only ones in ``-b``.

    Keeping the directions apart per namespace avoids divergence 4 (module docstring) while
    still testing ingress (a -> a), egress (b -> b) and their combination (b -> a).
    """
    ns_in, ns_out = world_namespaces(world)
    policies = []
    for i in range(rng.randint(1, 4)):
        ns = rng.choice((ns_in, ns_out))
        spec: Obj = {"podSelector": _selector(rng, POD_LABELS)}
        if ns == ns_in:
            if rng.random() < 0.7:
                spec["policyTypes"] = ["Ingress"]
            spec["ingress"] = _rules(rng, "ingress")
        else:
            spec["policyTypes"] = ["Egress"]
            spec["egress"] = _rules(rng, "egress")
        policies.append({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"np{i}", "namespace": ns},
            "spec": spec,
        })
    return policies
