"""The enforcer forgets UDP flows when it installs a new table (a stale ESTABLISHED entry must
not let a datagram through that the new policies deny)."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from apps.k8s.cluster.enforcer import forget_udp_flows
from apps.k8s.cluster.netns import join_netns

pytestmark = [pytest.mark.root, pytest.mark.netns]


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
