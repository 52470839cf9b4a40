"""Unit tests of the NetworkPolicy model, the compiler and the cross-check comparison (no cluster).

Semantics from the Kubernetes documentation (concepts/services-networking/network-policies).
"""

from __future__ import annotations

from typing import Any

from apps.k8s.cluster.crosscheck import compare
from apps.k8s.cluster.enforcer import EGRESS_MARK, INGRESS_MARK, compile_model
from apps.k8s.cluster.policy_model import Pod, PolicyModel, selector_matches

NS = {"a": {"kubernetes.io/metadata.name": "a"}, "b": {"kubernetes.io/metadata.name": "b"}}


def _pol(ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns}, "spec": spec}


def test_selector_operators() -> None:
    labels = {"app": "x"}
    assert selector_matches({}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                   "values": ["db"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
                            labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "In",
                                                       "values": ["y"]}]}, labels)
    assert not selector_matches({"matchLabels": {"app": "x", "tier": "web"}}, labels)


def test_ingress_rule_does_not_satisfy_egress() -> None:
    c0 = Pod("a", "c0", "10.244.0.2", {"app": "c"}, (("TCP", 80, ""),))
    c1 = Pod("a", "c1", "10.244.0.3", {"app": "c"}, (("TCP", 80, ""),))
    b0 = Pod("a", "b0", "10.244.0.4", {"app": "b"}, (("TCP", 80, ""),))
    model = PolicyModel([c0, c1, b0], NS, [_pol("a", {
        "podSelector": {"matchLabels": {"app": "c"}}, "ingress": [{}],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}]})])
    assert not model.allows(c0, c1, "TCP", 80)
    assert model.allows(c0, b0, "TCP", 80) and model.allows(b0, c1, "TCP", 80)
    text = compile_model(model, "10.244.0.0/16").iptables
    assert f"--set-xmark {EGRESS_MARK:#x}/{EGRESS_MARK:#x}" in text
    assert f"--set-xmark {INGRESS_MARK:#x}/{INGRESS_MARK:#x}" in text
    assert "-s 10.244.0.2/32 -m mark ! --mark 0x10000/0x10000 -j REJECT" in text


def test_named_ports_resolve_per_destination_in_egress_without_to() -> None:
    s = Pod("a", "s", "10.244.0.2", {"app": "s"}, (("TCP", 80, ""),))
    d1 = Pod("b", "d1", "10.244.0.3", {}, (("TCP", 8080, "web"), ("TCP", 9090, "")))
    d2 = Pod("b", "d2", "10.244.0.4", {}, (("TCP", 9090, "web"), ("TCP", 8080, "")))
    model = PolicyModel([s, d1, d2], NS, [_pol("a", {
        "podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "web"}]}]})])
    assert model.matrix([s])["a/s"] == {"b/d1": {"TCP/8080": True, "TCP/9090": False},
                                        "b/d2": {"TCP/8080": False, "TCP/9090": True}}
    ruleset = compile_model(model, "10.244.0.0/16")
    assert sorted(ruleset.ipsets.values()) == [("10.244.0.3",), ("10.244.0.4",)]


def test_ip_blocks_never_match_pods() -> None:
    s = Pod("a", "s", "10.244.0.2", {}, (("TCP", 80, ""),))
    d = Pod("a", "d", "10.244.0.3", {}, (("TCP", 80, ""),))
    model = PolicyModel([s, d], NS, [_pol("a", {
        "podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]})])
    assert not model.allows(s, d, "TCP", 80)
    assert model.peer_matches_address({"ipBlock": {"cidr": "10.0.0.0/8"}}, "10.1.2.3")
    assert "-s 10.244.0.0/16 -j RETURN" in compile_model(model, "10.244.0.0/16").iptables


def test_compare_lists_every_disagreeing_cell() -> None:
    expected = {"a/x": {"a/y": {"TCP/80": False, "UDP/53": True}}}
    measured = {"a/x": {"a/y": {"TCP/80": True, "UDP/53": True}}, "a/y": {"a/x": {"TCP/80": True}}}
    result = compare(expected, measured)
    assert not result.agrees
    assert [(d.src, d.dst, d.port, d.expected, d.measured) for d in result.disagreements] == [
        ("a/x", "a/y", "TCP/80", False, True), ("a/y", "a/x", "TCP/80", None, True)]
    assert result.disagreements[0].describe() == \
        "a/x -> a/y:TCP/80 (expected blocked, measured allowed)"
    assert compare(expected, expected).agrees
