"""The cases of Kubernetes' NetworkPolicy e2e suite as a table: policies plus expected
reachability (our own encoding; no code of the suite).

Source of the cases: kubernetes/kubernetes, test/e2e/network/netpol/network_policy.go
("Netpol NetworkPolicy between server and client", its UDP and SCTP contexts). Each case
keeps the suite's title, its policies (names, selectors, ports, protocols, policy types) and
its steps (create, update, delete, relabel); the expectation is stated for the suite's world of
three namespaces ``x``, ``y``, ``z`` with pods ``a``, ``b``, ``c`` each, every pod serving
ports 80 and 81 over TCP, UDP and SCTP with the suite's port names (``serve-80-tcp``, ...),
namespaces labelled ``ns=<name>`` (plus ``kubernetes.io/metadata.name``), pods ``pod=<name>``.

Expectations are rules applied in order to an all-allowed matrix, as the suite's
``Reachability`` does: ``(allowed, source pattern, destination pattern)`` with patterns ``*``
(every pod), ``x/*`` (every pod of namespace x) or ``x/a``. The suite checks one protocol and
port per validation; here every case states every port (``*`` is "every port not listed"), so
the ports the suite leaves unchecked are checked too, by our reading of the same policies.
Loopback (a pod to itself) is left out, as in the suite (``ignoreLoopback``).

ipBlock cases put pod IPs into ipBlocks exactly as the suite does (the pod's ``/32``; the
``/4`` around it, ``makeLargeCIDRForIP``) and expect those pods to be matched. Cases marked
``ours`` are not in the suite: the ingress mirror images of its egress ipBlock cases, both
policies of the "overlapping except" case kept side by side, and an ipBlock with a named port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Rule = tuple[bool, str, str]

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")
PORTS = (80, 81)
PROTOCOLS = ("TCP", "UDP", "SCTP")
PORT_KEYS = tuple(f"{proto}/{port}" for proto in PROTOCOLS for port in PORTS)
METADATA_NAME = "kubernetes.io/metadata.name"


def pod_keys() -> list[str]:
    """``x/a`` ... ``z/c``."""
    return [f"{ns}/{pod}" for ns in NAMESPACES for pod in PODS]


def container_ports() -> list[Obj]:
    """The ports every pod declares: 80 and 81 over each protocol, named as in the suite."""
    return [{"containerPort": port, "protocol": proto, "name": f"serve-{port}-{proto.lower()}"}
            for proto in PROTOCOLS for port in PORTS]


@dataclass(frozen=True)
class World:
    """Names and addresses of one instance of the suite's world.

    Attributes:
        prefix: prepended to namespace names (the cluster test uses its own namespaces).
        ips: pod key (``x/a``) -> pod IP.
    """

    prefix: str
    ips: Mapping[str, str]

    def ns(self, short: str) -> str:
        """The real name of namespace ``short``."""
        return self.prefix + short

    def host(self, pod: str) -> str:
        """``<ip>/32`` of ``pod`` (``x/b``)."""
        return f"{self.ips[pod]}/32"

    def block4(self, pod: str) -> str:
        """The ``/4`` around ``pod``'s IP (the suite's ``makeLargeCIDRForIP``)."""
        return str(ipaddress.ip_network(f"{self.ips[pod]}/4", strict=False))


@dataclass
class Step:
    """One step of a case: writes, then the expected reachability.

    Attributes:
        policies: NetworkPolicies created, or replaced when one of that name exists (their
            ``metadata.namespace`` is a short name).
        delete: ``(namespace, name)`` of policies to delete.
        ns_labels / pod_labels: labels added to a namespace (``y``) or a pod (``x/b``).
        expect: port key (``TCP/80``) or ``*`` -> rules (see the module docstring).
    """

    expect: dict[str, list[Rule]]
    policies: list[Obj] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)
    ns_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_labels: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Case:
    """One e2e case (``source`` "e2e") or one of ours (``source`` "ours")."""

    title: str
    steps: list[Step]
    source: str = "e2e"

    @property
    def uses_ip_blocks(self) -> bool:
        """True when a policy of the case has an ipBlock peer."""
        return any("ipBlock" in repr(p) for s in self.steps for p in s.policies)


def _matches(pattern: str, pod: str) -> bool:
    if pattern == "*":
        return True
    ns, _, name = pattern.partition("/")
    return pod.split("/")[0] == ns and name in ("*", pod.split("/")[1])


def expected(step: Step, port_keys: tuple[str, ...] = PORT_KEYS
             ) -> dict[tuple[str, str, str], bool]:
    """``{(src, dst, port key): allowed}`` for every ordered pair of distinct pods."""
    out = {}
    for port in port_keys:
        rules = step.expect.get(port, step.expect.get("*", []))
        for src in pod_keys():
            for dst in pod_keys():
                if src == dst:
                    continue
                allowed = True
                for value, src_pattern, dst_pattern in rules:
                    if _matches(src_pattern, src) and _matches(dst_pattern, dst):
                        allowed = value
                out[(src, dst, port)] = allowed
    return out


# ------------------------------------------------------------------------------ builders

def _policy(w: World, ns: str, name: str, pods: Obj, *, ingress: list[Obj] | None = None,
            egress: list[Obj] | None = None) -> Obj:
    """A policy in namespace ``ns`` selecting ``pods`` (matchLabels); policyTypes lists each
    direction given (an empty list: the direction isolates and admits nothing)."""
    spec: Obj = {"podSelector": {"matchLabels": pods} if pods else {}, "policyTypes": []}
    if ingress is not None:
        spec["ingress"] = ingress
        spec["policyTypes"].append("Ingress")
    if egress is not None:
        spec["egress"] = egress
        spec["policyTypes"].append("Egress")
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": w.ns(ns)}, "spec": spec}


def _ns_is(w: World, short: str) -> Obj:
    return {"namespaceSelector": {"matchLabels": {METADATA_NAME: w.ns(short)}}}


def _ns_not_in(w: World, short: str) -> Obj:
    return {"matchExpressions": [{"key": METADATA_NAME, "operator": "NotIn",
                                  "values": [w.ns(short)]}]}


def _pod(name: str) -> Obj:
    return {"podSelector": {"matchLabels": {"pod": name}}}


def _port(port: int | str, protocol: str | None = None) -> Obj:
    entry: Obj = {"port": port}
    if protocol:
        entry["protocol"] = protocol
    return entry


DENY_TO_XA: Rule = (False, "*", "x/a")


def cases(w: World) -> list[Case]:
    """Every case, for the world ``w`` (pod IPs go into the ipBlock cases)."""
    a = {"pod": "a"}
    table = [
        Case("should support a 'default-deny-ingress' policy", [Step(
            {"*": [(False, "*", "x/*")]},
            policies=[_policy(w, "x", "deny-ingress", {}, ingress=[])])]),
        Case("should support a 'default-deny-all' policy", [Step(
            {"*": [(False, "*", "x/*"), (False, "x/*", "*")]},
            policies=[_policy(w, "x", "deny-all", {}, ingress=[], egress=[])])]),
        Case("should enforce policy to allow traffic from pods within server namespace based "
             "on PodSelector", [Step(
                 {"*": [DENY_TO_XA, (True, "x/b", "x/a")]},
                 policies=[_policy(w, "x", "x-a-allows-x-b", a,
                                   ingress=[{"from": [_pod("b")]}])])]),
        Case("should enforce policy to allow ingress traffic for a target", [Step(
            {"*": [(False, "*", "x/*"), (True, "*", "x/a")]},
            policies=[_policy(w, "x", "deny-all", {}, ingress=[]),
                      _policy(w, "x", "allow-all-to-a", a, ingress=[{"from": [
                          {"podSelector": {}, "namespaceSelector": {}}]}])])]),
        Case("should enforce policy to allow ingress traffic from pods in all namespaces", [Step(
            {"*": []},
            policies=[_policy(w, "x", "allow-from-another-ns", a,
                              ingress=[{"from": [{"namespaceSelector": {}}]}])])]),
        Case("should enforce policy to allow traffic only from a different namespace, based on "
             "NamespaceSelector", [Step(
                 {"*": [(False, "x/*", "x/a"), (False, "z/*", "x/a")]},
                 policies=[_policy(w, "x", "allow-client-a-via-ns-selector", a, ingress=[
                     {"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}])])]),
        Case("should enforce policy based on PodSelector with MatchExpressions", [Step(
            {"*": [DENY_TO_XA, (True, "x/b", "x/a")]},
            policies=[_policy(w, "x", "x-a-allows-x-b", a, ingress=[{"from": [{"podSelector": {
                "matchExpressions": [{"key": "pod", "operator": "In", "values": ["b"]}]}}]}])])]),
        Case("should enforce policy based on NamespaceSelector with MatchExpressions", [Step(
            {"*": [(False, "x/*", "x/a"), (False, "z/*", "x/a")]},
            policies=[_policy(w, "x", "allow-ns-y-match-selector", a, ingress=[{"from": [
                {"namespaceSelector": {"matchExpressions": [
                    {"key": METADATA_NAME, "operator": "In", "values": [w.ns("y")]}]}}]}])])]),
        Case("should enforce policy based on PodSelector or NamespaceSelector", [Step(
            {"*": [(False, "x/*", "x/a"), (True, "x/b", "x/a")]},
            policies=[_policy(w, "x", "allow-ns-y-match-selector", a, ingress=[{"from": [
                {"namespaceSelector": _ns_not_in(w, "x")}, _pod("b")]}])])]),
        Case("should enforce policy based on PodSelector and NamespaceSelector", [Step(
            {"*": [DENY_TO_XA, (True, "y/b", "x/a"), (True, "z/b", "x/a")]},
            policies=[_policy(w, "x", "allow-ns-y-podselector-and-nsselector", a, ingress=[
                {"from": [{"namespaceSelector": _ns_not_in(w, "x"),
                           "podSelector": {"matchLabels": {"pod": "b"}}}]}])])]),
        Case("should enforce policy based on Multiple PodSelectors and NamespaceSelectors", [Step(
            {"*": [DENY_TO_XA] + [(True, f"{ns}/{p}", "x/a") for ns in "yz" for p in "bc"]},
            policies=[_policy(w, "x", "allow-ns-y-z-pod-b-c", a, ingress=[{"from": [{
                "namespaceSelector": _ns_not_in(w, "x"),
                "podSelector": {"matchExpressions": [
                    {"key": "pod", "operator": "In", "values": ["b", "c"]}]}}]}])])]),
        Case("should enforce policy based on any PodSelectors", [Step(
            {"*": [DENY_TO_XA, (True, "x/b", "x/a"), (True, "x/c", "x/a")]},
            policies=[_policy(w, "x", "allow-ns-x-pod-b-c", a,
                              ingress=[{"from": [_pod("b"), _pod("c")]}])])]),
        Case("should enforce policy to allow traffic only from a pod in a different namespace "
             "based on PodSelector and NamespaceSelector", [Step(
                 {"*": [DENY_TO_XA, (True, "y/a", "x/a")]},
                 policies=[_policy(w, "x", "allow-ns-y-pod-a-via-namespace-pod-selector", a,
                                   ingress=[{"from": [{**_ns_is(w, "y"), **_pod("a")}]}])])]),
        Case("should enforce policy based on Ports", [Step(
            {"TCP/81": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
            policies=[_policy(w, "x", "allow-client-a-via-ns-selector", a, ingress=[
                {"from": [_ns_is(w, "y")], "ports": [_port(81, "TCP")]}])])]),
        Case("should enforce multiple, stacked policies with overlapping podSelectors", [
            Step({"TCP/81": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-client-a-via-ns-selector", a, ingress=[
                     {"from": [_ns_is(w, "y")], "ports": [_port(81, "TCP")]}])]),
            Step({"TCP/80": [DENY_TO_XA, (True, "y/*", "x/a")],
                  "TCP/81": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-client-a-via-ns-selector-80", a, ingress=[
                     {"from": [_ns_is(w, "y")], "ports": [_port(80, "TCP")]}])]),
        ]),
        Case("should support allow-all policy", [Step(
            {"*": []}, policies=[_policy(w, "x", "allow-all", {}, ingress=[{}])])]),
        Case("should allow ingress access on one named port", [Step(
            {"TCP/81": [], "*": [(False, "*", "x/*")]},
            policies=[_policy(w, "x", "allow-all", {},
                              ingress=[{"ports": [_port("serve-81-tcp")]}])])]),
        Case("should allow ingress access from namespace on one named port", [Step(
            {"TCP/80": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
            policies=[_policy(w, "x", "allow-client-a-via-ns-selector-80", a, ingress=[
                {"from": [_ns_is(w, "y")], "ports": [_port("serve-80-tcp", "TCP")]}])])]),
        Case("should allow egress access on one named port", [Step(
            {"TCP/80": [], "*": [(False, "x/*", "*")]},
            policies=[_policy(w, "x", "allow-egress", {},
                              egress=[{"ports": [_port("serve-80-tcp")]}])])]),
        Case("should enforce updated policy", [
            Step({"*": []}, policies=[_policy(w, "x", "allow-all-mutate-to-deny-all", {},
                                              ingress=[{}])]),
            Step({"*": [(False, "*", "x/*")]},
                 policies=[_policy(w, "x", "allow-all-mutate-to-deny-all", {}, ingress=[])]),
        ]),
        Case("should allow ingress access from updated namespace", [
            Step({"*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-client-a-via-ns-selector", a, ingress=[
                     {"from": [{"namespaceSelector": {"matchLabels": {"ns2": "updated"}}}]}])]),
            Step({"*": [DENY_TO_XA, (True, "y/*", "*")]}, ns_labels={"y": {"ns2": "updated"}}),
        ]),
        Case("should allow ingress access from updated pod", [
            Step({"*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-client-a-via-pod-selector", a, ingress=[
                     {"from": [{"podSelector": {"matchLabels": {"pod": "b",
                                                                "pod2": "updated"}}}]}])]),
            Step({"*": [DENY_TO_XA, (True, "x/b", "x/a")]},
                 pod_labels={"x/b": {"pod": "b", "pod2": "updated"}}),
        ]),
        Case("should deny ingress from pods on other namespaces", [Step(
            {"*": [(False, "y/*", "x/*"), (False, "z/*", "x/*")]},
            policies=[_policy(w, "x", "deny-empty-policy", {},
                              ingress=[{"from": [{"podSelector": {}}]}])])]),
        Case("should deny ingress access to updated pod", [
            Step({"*": []}, policies=[_policy(w, "x", "deny-ingress-via-label-selector",
                                              {"target": "isolated"}, ingress=[])]),
            Step({"*": [DENY_TO_XA]}, pod_labels={"x/a": {"target": "isolated"}}),
        ]),
        Case("should deny egress from pods based on PodSelector", [Step(
            {"*": [(False, "x/a", "*")]},
            policies=[_policy(w, "x", "deny-egress-pod-a", a, egress=[])])]),
        Case("should deny egress from all pods in a namespace", [Step(
            {"*": [(False, "x/*", "*")]},
            policies=[_policy(w, "x", "deny-egress-ns-x", {}, egress=[])])]),
        Case("should work with Ingress, Egress specified together", [Step(
            {"TCP/80": [DENY_TO_XA, (True, "x/b", "x/a")],
             "*": [DENY_TO_XA, (False, "x/a", "*"), (True, "x/b", "x/a")]},
            policies=[_policy(w, "x", "allow-client-a-via-pod-selector", a,
                              ingress=[{"from": [_pod("b")]}],
                              egress=[{"ports": [_port(80)]}])])]),
        Case("should support denying of egress traffic on the client side (even if the server "
             "explicitly allows this traffic)", [Step(
                 {"*": [(False, "x/a", "*"), (False, "*", "y/a"), (True, "x/a", "y/a"),
                        (False, "*", "y/b")]},
                 policies=[
                     _policy(w, "x", "allow-to-ns-y-pod-a", a,
                             egress=[{"to": [{**_ns_is(w, "y"), **_pod("a")}]}]),
                     _policy(w, "y", "allow-from-xa-on-ya-match-selector", a,
                             ingress=[{"from": [{**_ns_is(w, "x"), **_pod("a")}]}]),
                     _policy(w, "y", "allow-from-xa-on-yb-match-selector", {"pod": "b"},
                             ingress=[{"from": [{**_ns_is(w, "x"), **_pod("a")}]}]),
                 ])]),
        Case("should enforce egress policy allowing traffic to a server in a different "
             "namespace based on PodSelector and NamespaceSelector", [Step(
                 {"*": [(False, "x/a", "*"), (True, "x/a", "y/a")]},
                 policies=[_policy(w, "x", "allow-to-ns-y-pod-a", a,
                                   egress=[{"to": [{**_ns_is(w, "y"), **_pod("a")}]}])])]),
        Case("should enforce ingress policy allowing any port traffic to a server on a specific "
             "protocol", [Step(
                 {"TCP/80": [], "TCP/81": [], "*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-ingress-by-proto", a,
                                   ingress=[{"ports": [{"protocol": "TCP"}]}])])]),
        Case("should enforce multiple ingress policies with ingress allow-all policy taking "
             "precedence", [
                 Step({"TCP/80": [], "*": [(False, "*", "x/*")]},
                      policies=[_policy(w, "x", "allow-ingress-port-80", {},
                                        ingress=[{"ports": [_port(80)]}])]),
                 Step({"*": []}, policies=[_policy(w, "x", "allow-ingress", {}, ingress=[{}])]),
             ]),
        Case("should enforce multiple egress policies with egress allow-all policy taking "
             "precedence", [
                 Step({"TCP/80": [], "*": [(False, "x/*", "*")]},
                      policies=[_policy(w, "x", "allow-egress-port-80", {},
                                        egress=[{"ports": [_port(80)]}])]),
                 Step({"*": []}, policies=[_policy(w, "x", "allow-egress", {}, egress=[{}])]),
             ]),
        Case("should stop enforcing policies after they are deleted", [
            Step({"*": [(False, "x/*", "*"), (False, "*", "x/*")]},
                 policies=[_policy(w, "x", "deny-all", {}, ingress=[], egress=[])]),
            Step({"*": []}, delete=[("x", "deny-all")]),
        ]),
        Case("should allow egress access to server in CIDR block", [Step(
            {"*": [(False, "x/a", "*"), (True, "x/a", "y/b")]},
            policies=[_policy(w, "x", "allow-client-a-via-cidr-egress-rule", a,
                              egress=[{"to": [{"ipBlock": {"cidr": w.host("y/b")}}]}])])]),
        Case("should enforce except clause while egress access to server in CIDR block", [Step(
            {"*": [(False, "x/a", "x/b")]},
            policies=[_policy(w, "x", "allow-client-a-via-cidr-egress-rule", a, egress=[
                {"to": [{"ipBlock": {"cidr": w.block4("x/b"),
                                     "except": [w.host("x/b")]}}]}])])]),
        Case("should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", [
            Step({"*": [(False, "x/a", "x/b")]},
                 policies=[_policy(w, "x", "allow-client-a-via-cidr-egress-rule", a, egress=[
                     {"to": [{"ipBlock": {"cidr": w.block4("x/b"),
                                          "except": [w.host("x/b")]}}]}])]),
            Step({"*": [(False, "x/a", "*"), (True, "x/a", "x/b")]},
                 policies=[_policy(w, "x", "allow-client-a-via-cidr-egress-rule", a, egress=[
                     {"to": [{"ipBlock": {"cidr": w.host("x/b")}}]}])]),
        ]),
        Case("should enforce policies to check ingress and egress policies can be controlled "
             "independently based on PodSelector", [
                 Step({"*": []}, policies=[_policy(w, "x", "allow-egress-for-target", a,
                                                   egress=[{}])]),
                 Step({"*": [DENY_TO_XA]},
                      policies=[_policy(w, "x", "deny-ingress-via-label-selector", a,
                                        ingress=[])]),
             ]),
        Case("should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the "
             "plugin doesn't support SCTP", [Step(
                 {"SCTP/81": [(False, "*", "x/*"), (True, "*", "x/a")],
                  "*": [(False, "*", "x/*")]},
                 policies=[_policy(w, "x", "deny-ingress", {}, ingress=[]),
                           _policy(w, "x", "allow-only-sctp-ingress-on-port-81", a,
                                   ingress=[{"ports": [_port(81, "SCTP")]}])])]),
        Case("should properly isolate pods that are selected by a policy allowing SCTP, even if "
             "the plugin doesn't support SCTP", [Step(
                 {"SCTP/80": [], "*": [DENY_TO_XA]},
                 policies=[_policy(w, "x", "allow-only-sctp-ingress-on-port-80", a,
                                   ingress=[{"ports": [_port(80, "SCTP")]}])])]),
        Case("should not allow access by TCP when a policy specifies only UDP", [Step(
            {"UDP/81": [], "*": [DENY_TO_XA]},
            policies=[_policy(w, "x", "allow-only-udp-ingress-on-port-81", a,
                              ingress=[{"ports": [_port(81, "UDP")]}])])]),
        Case("should enforce policy to allow traffic based on NamespaceSelector with "
             "MatchLabels using default ns label", [Step(
                 {"*": [(False, "x/*", "x/a"), (False, "z/*", "x/a")]},
                 policies=[_policy(w, "x", "allow-client-a-via-ns-selector-for-immutable-ns-"
                                   "label", a, ingress=[{"from": [_ns_is(w, "y")]}])])]),
        Case("should enforce policy based on NamespaceSelector with MatchExpressions using "
             "default ns label", [Step(
                 {"*": [(False, "x/a", "y/*")]},
                 policies=[_policy(w, "x", "allow-ns-y-match-selector-for-immutable-ns-label",
                                   a, egress=[{"to": [{"namespaceSelector":
                                                       _ns_not_in(w, "y")}]}])])]),
        Case("UDP: should enforce policy based on Ports", [Step(
            {"UDP/81": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
            policies=[_policy(w, "x", "allow-ingress-on-port-81-ns-x", a, ingress=[
                {"from": [_ns_is(w, "y")], "ports": [_port(81, "UDP")]}])])]),
        Case("SCTP: should enforce policy based on Ports", [Step(
            {"SCTP/81": [DENY_TO_XA, (True, "y/*", "x/a")], "*": [DENY_TO_XA]},
            policies=[_policy(w, "x", "allow-ingress-on-port-81-ns-x", a, ingress=[
                {"from": [_ns_is(w, "y")], "ports": [_port(81, "SCTP")]}])])]),
        # ours: the ingress mirror images of the suite's egress ipBlock cases, both policies
        # of the overlap case side by side, and a named port towards an ipBlock
        Case("ingress from a pod in a CIDR block", [Step(
            {"*": [DENY_TO_XA, (True, "y/b", "x/a")]},
            policies=[_policy(w, "x", "allow-y-b-via-cidr", a,
                              ingress=[{"from": [{"ipBlock": {"cidr": w.host("y/b")}}]}])])],
             source="ours"),
        Case("ingress except clause in a CIDR block", [Step(
            {"*": [(False, "y/b", "x/a")]},
            policies=[_policy(w, "x", "allow-cidr-but-y-b", a, ingress=[
                {"from": [{"ipBlock": {"cidr": w.block4("y/b"),
                                       "except": [w.host("y/b")]}}]}])])], source="ours"),
        Case("an IP in one block's except and in another policy's block is allowed", [Step(
            {"*": []},
            policies=[
                _policy(w, "x", "allow-cidr-but-x-b", a, egress=[
                    {"to": [{"ipBlock": {"cidr": w.block4("x/b"),
                                         "except": [w.host("x/b")]}}]}]),
                _policy(w, "x", "allow-x-b", a,
                        egress=[{"to": [{"ipBlock": {"cidr": w.host("x/b")}}]}]),
            ])], source="ours"),
        Case("egress to a CIDR block on a named port", [Step(
            {"TCP/81": [], "*": [(False, "x/a", "*")]},
            policies=[_policy(w, "x", "allow-cidr-named-port", a, egress=[
                {"to": [{"ipBlock": {"cidr": w.block4("y/b")}}],
                 "ports": [_port("serve-81-tcp")]}])])], source="ours"),
    ]
    return table
