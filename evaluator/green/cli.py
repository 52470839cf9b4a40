"""Command-line options of the green agent, shared by ``python -m evaluator.green`` and
``manage.py serve_green``.

Example::

    python manage.py serve_green --app malt --port 9009
    python manage.py serve_green --app route --host 0.0.0.0 --port 9009 \\
        --card-url http://green-agent:9009/ --allow-network 172.16.0.0/12

On start the server prints one line ``serving the <app> green agent at <url>`` to stdout;
with ``--port 0`` the URL carries the free port that was picked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from evaluator.agents import LOOPBACK_NETWORKS
from evaluator.green.server import DEFAULT_TIMEOUT_S, build_app
from evaluator.oracle_vault import OracleVault
from evaluator.reference.server import bind_socket, print_line, socket_url

#: Apps a green agent can assess.
GREEN_APPS = ("malt", "route", "k8s")
#: The port NetArena's leaderboard runs green agents on.
DEFAULT_PORT = 9009


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the green agent's options to ``parser`` (argparse or a Django command's parser)."""
    parser.add_argument("--app", required=True, choices=GREEN_APPS, help="the app assessed")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 = any)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--card-url",
        default=None,
        help="JSON-RPC endpoint URL the agent card advertises (default http://HOST:PORT/); "
        "set it when others reach the server by another name (e.g. http://green-agent:9009/)",
    )
    parser.add_argument(
        "--allow-network",
        action="append",
        default=None,
        metavar="CIDR",
        help="non-public network a participant may be in (repeatable; default loopback)",
    )
    parser.add_argument(
        "--oracle-vault",
        default=None,
        metavar="DIR",
        help="oracle vault shared with a locally served oracle purple agent (testing)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"deadline of one purple-agent reply in seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug")
    )


def run(options: Any, write_line: Callable[[str], None] = print_line) -> None:
    """Serve the green agent of ``options.app`` in the foreground until interrupted.

    ``write_line`` receives the one-line start announcement (flushed, for supervisors that
    read the URL from stdout).

    Raises:
        OSError: the port cannot be bound.
    """
    sock = bind_socket(options.host, options.port)
    url = socket_url(sock)
    asgi_app = build_app(
        options.app,
        card_url=options.card_url or url + "/",
        vault=OracleVault(options.oracle_vault) if options.oracle_vault else None,
        allowed_networks=tuple(options.allow_network or LOOPBACK_NETWORKS),
        timeout_s=options.timeout_s,
    )
    write_line(f"serving the {options.app} green agent at {url}")
    config = uvicorn.Config(asgi_app, log_level=options.log_level, access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evaluator.green``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluator.green", description="Serve a NetArena AgentBeats green agent."
    )
    add_arguments(parser)
    options = parser.parse_args(argv)
    try:
        run(options)
    except OSError as exc:
        sys.stderr.write(f"error: cannot listen on {options.host}:{options.port}: {exc}\n")
        return 1
    return 0
