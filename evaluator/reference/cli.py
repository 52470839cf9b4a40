"""Command-line options shared by ``python -m evaluator.reference`` and ``manage.py
serve_agent``.

Example::

    python -m evaluator.reference --agent oracle --app malt --protocol openai-chat \\
        --port 9100 --vault var/oracle-vault
    python -m evaluator.reference --agent llm --app route --protocol http-json --port 9101 \\
        --upstream-url http://127.0.0.1:11434 --model qwen2.5:7b --strategy react
    python -m evaluator.reference --agent oracle --app malt --protocol a2a --port 9009 \\
        --vault var/oracle-vault

On start the server prints one line ``serving <agent> agent for <app> (<protocol>) at <url>``
to stdout; with ``--port 0`` the URL carries the free port that was picked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from evaluator.agents import LOOPBACK_NETWORKS, PROTOCOLS
from evaluator.reference.agents import AGENT_NAMES, AgentConfigError, make_served_agent
from evaluator.reference.llm import STRATEGIES
from evaluator.reference.server import build_asgi_app, print_line, serve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the serve options to ``parser`` (argparse or a Django command's parser)."""
    parser.add_argument("--agent", required=True, choices=AGENT_NAMES, help="reference agent")
    parser.add_argument(
        "--app",
        required=True,
        help="app id of the registry (evaluator/registry.py), module:Class of an unregistered "
        "App, a comma-separated list of those, or 'all'",
    )
    parser.add_argument("--protocol", required=True, choices=PROTOCOLS, help="wire protocol")
    parser.add_argument("--port", type=int, required=True, help="TCP port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--vault", help="oracle vault directory (oracle agent)")
    parser.add_argument(
        "--public-url",
        "--card-url",
        dest="public_url",
        default=None,
        help="a2a: JSON-RPC endpoint URL the agent card advertises (default: derived from "
        "each card request's Host header, path /); set it behind a proxy. --card-url is the same "
        "option under the name AgentBeats' compose files pass to participants",
    )
    parser.add_argument("--model", help="upstream model name (llm agent)")
    parser.add_argument("--upstream-url", help="upstream OpenAI-compatible base URL (llm agent)")
    parser.add_argument("--api-key-env", help="environment variable holding the upstream key")
    parser.add_argument(
        "--strategy", default="zero-shot", choices=STRATEGIES, help="prompting strategy (llm)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="upstream sampling temperature (llm; default 0)",
    )
    parser.add_argument(
        "--upstream-timeout-s",
        type=float,
        default=120.0,
        help="deadline of one upstream call in seconds (llm; default 120)",
    )
    parser.add_argument(
        "--allow-network",
        action="append",
        default=None,
        metavar="CIDR",
        help="non-public network the upstream may be in (repeatable; default loopback)",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug")
    )


def build_from_options(options: Any) -> tuple[Any, Any]:
    """Return ``(agent, asgi_app)`` for parsed options (an argparse namespace).

    Raises:
        AgentConfigError: unknown app, missing vault/upstream, unsupported agent for the app.
    """
    llm_options = None
    if options.agent == "llm":
        llm_options = {
            "upstream_url": options.upstream_url,
            "model": options.model,
            "api_key_env": options.api_key_env,
            "strategy": options.strategy,
            "temperature": options.temperature,
            "timeout_s": options.upstream_timeout_s,
            "allowed_networks": tuple(options.allow_network or LOOPBACK_NETWORKS),
        }
    agent = make_served_agent(
        options.agent, options.app, vault_dir=options.vault, llm_options=llm_options
    )
    public_url = getattr(options, "public_url", None)
    return agent, build_asgi_app(agent, options.protocol, public_url=public_url)


def run(options: Any, write_line: Callable[[str], None] = print_line) -> None:
    """Build the agent from ``options`` and serve it in the foreground.

    ``write_line`` receives the one-line start announcement (flushed, for supervisors that
    read the URL from stdout).

    Raises:
        AgentConfigError: as :func:`build_from_options`.
        OSError: the port cannot be bound.
    """
    agent, asgi_app = build_from_options(options)

    def announce(url: str) -> None:
        write_line(
            f"serving {agent.name} agent for {','.join(agent.app_ids)} ({options.protocol}) "
            f"at {url}"
        )

    serve(
        asgi_app,
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        on_listen=announce,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evaluator.reference``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluator.reference", description="Serve a NetArena reference agent."
    )
    add_arguments(parser)
    options = parser.parse_args(argv)
    try:
        run(options)
    except AgentConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"error: cannot listen on {options.host}:{options.port}: {exc}\n")
        return 1
    return 0
