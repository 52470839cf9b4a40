"""Start the project's reference agents as local HTTP servers and register them as agents.

Used by the demo (``manage.py demo_round``) and the end-to-end tests. Each server is a
separate ``python -m evaluator.reference`` process on a free loopback port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from evaluator.registry import get_app
from submissions.models import Agent, Team
from submissions.services.agents import agent_create

REFERENCE_TEAM = "NetArena reference"

#: The wire protocol each reference agent kind is served on in the demo (the kinds differ on
#: purpose, so that a demo round crosses more than one protocol).
REFERENCE_PROTOCOLS: dict[str, str] = {
    "oracle": "http-json",
    "null": "openai-chat",
    "heuristic": "http-json",
    "scripted": "http-json",
}


def reference_agent_specs(apps: Sequence[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Return ``(kind, protocol, apps)`` of the demo's reference rows among ``apps``.

    The oracle and null agents take part in every app; the heuristic (floor) agent and the
    scripted agent (written against the public generator: the one the held-out gap flags) in
    the apps that have one (:attr:`evaluator.app.App.has_heuristic`,
    :attr:`evaluator.app.App.has_scripted`). Kinds with no app are left
    out. Raises ``UnknownAppError`` for an unregistered app id.
    """
    heuristic_apps = tuple(a for a in apps if get_app(a).has_heuristic)
    scripted_apps = tuple(a for a in apps if get_app(a).has_scripted)
    specs = [
        ("oracle", REFERENCE_PROTOCOLS["oracle"], tuple(apps)),
        ("null", REFERENCE_PROTOCOLS["null"], tuple(apps)),
        ("heuristic", REFERENCE_PROTOCOLS["heuristic"], heuristic_apps),
        ("scripted", REFERENCE_PROTOCOLS["scripted"], scripted_apps),
    ]
    return [spec for spec in specs if spec[2]]


@dataclass
class ServedAgent:
    """A running reference agent server."""

    kind: str
    protocol: str
    apps: tuple[str, ...]
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    """Return a TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_reference_agent(
    *,
    kind: str,
    protocol: str,
    apps: Sequence[str],
    vault_dir: str | Path,
    log_dir: Path,
    startup_timeout_s: float = 30.0,
    bind_host: str = "127.0.0.1",
    advertise_host: str = "127.0.0.1",
) -> ServedAgent:
    """Start one reference agent server and wait until it accepts connections.

    ``bind_host`` is the address it listens on; ``advertise_host`` the host name its URL
    carries (what workers elsewhere call, e.g. a compose service name).

    Raises:
        RuntimeError: the server exited or did not listen within ``startup_timeout_s``.
    """
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"agent-{kind}-{port}.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "evaluator.reference",
        "--agent",
        kind,
        "--app",
        ",".join(apps) or "all",
        "--protocol",
        protocol,
        "--host",
        bind_host,
        "--port",
        str(port),
        "--vault",
        str(vault_dir),
    ]
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + startup_timeout_s
    probe_host = "127.0.0.1" if bind_host == "0.0.0.0" else bind_host  # noqa: S104
    probe_url = f"http://{probe_host}:{port}"
    url = f"http://{advertise_host}:{port}"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"reference agent {kind} exited with {process.returncode}; see {log.name}"
            )
        try:
            httpx.get(probe_url + "/healthz", timeout=1.0)
            return ServedAgent(kind, protocol, tuple(apps), url, process)
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(
        f"reference agent {kind} did not listen on {url} within {startup_timeout_s} s"
    )


def register_reference_agent(served: ServedAgent) -> Agent:
    """Create or update the reference agent row pointing at ``served``."""
    team, _ = Team.objects.get_or_create(name=REFERENCE_TEAM)
    name = f"reference-{served.kind}"
    agent = Agent.objects.filter(team=team, name=name).first()
    if agent is None:
        return agent_create(
            team=team,
            name=name,
            endpoint_url=served.url,
            protocol=served.protocol,
            reference_kind=served.kind,
            apps=served.apps,
        )
    Agent.objects.filter(pk=agent.pk).update(
        endpoint_url=served.url, protocol=served.protocol, apps=list(served.apps), is_active=True
    )
    agent.refresh_from_db()
    return agent
