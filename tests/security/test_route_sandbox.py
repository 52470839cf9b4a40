"""Route command sandbox against hostile agents, on real Mininet.

* The evaluator's environment is invisible: no process in the sandbox (pid 1 included, which
  is bubblewrap's own init and used to carry every variable of the evaluator) shows a secret.
* Every spelling a security review found reading host files is refused as a step, the run goes on.
* Control characters (NUL in ``Popen`` used to raise ``ValueError``) are refused, never raised.
* Only the ``/etc`` files the tools need are visible; the tools still work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from apps.route.app import RouteApp
from apps.route.commands import SANDBOX_ETC_FILES, run_sandboxed
from apps.route.episode import RouteEpisode
from tests.apps.route.helpers import require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]

APP = RouteApp(switches=(2, 2), hosts=(2, 2))
SECRET = "postgres://leak:hunter2@db.internal/netarena"

#: Each of these printed DATABASE_URL or read a host file before.
REVIEW_SPELLINGS = [
    "ip -forc -ba /proc/1/environ",
    "ip -ba /proc/1/environ",
    "ip --bat /proc/1/environ",
    "tc -forc -bat /proc/1/environ",
    "arp -vf /proc/1/environ",
    "arp --fil /proc/1/environ",
    "ss -F /proc/1/environ",
    "iptables --modp /tmp/x -L",
    "iptables-save --fi /tmp/out",
    "ip vr exe default cat /proc/1/environ",
    "ip netns exec x cat /proc/1/environ",
    "ip -n x link",
]


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


@pytest.fixture
def episode(monkeypatch: pytest.MonkeyPatch) -> Iterator[RouteEpisode]:
    monkeypatch.setenv("DATABASE_URL", SECRET)
    monkeypatch.setenv("DJANGO_SECRET_KEY", "k3y-" + SECRET)
    query = APP.generate(1, seed=91, level=1)[0]
    ep = APP.episode(query, max_steps=100)
    assert isinstance(ep, RouteEpisode)
    with ep:
        ep.reset()
        yield ep


def _step(ep: RouteEpisode, command: str, machine: str = "r0") -> str:
    return ep.step(json.dumps({"machine": machine, "command": command})).observation


def test_no_sandboxed_process_sees_the_evaluator_environment(episode: RouteEpisode) -> None:
    pid = episode.network.pid_of(episode.network.topology.router)
    for path in ("/proc/1/environ", "/proc/self/environ", "/proc/2/environ"):
        out = run_sandboxed(pid, ["cat", path]).output
        assert "hunter2" not in out and "DATABASE_URL" not in out, (path, out)
        assert "k3y-" not in out
    everything = run_sandboxed(pid, ["sh", "-c", "cat /proc/*/environ | tr '\\0' '\\n'"])
    assert "hunter2" not in everything.output
    assert "PATH=" in everything.output  # the minimal environment is there, nothing else
    names = {line.split("=", 1)[0] for line in everything.output.splitlines() if "=" in line}
    assert names <= {"PATH", "LANG", "PWD"}, names  # PWD: set by sh itself


def test_issue_9_spellings_are_refused_steps(episode: RouteEpisode) -> None:
    for command in REVIEW_SPELLINGS:
        observation = _step(episode, command)
        assert "refused" in observation, (command, observation)
        assert "hunter2" not in observation


def test_control_characters_are_refused_not_raised(episode: RouteEpisode) -> None:
    for command in ("ip addr\x00show", "ip route show\x00/proc/1/environ", "ip\x1b[2J route"):
        observation = _step(episode, command)
        assert "refused" in observation and "control characters" in observation, command
    observation = _step(episode, "ip route", machine="r0\x00")
    assert "unknown machine" in observation or "refused" in observation
    # the episode is still usable after the hostile steps
    assert "Exit status: 0" in _step(episode, "ip route show")


def test_only_the_needed_etc_files_are_visible_and_tools_work(episode: RouteEpisode) -> None:
    pid = episode.network.pid_of(episode.network.topology.router)
    listing = run_sandboxed(pid, ["ls", "-A", "/etc"]).output.split()
    assert set(listing) <= {path.removeprefix("/etc/") for path in SANDBOX_ETC_FILES}, listing
    for secret in ("shadow", "gshadow", "ssh", "ssl", "sudoers", "machine-id", "hostname"):
        assert secret not in listing
    for command in (
        "iptables -L -n",
        "iptables-save",
        "ip rule show",
        "ip route show",
        "tc qdisc show",
        "ss -tan",
        "netstat -rn",
        "route -n",
        "arp -n",
        "ifconfig -a",
        "sysctl net.ipv4.ip_forward",
        "cat /proc/net/route",
    ):
        observation = _step(episode, command)
        assert "Exit status: 0" in observation, (command, observation)
