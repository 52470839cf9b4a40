"""Command-line options of the green agent, shared by ``python -m evaluator.green`` and
``manage.py serve_green``.

Example::

    python manage.py serve_green --app malt --port 9009
    python manage.py serve_green --app route --host 0.0.0.0 --port 9009 \\
        --card-url http://green-agent:9009/ --allow-network 172.16.0.0/12

On start the server prints one line ``serving the <app> green agent at <url>`` to stdout;
with ``--port 0`` the URL carries the free port that was picked.

**Drop-in mode.** NetArena's leaderboard (its ``generate_compose.py``) starts a green image
with only ``--host 0.0.0.0 --port 9009 --card-url http://green-agent:9009`` after the image's
entry point. So the app may come from the environment variable :data:`APP_ENV`, and
:data:`ALLOW_ENV` adds networks the participant guard admits: CIDRs, or ``local`` for the
networks this host or container is attached to (its on-link IPv4 routes, so the compose
network)::

    NETARENA_GREEN_APP=route NETARENA_GREEN_ALLOW_NETWORKS=local \
        python -m evaluator.green --host 0.0.0.0 --port 9009 --card-url http://green-agent:9009
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from evaluator.agents import LOOPBACK_NETWORKS
from evaluator.green.server import DEFAULT_TIMEOUT_S, build_app
from evaluator.oracle_vault import OracleVault
from evaluator.reference.server import bind_socket, print_line, socket_url
from evaluator.registry import app_ids

#: The port NetArena's leaderboard runs green agents on.
DEFAULT_PORT = 9009
#: Environment variable naming the app when ``--app`` is not given (drop-in mode).
APP_ENV = "NETARENA_GREEN_APP"
#: Environment variable of extra networks the participant guard admits: CIDRs separated by
#: commas or spaces, or ``local`` (:func:`local_networks`).
ALLOW_ENV = "NETARENA_GREEN_ALLOW_NETWORKS"
#: Environment variable of the oracle vault directory when ``--oracle-vault`` is not given
#: (a compose file can set it; AgentBeats passes no other argument: docs/agentbeats.md).
VAULT_ENV = "NETARENA_GREEN_ORACLE_VAULT"
#: Where the kernel lists IPv4 routes (hexadecimal, little-endian addresses).
PROC_ROUTES = "/proc/net/route"


def local_networks(routes_path: str = PROC_ROUTES) -> list[str]:
    """The IPv4 networks this host is attached to: its on-link routes (no gateway) other than
    the default route and loopback, as CIDRs (``["172.18.0.0/16"]`` in a compose container).
    A missing or unreadable route table gives ``[]``."""
    networks: list[str] = []
    try:
        lines = open(routes_path, encoding="ascii").read().splitlines()[1:]
    except OSError:
        return networks
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or fields[0] == "lo":
            continue
        destination, gateway, mask = (int(fields[i], 16) for i in (1, 2, 7))
        if gateway != 0 or mask == 0:
            continue
        address = ipaddress.IPv4Address(destination.to_bytes(4, "little"))
        netmask = ipaddress.IPv4Address(mask.to_bytes(4, "little"))
        network = ipaddress.IPv4Network(f"{address}/{netmask}", strict=False)
        if str(network) not in networks:
            networks.append(str(network))
    return networks


def allowed_networks(options: Any, environ: Any = os.environ) -> tuple[str, ...]:
    """The networks the participant guard admits: ``--allow-network`` and :data:`ALLOW_ENV`
    (``local`` expanded by :func:`local_networks`); loopback when neither names one.

    Raises:
        ValueError: an entry of :data:`ALLOW_ENV` is neither ``local`` nor a CIDR.
    """
    chosen = list(options.allow_network or [])
    for entry in environ.get(ALLOW_ENV, "").replace(",", " ").split():
        if entry == "local":
            chosen += local_networks()
            continue
        try:
            chosen.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            raise ValueError(f"{ALLOW_ENV}: {entry!r} is neither 'local' nor a CIDR") from None
    return tuple(chosen) if chosen else tuple(LOOPBACK_NETWORKS)


def chosen_app(options: Any, environ: Any = os.environ) -> str:
    """``--app``, else :data:`APP_ENV`; any registered app (:func:`evaluator.registry.app_ids`).

    Raises:
        ValueError: neither names a registered app.
    """
    app = options.app or environ.get(APP_ENV, "")
    known = app_ids()
    if app not in known:
        raise ValueError(
            f"the app is {app!r}: give --app or set {APP_ENV} to one of {', '.join(known)}"
        )
    return str(app)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the green agent's options to ``parser`` (argparse or a Django command's parser).
    ``--app`` offers the apps registered when it is called (:func:`evaluator.registry.app_ids`).
    """
    parser.add_argument(
        "--app",
        default=None,
        choices=app_ids(),
        help=f"the app assessed, one of the registered apps (default: the environment "
        f"variable {APP_ENV})",
    )
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
        help="non-public network a participant may be in (repeatable; default loopback); "
        f"{ALLOW_ENV} adds more ('local': this host's networks)",
    )
    parser.add_argument(
        "--oracle-vault",
        default=None,
        metavar="DIR",
        help="oracle vault shared with a locally served oracle purple agent (testing); "
        f"default {VAULT_ENV} when set",
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
        ValueError: no app (:func:`chosen_app`) or a bad :data:`ALLOW_ENV`.
    """
    app_id = chosen_app(options)
    networks = allowed_networks(options)
    vault_dir = options.oracle_vault or os.environ.get(VAULT_ENV)
    sock = bind_socket(options.host, options.port)
    url = socket_url(sock)
    asgi_app = build_app(
        app_id,
        card_url=options.card_url or url + "/",
        vault=OracleVault(vault_dir) if vault_dir else None,
        allowed_networks=networks,
        timeout_s=options.timeout_s,
    )
    write_line(f"serving the {app_id} green agent at {url}")
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
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0
