"""A small NetworkPolicy evaluator for one namespace (generation-time model, not the judge).

Query generation uses it to check, without a cluster, that an injected fault really changes
the Online Boutique matrix (each query must start with at least one mismatch); the heuristic
reference agent uses it on the policies it read through ``kubectl``. The judge never trusts
it: episodes measure the real dataplane and cross-check it with an independent analyser
(:mod:`apps.k8s.crosscheck`).

Semantics (Kubernetes docs, "Network Policies",
https://kubernetes.io/docs/concepts/services-networking/network-policies/): a pod is isolated
for a direction when some policy selecting it lists that direction in ``policyTypes``
(``policyTypes`` defaults to ``["Ingress"]`` plus ``"Egress"`` when an ``egress`` section is
present); an isolated pod admits a connection when any rule of any policy selecting it admits
it (union); a connection needs both the source's egress and the destination's ingress. Peers
here are pod selectors of the same namespace; ``namespaceSelector`` peers match this
namespace only when their selector matches the labels given; ``ipBlock`` peers never match
pods (the analyser's reading, docs/k8s-cluster.md divergence 1). Ports: number or
container-port name, optional ``endPort``, protocol defaulting to TCP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Pod:
    """A pod as the model sees it: labels and declared ``(protocol, port, name)`` ports."""

    name: str
    labels: Mapping[str, str] = field(hash=False, compare=False)
    ports: tuple[tuple[str, int, str], ...] = ()


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """Label-selector semantics (matchLabels AND matchExpressions; ``{}`` matches all).

    Unknown operators match nothing.
    """
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def policy_types(spec: Obj) -> list[str]:
    """Effective ``policyTypes`` (the API server's defaulting rule)."""
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _peer_matches(peer: Obj, pod: Pod, namespace_labels: Mapping[str, str]) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer and not selector_matches(
        peer["namespaceSelector"], namespace_labels
    ):
        return False
    if "podSelector" in peer:
        return selector_matches(peer["podSelector"], pod.labels)
    return "namespaceSelector" in peer


def _port_matches(rule_ports: list[Obj] | None, dst: Pod, protocol: str, port: int) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        want = entry.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            if any(p == protocol and n == want and num == port for p, num, n in dst.ports):
                return True
            continue
        high = entry.get("endPort") or want
        if int(want) <= port <= int(high):
            return True
    return False


def _rules_admit(
    rules: list[Obj] | None,
    key: str,
    peer_pod: Pod,
    dst: Pod,
    protocol: str,
    port: int,
    namespace_labels: Mapping[str, str],
) -> bool:
    for rule in rules or []:
        peers = rule.get(key)
        if peers and not any(_peer_matches(p, peer_pod, namespace_labels) for p in peers):
            continue
        if _port_matches(rule.get("ports"), dst, protocol, port):
            return True
    return False


def allowed(
    policies: Iterable[Obj],
    src: Pod,
    dst: Pod,
    protocol: str,
    port: int,
    namespace_labels: Mapping[str, str] | None = None,
) -> bool:
    """True when ``src`` may open ``protocol/port`` on ``dst`` under ``policies`` (one
    namespace; API-shaped policy dicts with ``spec``)."""
    ns_labels = namespace_labels or {}
    specs = [p.get("spec") or {} for p in policies]
    egress_isolated = False
    egress_ok = False
    ingress_isolated = False
    ingress_ok = False
    for spec in specs:
        types = policy_types(spec)
        if "Egress" in types and selector_matches(spec.get("podSelector", {}), src.labels):
            egress_isolated = True
            if _rules_admit(spec.get("egress"), "to", dst, dst, protocol, port, ns_labels):
                egress_ok = True
        if "Ingress" in types and selector_matches(spec.get("podSelector", {}), dst.labels):
            ingress_isolated = True
            if _rules_admit(spec.get("ingress"), "from", src, dst, protocol, port, ns_labels):
                ingress_ok = True
    return (not egress_isolated or egress_ok) and (not ingress_isolated or ingress_ok)


def ingress_admits(
    policies: Iterable[Obj], src: Pod, dst: Pod, protocol: str, port: int
) -> bool:
    """True when the destination side alone admits the connection (egress ignored)."""
    ingress_only = []
    for policy in policies:
        spec = policy.get("spec") or {}
        if "Ingress" in policy_types(spec):
            ingress_only.append({"spec": {**spec, "policyTypes": ["Ingress"]}})
    return allowed(ingress_only, src, dst, protocol, port)
