"""The enforcer forgets UDP flows when it installs a new table (a stale ESTABLISHED entry must
not let a datagram through that the new policies deny), and only the flows of the addresses
whose verdicts the change may alter (a flush of everything turned in-flight replies of other
namespaces into NEW packets their policies rejected)."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from apps.k8s.cluster.compiler import changed_addresses, compile_model
from apps.k8s.cluster.enforcer import forget_udp_flows
from apps.k8s.cluster.netns import join_netns
from apps.k8s.cluster.policy_model import Pod, PolicyModel


def _policy(ns: str, name: str, spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def test_changed_addresses_name_only_the_pods_whose_lines_changed() -> None:
    """A policy change in one namespace names that namespace's affected pods only, per
    direction; an unchanged model names nothing; a relabelled peer changes the lines of the
    pods whose policies select it (their chain references a new ipset)."""
    ns_labels = {"a": {"ns": "a"}, "b": {"ns": "b"}}
    ports = (("UDP", 80, ""),)
    a1 = Pod("a", "a1", "10.244.0.2", {"app": "one"}, ports)
    a2 = Pod("a", "a2", "10.244.0.3", {"app": "two"}, ports)
    b1 = Pod("b", "b1", "10.244.0.4", {"app": "one"}, ports)
    b2 = Pod("b", "b2", "10.244.0.5", {"app": "two"}, ports)
    deny_b = _policy("b", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    only_one = _policy("a", "in", {"podSelector": {"matchLabels": {"app": "one"}},
                                   "ingress": [{"from": [{"namespaceSelector": {},
                                                          "podSelector": {
                                                              "matchLabels": {"app": "two"}}}]}]})

    def table(pods: list[Pod], policies: list[dict[str, object]]) -> str:
        return compile_model(PolicyModel(pods, ns_labels, policies), "10.244.0.0/16").iptables

    base = table([a1, a2, b1, b2], [deny_b])
    assert changed_addresses(base, base) == (set(), set())
    with_a = table([a1, a2, b1, b2], [deny_b, only_one])
    assert changed_addresses(base, with_a) == (set(), {"10.244.0.2"})
    assert changed_addresses(with_a, base) == (set(), {"10.244.0.2"})
    relabelled = table([a1, a2, b1, Pod("b", "b2", "10.244.0.5", {"app": "x"}, ports)],
                       [deny_b, only_one])
    assert changed_addresses(with_a, relabelled) == (set(), {"10.244.0.2"})
    assert changed_addresses(base, table([a1, a2, b1, b2], [])) == (
        {"10.244.0.4", "10.244.0.5"}, {"10.244.0.4", "10.244.0.5"})
    assert changed_addresses("", base) == ({"10.244.0.4", "10.244.0.5"},
                                           {"10.244.0.4", "10.244.0.5"})


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"na-ct-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        # conntrack tracks a namespace's packets once one of its rules needs it
        subprocess.run(["ip", "netns", "exec", name, "iptables", "-A", "INPUT", "-m", "conntrack",
                        "--ctstate", "ESTABLISHED", "-j", "ACCEPT"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _udp_flows(netns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-L", "-p", "udp"],
                         capture_output=True, text=True, check=False)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("udp"))


@pytest.mark.root
@pytest.mark.netns
def test_udp_flows_are_forgotten_and_an_empty_table_is_not_an_error(netns: str) -> None:
    def in_netns() -> int:
        join_netns(netns)
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        server.bind(("127.0.0.1", 0))
        for _ in range(3):
            client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            client.sendto(b"x", server.getsockname())
            data, peer = server.recvfrom(16)
            server.sendto(data, peer)
            client.close()
        server.close()
        return 0

    pid = os.fork()
    if pid == 0:  # setns in a child, so the test process stays where it is
        try:
            os._exit(in_netns())
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    assert _udp_flows(netns) == 3

    pid = os.fork()
    if pid == 0:
        try:
            join_netns(netns)
            os._exit(0 if forget_udp_flows() == 3 and forget_udp_flows() == 0 else 1)
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    assert _udp_flows(netns) == 0


def _exchange(pairs: list[tuple[str, str]]) -> None:
    """One answered UDP datagram per (client address, server address), from a fresh socket."""
    for client_ip, server_ip in pairs:
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        server.bind((server_ip, 0))
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind((client_ip, 0))
        client.sendto(b"x", server.getsockname())
        data, peer = server.recvfrom(16)
        server.sendto(data, peer)
        client.close()
        server.close()


def _udp_pairs(netns: str) -> list[tuple[str, str]]:
    out = subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-L", "-p", "udp"],
                         capture_output=True, text=True, check=False)
    pairs = []
    for line in out.stdout.splitlines():
        words = [f for f in line.split() if f.startswith(("src=", "dst="))]
        fields = {"src": words[0][4:], "dst": words[1][4:]}
        pairs.append((fields["src"], fields["dst"]))
    return sorted(pairs)


@pytest.mark.root
@pytest.mark.netns
def test_only_the_flows_of_the_given_addresses_are_forgotten(netns: str) -> None:
    """Sources match the original source, destinations the original destination; the other
    flows stay ESTABLISHED."""
    pairs = [("127.0.0.2", "127.0.0.10"), ("127.0.0.3", "127.0.0.10"),
             ("127.0.0.4", "127.0.0.11"), ("127.0.0.5", "127.0.0.12")]
    pid = os.fork()
    if pid == 0:
        try:
            join_netns(netns)
            _exchange(pairs)
            first = forget_udp_flows(sources=["127.0.0.2", "127.0.0.99"],
                                     destinations=["127.0.0.11"])
            nothing = forget_udp_flows(sources=[], destinations=["127.0.0.2"])  # not a dst
            os._exit(0 if (first, nothing) == (2, 0) else 1)
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    assert _udp_pairs(netns) == [("127.0.0.3", "127.0.0.10"), ("127.0.0.5", "127.0.0.12")]
