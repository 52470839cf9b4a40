"""Unit tests of the NetworkPolicy model, the compiler and the cross-check comparison (no cluster).

Semantics from the Kubernetes documentation (concepts/services-networking/network-policies).
"""

from __future__ import annotations

from typing import Any

from apps.k8s.cluster.compiler import EGRESS_MARK, INGRESS_MARK, compile_model
from apps.k8s.cluster.policy_model import (
    Pod,
    PolicyModel,
    parse_ipv4_cidr,
    policy_types,
    selector_matches,
    unsupported,
)
from apps.k8s.crosscheck import compare

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


def test_policy_types_default_as_the_api_server_does() -> None:
    """Omitted (or empty) ``policyTypes``: Ingress always, Egress only with a non-empty
    ``egress`` list (Kubernetes ``pkg/apis/networking/v1/defaults.go``,
    ``SetDefaults_NetworkPolicy``), so ``egress: []`` does not isolate egress."""
    assert policy_types(_pol("a", {"podSelector": {}})) == {"Ingress"}
    assert policy_types(_pol("a", {"podSelector": {}, "egress": []})) == {"Ingress"}
    assert policy_types(_pol("a", {"podSelector": {}, "egress": None})) == {"Ingress"}
    assert policy_types(_pol("a", {"podSelector": {}, "policyTypes": [], "egress": []})) == {
        "Ingress"}
    assert policy_types(_pol("a", {"podSelector": {}, "egress": [{}]})) == {"Ingress", "Egress"}
    assert policy_types(_pol("a", {"podSelector": {}, "policyTypes": ["Egress"],
                                   "egress": []})) == {"Egress"}
    s = Pod("a", "s", "10.244.0.2", {"app": "s"}, (("TCP", 80, ""),))
    d = Pod("b", "d", "10.244.0.3", {}, (("TCP", 80, ""),))
    model = PolicyModel([s, d], NS, [_pol("a", {"podSelector": {}, "egress": []})])
    assert not model.isolating(s, "Egress") and model.isolating(s, "Ingress")
    assert model.allows(s, d, "TCP", 80) and not model.allows(d, s, "TCP", 80)
    assert f"--set-xmark {EGRESS_MARK:#x}" not in compile_model(model, "10.244.0.0/16").iptables


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


def test_ip_blocks_match_pod_ips_as_the_e2e_suite_expects() -> None:
    """A pod whose IP is in an ipBlock (and in no except) is selected by it, in
    the model and in the compiled table (no RETURN for the pod CIDR any more)."""
    s = Pod("a", "s", "10.244.0.2", {}, (("TCP", 80, ""),))
    d = Pod("a", "d", "10.244.0.3", {}, (("TCP", 80, ""),))
    e = Pod("a", "e", "10.244.0.4", {}, (("TCP", 80, ""),))
    model = PolicyModel([s, d, e], NS, [_pol("a", {
        "podSelector": {}, "ingress": [{"from": [{"ipBlock": {
            "cidr": "10.0.0.0/8", "except": ["10.244.0.4/32"]}}]}]})])
    assert model.allows(s, d, "TCP", 80) and model.allows(d, e, "TCP", 80)
    assert not model.allows(e, d, "TCP", 80)  # e's address is excepted
    assert model.peer_matches_address({"ipBlock": {"cidr": "10.0.0.0/8"}}, "10.244.0.3")
    text = compile_model(model, "10.244.0.0/16").iptables
    assert "-s 10.244.0.0/16 -j RETURN" not in text
    assert "-s 10.244.0.4/32 -j RETURN" in text and "-s 10.0.0.0/8 -j NAB-" in text


def test_ip_block_except_and_named_ports_in_egress() -> None:
    """Egress to an ipBlock with a named port: the name resolves on pods inside the block
    (per destination), numbered entries apply to every address of the block."""
    s = Pod("a", "s", "10.244.0.2", {"app": "s"}, (("TCP", 80, ""),))
    d1 = Pod("b", "d1", "10.244.1.3", {}, (("TCP", 8080, "web"),))
    d2 = Pod("b", "d2", "10.244.1.4", {}, (("TCP", 9090, "web"),))
    d3 = Pod("b", "d3", "10.244.2.5", {}, (("TCP", 8080, "web"),))
    model = PolicyModel([s, d1, d2, d3], NS, [_pol("a", {
        "podSelector": {"matchLabels": {"app": "s"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.2.0/24"]}}],
                    "ports": [{"port": "web"}, {"port": 9090}]}]})])
    assert model.matrix([s])["a/s"] == {"b/d1": {"TCP/8080": True}, "b/d2": {"TCP/9090": True},
                                        "b/d3": {"TCP/8080": False}}
    ruleset = compile_model(model, "10.244.0.0/16")
    assert ("10.244.1.3",) in ruleset.ipsets.values()  # web -> 8080 on d1
    assert "-d 10.244.2.0/24 -j RETURN" in ruleset.iptables


def test_an_unsupported_policy_is_refused_alone_and_fails_closed() -> None:
    """An IPv6 ipBlock (accepted by the API server) makes that one policy
    refused: its pods stay isolated, nothing of it is admitted, the namespace reports it, and
    the other namespace compiles normally; the table names no IPv6 address."""
    a1 = Pod("a", "a1", "10.244.0.2", {"app": "x"}, (("TCP", 80, ""),))
    b1 = Pod("b", "b1", "10.244.0.3", {"app": "y"}, (("TCP", 80, ""),))
    b2 = Pod("b", "b2", "10.244.0.4", {"app": "z"}, (("TCP", 80, ""),))
    v6 = _pol("a", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}}]},
        {}]})  # the second rule would admit everything if the policy were installed
    allow_all = {**_pol("b", {"podSelector": {}, "ingress": [{}]}),
                 "metadata": {"name": "allow", "namespace": "b"}}
    deny = {**_pol("b", {"podSelector": {"matchLabels": {"app": "z"}}}),
            "metadata": {"name": "deny-z", "namespace": "b"}}
    model = PolicyModel([a1, b1, b2], NS, [v6, allow_all, deny])
    assert model.refused == {("a", "p"): [
        "ipBlock '2001:db8::/32' is not an IPv4 CIDR (this cluster is IPv4-only)",
        "ipBlock '2001:db8:1::/48' is not an IPv4 CIDR (this cluster is IPv4-only)"]}
    assert not model.allows(a1, b1, "TCP", 80)  # fail-closed
    assert model.allows(b2, b1, "TCP", 80)
    ruleset = compile_model(model, "10.244.0.0/16")
    assert "2001" not in ruleset.iptables
    assert not ruleset.health["a"].in_sync and "2001:db8::/32" in ruleset.health["a"].describe()
    assert ruleset.health["b"].in_sync
    assert "-s 10.244.0.2/32 -m mark ! --mark 0x10000/0x10000 -j REJECT" in ruleset.iptables


def test_unsupported_strings_the_api_server_accepts() -> None:
    """The API server's lenient CIDR parser accepts these; the model refuses them."""
    for text in ("2001:db8::/32", "::ffff:10.0.0.0/104", "010.0.0.0/8", "10.0.0.0/08",
                 "10.0.0.256/8", "10.0.0.0/33", "10.0.0.0"):
        assert parse_ipv4_cidr(text) is None, text
    assert str(parse_ipv4_cidr("10.243.1.7/16")) == "10.243.0.0/16"
    assert str(parse_ipv4_cidr("0.0.0.0/0")) == "0.0.0.0/0"
    assert unsupported(_pol("a", {"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["010.1.0.0/16"]}}]}]}))


def test_a_namespace_over_its_budget_fails_closed_alone() -> None:
    """A namespace whose policies compile beyond the budget is installed fail-closed and
    reported; another namespace is compiled as usual."""
    pods = [Pod("a", f"a{i}", f"10.244.0.{i + 2}", {"app": f"x{i}"}, (("TCP", 80, ""),))
            for i in range(4)]
    pods.append(Pod("b", "b0", "10.244.1.2", {"app": "y"}, (("TCP", 80, ""),)))
    peers = [{"podSelector": {"matchLabels": {"app": f"x{j}"}}} for j in range(4)]
    big = [{"metadata": {"name": f"p{i}", "namespace": "a"}, "spec": {
        "podSelector": {}, "ingress": [
            {"from": peers, "ports": [{"port": 1000 + 10 * i + k} for k in range(10)]}]}}
           for i in range(5)]
    small = _pol("b", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    model = PolicyModel(pods, NS, [*big, small])
    generous = compile_model(model, "10.244.0.0/16", budget=10_000)
    assert generous.health["a"].in_sync and generous.health["a"].rules > 200
    tight = compile_model(model, "10.244.0.0/16", budget=200)
    assert not tight.health["a"].in_sync and "budget of 200" in (tight.health["a"].error or "")
    assert tight.health["b"].in_sync
    assert "-d 10.244.0.2/32 -j REJECT" in tight.iptables  # a's pods reject every connection
    assert "-m set --match-set" in tight.iptables  # b keeps its rules


def test_chains_are_per_policy_and_named_by_content() -> None:
    """Two pods isolated by different policy sets share each policy's chain; compiling twice
    gives the same text (so an unchanged table is not reinstalled)."""
    p1 = Pod("a", "p1", "10.244.0.2", {"app": "x", "tier": "t"}, (("TCP", 80, ""),))
    p2 = Pod("a", "p2", "10.244.0.3", {"app": "x"}, (("TCP", 80, ""),))
    both = {"metadata": {"name": "both", "namespace": "a"},
            "spec": {"podSelector": {"matchLabels": {"app": "x"}}, "ingress": [{"ports": [
                {"port": 80}]}]}}
    tier = {"metadata": {"name": "tier", "namespace": "a"},
            "spec": {"podSelector": {"matchLabels": {"tier": "t"}}, "ingress": [{"ports": [
                {"port": 81}]}]}}
    model = PolicyModel([p1, p2], NS, [both, tier])
    first = compile_model(model, "10.244.0.0/16").iptables
    assert first == compile_model(model, "10.244.0.0/16").iptables
    assert first.count(":NAP-") == 2


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


def test_a_namespace_the_kernel_refuses_is_installed_fail_closed_alone(
        monkeypatch: Any, tmp_path: Any) -> None:
    """An install that fails as a whole (here: a kernel without SCTP matching) is retried
    namespace by namespace; the namespace whose rules fail is installed fail-closed and
    reported, the others keep their rules, and the next sync of the same state installs
    nothing new."""
    from apps.k8s.cluster import enforcer
    from apps.k8s.cluster.health import read_status

    a1 = Pod("a", "a1", "10.244.0.2", {}, (("TCP", 80, ""),))
    b1 = Pod("b", "b1", "10.244.0.3", {}, (("TCP", 80, ""),))
    b2 = Pod("b", "b2", "10.244.0.4", {}, (("TCP", 80, ""),))
    sctp = _pol("a", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "SCTP",
                                                                 "port": 80}]}]})
    allow_b = _pol("b", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    model = PolicyModel([a1, b1, b2], NS, [sctp, allow_b])
    installed: list[str] = []

    def fake_install(ruleset: Any, existing: Any = None) -> set[str]:
        if "-p sctp" in ruleset.iptables:
            raise RuntimeError("iptables-restore: Couldn't load match `sctp'")
        installed.append(ruleset.iptables)
        return set(ruleset.ipsets)

    monkeypatch.setattr(enforcer, "install", fake_install)
    monkeypatch.setattr(enforcer, "forget_udp_flows", lambda *args: 0)
    monkeypatch.setattr(enforcer, "load_model", lambda *args, **kwargs: model)
    status_file = tmp_path / "status.json"
    daemon = enforcer.Enforcer(None, "10.244.0.0/16", status_file)
    daemon.sync_once()
    final = installed[-1]
    assert "-d 10.244.0.2/32 -j REJECT" in final  # a fail-closed
    assert "-m set --match-set" in final  # b keeps its rules
    status = read_status(status_file)
    assert status is not None
    assert not status.namespaces["a"].in_sync
    assert "kernel refused" in (status.namespaces["a"].error or "")
    assert status.namespaces["b"].in_sync
    count = len(installed)
    daemon.sync_once()
    assert len(installed) == count  # the same state: nothing tried or installed again
