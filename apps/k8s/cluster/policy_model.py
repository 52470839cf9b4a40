"""Kubernetes NetworkPolicy semantics as a pure-Python model (no I/O).

The project's one NetworkPolicy model. The enforcer (:mod:`apps.k8s.cluster.enforcer`) compiles
it into iptables rules (:mod:`apps.k8s.cluster.compiler`), the judge's cross-check
(:mod:`apps.k8s.crosscheck`) computes the expected connectivity matrix with it, query generation
(:mod:`apps.k8s.queries`) checks with it that every injected fault shows, and the heuristic
reference agent (:mod:`apps.k8s.reference`) reads policies with it. The semantics follow the
Kubernetes documentation ("Network Policies", concepts/services-networking/network-policies,
and the ``networking.k8s.io/v1`` API reference):

* A pod is *isolated for ingress* (egress) when at least one policy in its namespace selects it
  (``spec.podSelector``) and has ``Ingress`` (``Egress``) in its effective ``policyTypes``
  (default: ``Ingress``, plus ``Egress`` when ``spec.egress`` is a non-empty list; see
  :func:`policy_types`).
* A connection is allowed when the source's egress side allows it *and* the destination's
  ingress side allows it; each side is decided by the union of the rules of the policies that
  isolate that pod in that direction, independently of the other direction.
* A rule with no (or an empty) ``from``/``to`` list admits every peer; with no (or an empty)
  ``ports`` list every port. A peer with only ``podSelector`` selects pods of the policy's
  namespace; with only ``namespaceSelector`` every pod of the matching namespaces; with both,
  the matching pods of the matching namespaces.
* A port entry: ``protocol`` (default TCP), ``port`` number or name, optional ``endPort``; no
  ``port`` means every port of that protocol. A *named* port is resolved against the
  destination pod's own container ports (name and protocol must both match), in ingress and
  egress rules alike.
* ``ipBlock`` peers match addresses, pod IPs included: a pod whose IP lies in ``cidr`` and in
  none of the ``except`` blocks is selected like any other address. The API documentation
  leaves "ipBlock vs pod IP" to the implementation; this is the reading of Kubernetes'
  NetworkPolicy e2e suite (test/e2e/network/netpol: "should allow egress access to server in
  CIDR block", "should enforce except clause while egress access to server in CIDR block",
  "should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", which put
  a pod's own IP in an ipBlock) and of Calico, Antrea, kube-router and kube-network-policies.
  network-config-analyzer (nca) reads it differently (ipBlocks never match pods); see
  :mod:`apps.k8s.cluster.nca_oracle` for how its answers are compared.
* What the embedded cluster cannot enforce (:func:`unsupported`: it is IPv4-only, so an IPv6
  ``cidr`` or ``except``, or a string that is not a plain dotted-quad CIDR) makes the *whole
  policy* refused: the enforcer installs none of its rules but keeps the pods it selects
  isolated in its directions (a refusal never opens traffic) and reports the namespace as not
  in sync (:mod:`apps.k8s.cluster.health`). This model computes the same fail-closed reading,
  so model and dataplane agree even then; the judge never scores a namespace that is not in
  sync.
* Traffic from a pod to itself is always allowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Pod:
    """A pod as the model sees it.

    Attributes:
        namespace / name: identity; ip: pod IP (IPv4 dotted quad);
        labels: pod labels; ports: declared ``(protocol, port, name)`` container ports.
    """

    namespace: str
    name: str
    ip: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    ports: tuple[tuple[str, int, str], ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def pod_from_api(pod: Obj) -> Pod | None:
    """Model pod from an API Pod dict; None if it has no IP, uses the host network or is going."""
    status, meta, spec = pod.get("status") or {}, pod["metadata"], pod.get("spec") or {}
    if not status.get("podIP") or spec.get("hostNetwork") or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    ports = tuple(
        (p.get("protocol") or "TCP", int(p["containerPort"]), p.get("name") or "")
        for c in spec.get("containers") or []
        for p in c.get("ports") or []
    )
    return Pod(meta["namespace"], meta["name"], status["podIP"], dict(meta.get("labels") or {}),
               ports)


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` semantics: matchLabels AND every matchExpression.

    An empty selector matches everything. Operators In, NotIn, Exists, DoesNotExist (NotIn and
    DoesNotExist also match when the key is absent). Unknown operators match nothing.
    """
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In":
            ok = present and labels[key] in values
        elif op == "NotIn":
            ok = not present or labels[key] not in values
        elif op == "Exists":
            ok = present
        elif op == "DoesNotExist":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True


def policy_types(policy: Obj) -> set[str]:
    """Effective ``policyTypes`` of a NetworkPolicy, as the API server defaults them.

    Args:
        policy: a NetworkPolicy as a dict (``spec`` may be missing).

    Returns:
        The declared ``spec.policyTypes`` when it is a non-empty list; otherwise ``{"Ingress"}``,
        plus ``"Egress"`` only when ``spec.egress`` holds at least one rule. A missing, null or
        empty (``egress: []``) egress list leaves the policy Ingress-only, so it does not
        isolate egress.

    Source: Kubernetes ``pkg/apis/networking/v1/defaults.go``, ``SetDefaults_NetworkPolicy``
    (``if len(Spec.PolicyTypes) == 0``: Ingress, then Egress ``if len(Spec.Egress) != 0``),
    and the ``NetworkPolicySpec.policyTypes`` API reference ("policies that contain an egress
    section are assumed to affect egress ... a policy that specifies that no egress is allowed
    ... must specify a policyTypes value that include Egress").
    """
    spec = policy.get("spec") or {}
    declared = spec.get("policyTypes")
    if declared:
        return set(declared)
    types = {"Ingress"}
    if spec.get("egress"):
        types.add("Egress")
    return types


@dataclass(frozen=True)
class PortMatch:
    """A port entry resolved for one destination pod or for non-pod addresses.

    ``low``/``high`` inclusive port range; ``low == 0`` means every port of ``protocol``.
    """

    protocol: str
    low: int = 0
    high: int = 0

    def matches(self, protocol: str, port: int) -> bool:
        """True if ``protocol``/``port`` falls in this entry."""
        if protocol != self.protocol:
            return False
        return self.low == 0 or self.low <= port <= self.high


def resolve_ports(ports: Sequence[Obj] | None, dst: Pod | None) -> list[PortMatch] | None:
    """Port entries of a rule resolved against destination ``dst`` (None: a non-pod address).

    Returns None when the rule admits every port; otherwise the (possibly empty) list of
    matches. A named port resolves to the destination's container port(s) of that name and
    protocol; for a non-pod destination, or a pod without such a port, it matches nothing.
    """
    if not ports:
        return None
    result: list[PortMatch] = []
    for entry in ports:
        protocol = entry.get("protocol") or "TCP"
        port = entry.get("port")
        if port is None:
            result.append(PortMatch(protocol))
        elif isinstance(port, int):
            result.append(PortMatch(protocol, port, int(entry.get("endPort") or port)))
        elif dst is not None:
            for proto, number, name in dst.ports:
                if name == port and proto == protocol:
                    result.append(PortMatch(protocol, number, number))
        # a named port towards a non-pod address resolves to nothing
    return result


_IPV4_CIDR = re.compile(r"(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2})){3}/(0|[1-9][0-9]?)")
SUPPORTED_PROTOCOLS = ("TCP", "UDP", "SCTP")


def parse_ipv4_cidr(text: object) -> ipaddress.IPv4Network | None:
    """The network of a dotted-quad CIDR ``a.b.c.d/n`` (host bits allowed and masked off).

    None for anything else: IPv6 (also IPv4-mapped IPv6 such as ``::ffff:10.0.0.0/104``),
    leading zeros (``010.0.0.0/8``, which Go's lenient parser in the API server accepts and
    reads as decimal, while C's ``inet_aton`` reads octal), a missing prefix, octets above 255 or a
    prefix above 32. The same strings the admission rule's CEL ``isCIDR(x) &&
    cidr(x).ip().family() == 4`` accepts (:mod:`apps.k8s.cluster.admission`).
    """
    if not isinstance(text, str) or not _IPV4_CIDR.fullmatch(text):
        return None
    address, _, prefix = text.partition("/")
    if int(prefix) > 32 or any(int(octet) > 255 for octet in address.split(".")):
        return None
    return ipaddress.IPv4Network(text, strict=False)


def _peers(policy: Obj) -> list[Obj]:
    spec = policy.get("spec") or {}
    return [peer for direction, key in (("ingress", "from"), ("egress", "to"))
            for rule in spec.get(direction) or [] for peer in rule.get(key) or []]


def unsupported(policy: Obj) -> list[str]:
    """Why the embedded cluster's enforcer cannot install ``policy`` (empty: it can).

    The enforcer is IPv4-only and writes every address into iptables itself, so each ipBlock
    ``cidr`` and ``except`` must be what :func:`parse_ipv4_cidr` accepts; ports must use a
    protocol of :data:`SUPPORTED_PROTOCOLS` and numbers (and ``endPort``) within 1-65535. The
    API server's own validation already refuses most of the rest; what it accepts and this
    refuses is IPv6, IPv4-mapped IPv6 and leading zeros. Episode namespaces refuse the same at
    admission (:mod:`apps.k8s.cluster.admission`), so only policies written elsewhere reach
    the enforcer's refusal.
    """
    reasons: list[str] = []
    for peer in _peers(policy):
        block = peer.get("ipBlock")
        if not block:
            continue
        for text in [block.get("cidr"), *(block.get("except") or [])]:
            if parse_ipv4_cidr(text) is None:
                reasons.append(f"ipBlock {text!r} is not an IPv4 CIDR (this cluster is IPv4-only)")
    spec = policy.get("spec") or {}
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            for entry in rule.get("ports") or []:
                protocol = entry.get("protocol") or "TCP"
                port, end = entry.get("port"), entry.get("endPort")
                if protocol not in SUPPORTED_PROTOCOLS:
                    reasons.append(f"protocol {protocol!r} is not one of TCP, UDP, SCTP")
                if isinstance(port, int) and not 1 <= port <= 65535:
                    reasons.append(f"port {port} is outside 1-65535")
                if end is not None and not (isinstance(port, int) and port <= end <= 65535):
                    reasons.append(f"endPort {end} needs a numeric port not above it")
    return reasons


def block_contains(block: Obj, ip: str) -> bool:
    """Is address ``ip`` in ipBlock ``block`` (in ``cidr`` and in no ``except``)?

    A block :func:`parse_ipv4_cidr` cannot read matches nothing (its policy is refused).
    """
    network = parse_ipv4_cidr(block.get("cidr"))
    excepts = [parse_ipv4_cidr(e) for e in block.get("except") or []]
    if network is None or any(e is None for e in excepts):
        return False
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:  # a pod without an address (e.g. the heuristic agent's view)
        return False
    return addr in network and not any(addr in e for e in excepts if e is not None)


class PolicyModel:
    """The NetworkPolicies, pods and namespaces of a cluster (or part of one).

    Args:
        pods: model pods (any namespaces).
        namespace_labels: ``{namespace: labels}`` for every namespace a selector may match
            (include ``kubernetes.io/metadata.name``, as the API server does).
        policies: NetworkPolicy dicts as returned by the API.
        pod_cidr: the pod network (kept for the enforcer, which tells pod and non-pod
            destinations apart with it; ipBlocks match pod IPs like any other address).

    Attributes:
        refused: ``{(namespace, name): reasons}`` of the policies :func:`unsupported` refuses;
            they isolate the pods they select but admit nothing.
    """

    def __init__(self, pods: Iterable[Pod], namespace_labels: Mapping[str, Mapping[str, str]],
                 policies: Iterable[Obj], pod_cidr: str = "10.244.0.0/16") -> None:
        self.pods = sorted(pods, key=lambda p: p.key)
        self.namespace_labels = {ns: dict(lbl) for ns, lbl in namespace_labels.items()}
        self.policies = list(policies)
        self.pod_net = ipaddress.ip_network(pod_cidr, strict=False)
        self._by_ns: dict[str, list[Obj]] = {}
        self.refused: dict[tuple[str, str], list[str]] = {}
        for pol in self.policies:
            meta = pol["metadata"]
            self._by_ns.setdefault(meta["namespace"], []).append(pol)
            reasons = unsupported(pol)
            if reasons:
                self.refused[(meta["namespace"], meta.get("name", ""))] = reasons

    def is_refused(self, policy: Obj) -> bool:
        """True when ``policy`` is one of :attr:`refused` (it admits nothing)."""
        meta = policy["metadata"]
        return (meta["namespace"], meta.get("name", "")) in self.refused

    # -------------------------------------------------------------- selection

    def isolating(self, pod: Pod, direction: str) -> list[Obj]:
        """Policies that select ``pod`` and have ``direction`` ("Ingress"/"Egress")."""
        return [
            pol for pol in self._by_ns.get(pod.namespace, [])
            if direction in policy_types(pol)
            and selector_matches((pol.get("spec") or {}).get("podSelector") or {}, pod.labels)
        ]

    def peer_matches_pod(self, peer: Obj, policy_ns: str, pod: Pod) -> bool:
        """Does a ``from``/``to`` peer of a policy in ``policy_ns`` select ``pod``?

        An ipBlock peer selects the pod when its IP is in the block (:func:`block_contains`).
        """
        if "ipBlock" in peer and peer["ipBlock"] is not None:
            return block_contains(peer["ipBlock"], pod.ip)
        ns_sel = peer.get("namespaceSelector")
        pod_sel = peer.get("podSelector")
        if ns_sel is None and pod_sel is None:
            return False
        if ns_sel is None:
            if pod.namespace != policy_ns:
                return False
        elif not selector_matches(ns_sel, self.namespace_labels.get(pod.namespace, {})):
            return False
        return pod_sel is None or selector_matches(pod_sel, pod.labels)

    def peer_matches_address(self, peer: Obj, ip: str) -> bool:
        """Does a peer select address ``ip`` as an address (only ipBlock peers can)?"""
        block = peer.get("ipBlock")
        return block_contains(block, ip) if block else False

    # -------------------------------------------------------------- decisions

    def side_allows(self, pod: Pod, direction: str, peer: Pod, dst: Pod,
                    protocol: str, port: int) -> bool:
        """One side on its own: does ``pod`` admit the connection in ``direction``?

        ``direction`` "Egress" (``pod`` is the source, ``peer`` the destination) or "Ingress"
        (``pod`` is the destination, ``peer`` the source); ``dst`` is the destination pod,
        against which named ports resolve. True when no policy isolates ``pod`` that way.
        """
        policies = self.isolating(pod, direction)
        if not policies:
            return True
        field_rules, field_peers = (
            ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        )
        for pol in policies:
            if self.is_refused(pol):
                continue  # isolates, admits nothing (fail-closed, as the enforcer)
            ns = pol["metadata"]["namespace"]
            for rule in (pol.get("spec") or {}).get(field_rules) or []:
                peers = rule.get(field_peers) or []
                if peers and not any(self.peer_matches_pod(p, ns, peer) for p in peers):
                    continue
                matches = resolve_ports(rule.get("ports"), dst)
                if matches is None or any(m.matches(protocol, port) for m in matches):
                    return True
        return False

    def allows(self, src: Pod, dst: Pod, protocol: str, port: int) -> bool:
        """Is a new ``protocol`` connection from ``src`` to ``dst``:``port`` allowed?"""
        if src.key == dst.key:
            return True
        return (self.side_allows(src, "Egress", dst, dst, protocol, port)
                and self.side_allows(dst, "Ingress", src, dst, protocol, port))

    def matrix(self, sources: Sequence[Pod] | None = None,
               destinations: Sequence[Pod] | None = None,
               include_self: bool = False,
               protocols: Sequence[str] = ("TCP", "UDP"),
               ) -> dict[str, dict[str, dict[str, bool]]]:
        """Expected matrix ``{src: {dst: {"PROTO/port": allowed}}}`` over the declared ports of
        every destination whose protocol is in ``protocols`` (default TCP and UDP: the shape of
        :func:`apps.k8s.cluster.prober.measure_matrix`, which cannot probe SCTP).
        """
        srcs = list(sources) if sources is not None else self.pods
        dsts = list(destinations) if destinations is not None else self.pods
        out: dict[str, dict[str, dict[str, bool]]] = {}
        for src in srcs:
            row: dict[str, dict[str, bool]] = {}
            for dst in dsts:
                if dst.key == src.key and not include_self:
                    continue
                cells = {f"{proto}/{port}": self.allows(src, dst, proto, port)
                         for proto, port, _name in sorted(set(dst.ports))
                         if proto in protocols}
                row[dst.key] = cells
            out[src.key] = row
        return out


def in_namespace(policies: Iterable[Obj], namespace: str) -> list[Obj]:
    """Copies of ``policies`` placed in ``namespace`` (``metadata.namespace`` set).

    For models of one namespace built from manifests that carry no namespace (query
    generation) or read from ``kubectl`` output (the heuristic agent).
    """
    return [{**pol, "metadata": {**(pol.get("metadata") or {}), "namespace": namespace}}
            for pol in policies]
