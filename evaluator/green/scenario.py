"""``python -m evaluator.green.scenario SCENARIO OUT``: run one AgentBeats scenario file against
a green agent, as AgentBeats' scenario client does, and write its results file.

The scenario file is the one AgentBeats' runner writes next to its compose file
(``a2a-scenario.toml``; docs/agentbeats.md, "Running a scenario")::

    [green_agent]
    endpoint = "http://green-agent:9009"

    [[participants]]
    role = "malt_operator"
    endpoint = "http://malt_operator:9009"

    [config]
    num_queries = 1
    ...

The client waits until the green agent and every participant serve their agent card
(``/.well-known/agent-card.json``), sends the green agent one message whose text is the
assessment request ``{"participants": {role: endpoint}, "config": {...}}``, follows the task to
its end over ``message/stream`` and writes ``{"participants": {role: endpoint}, "results":
[data of every data artifact, in order]}`` to OUT: the shape of AgentBeats' results files.

Exit status: 0 when the task completed; 1 when it ended in any other state (the final status
text is printed); 2 for a bad scenario file or an agent that never served its card.
Django-free.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import tomllib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

#: Where an A2A server serves its agent card (A2A specification, "Agent discovery").
CARD_PATH = "/.well-known/agent-card.json"


class ScenarioError(ValueError):
    """The scenario file is not a scenario (the message names what is missing)."""


@dataclass(frozen=True)
class Scenario:
    """One scenario: the green agent's endpoint, participants by role, the ``[config]`` table."""

    green_endpoint: str
    participants: dict[str, str]
    config: dict[str, Any] = field(default_factory=dict)

    def request(self) -> dict[str, Any]:
        """The assessment request the green agent receives (docs/agentbeats.md)."""
        return {"participants": dict(self.participants), "config": dict(self.config)}


def scenario_load(path: Path) -> Scenario:
    """Read a scenario file (module docstring).

    Raises:
        ScenarioError: not TOML, no ``[green_agent] endpoint``, a participant without
            ``role`` or ``endpoint``, two participants with one role, or ``config`` not a table.
    """
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ScenarioError(f"{path}: {error}") from error
    endpoint = (data.get("green_agent") or {}).get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise ScenarioError(f"{path}: [green_agent] needs an endpoint")
    participants: dict[str, str] = {}
    for number, entry in enumerate(data.get("participants") or [], start=1):
        role, url = entry.get("role"), entry.get("endpoint")
        if not isinstance(role, str) or not isinstance(url, str) or not role or not url:
            raise ScenarioError(f"{path}: participant {number} needs a role and an endpoint")
        if role in participants:
            raise ScenarioError(f"{path}: two participants have the role {role!r}")
        participants[role] = url
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ScenarioError(f"{path}: [config] must be a table")
    return Scenario(endpoint, participants, config)


def cards_wait(endpoints: Sequence[str], timeout_s: float, poll_s: float = 1.0) -> list[str]:
    """Poll each endpoint's agent card until all answer 200 or ``timeout_s`` passes; return
    the endpoints that never did (empty when all are up)."""
    waiting = list(endpoints)
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as http:
        while waiting and time.monotonic() < deadline:
            for endpoint in list(waiting):
                try:
                    if http.get(endpoint.rstrip("/") + CARD_PATH).status_code == 200:
                        waiting.remove(endpoint)
                except httpx.HTTPError:
                    pass
            if waiting:
                time.sleep(poll_s)
    return waiting


@dataclass
class Outcome:
    """How the task ended: its state (``completed``...), final status text, artifact data."""

    state: str = ""
    message: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)


async def _run(scenario: Scenario, timeout_s: float) -> Outcome:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import DataPart, Message, Part, Role, TaskQueryParams, TextPart

    message = Message(
        role=Role.user,
        message_id=uuid.uuid4().hex,
        parts=[Part(root=TextPart(text=json.dumps(scenario.request())))],
    )
    outcome = Outcome()
    async with httpx.AsyncClient(timeout=timeout_s) as http:
        card = await A2ACardResolver(http, scenario.green_endpoint).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        task_id = ""
        async for event in client.send_message(message):
            if isinstance(event, tuple):
                task_id = event[0].id
        if not task_id:
            outcome.state, outcome.message = "failed", "the green agent answered without a task"
            return outcome
        final = await client.get_task(TaskQueryParams(id=task_id))
    outcome.state = final.status.state.value
    if final.status.message is not None:
        outcome.message = "\n".join(
            p.root.text for p in final.status.message.parts if isinstance(p.root, TextPart)
        )
    outcome.results = [
        part.root.data
        for artifact in final.artifacts or []
        for part in artifact.parts
        if isinstance(part.root, DataPart)
    ]
    return outcome


def scenario_run(scenario: Scenario, out: Path, *, timeout_s: float = 3600.0) -> Outcome:
    """Send the assessment request, follow the task, write the results file to ``out``
    (module docstring) whatever the final state, and return the outcome.

    Raises:
        httpx.HTTPError, a2a.client.A2AClientError: the green agent could not be reached or
            answered a protocol error (nothing is written).
    """
    outcome = asyncio.run(_run(scenario, timeout_s))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"participants": scenario.participants, "results": outcome.results}, indent=2)
    )
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluator.green.scenario",
        description="Run one AgentBeats scenario file against a green agent; write results.",
    )
    parser.add_argument("scenario", type=Path, help="the scenario file (a2a-scenario.toml)")
    parser.add_argument("out", type=Path, help="where to write the results JSON")
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="how long to wait for agent cards (300)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=3600.0, help="HTTP timeout of the assessment (3600)"
    )
    args = parser.parse_args(argv)
    try:
        scenario = scenario_load(args.scenario)
    except ScenarioError as error:
        sys.stderr.write(f"scenario: {error}\n")
        return 2
    missing = cards_wait([scenario.green_endpoint, *scenario.participants.values()], args.wait_s)
    if missing:
        sys.stderr.write(
            f"scenario: no agent card after {args.wait_s:.0f} s: {', '.join(missing)}\n"
        )
        return 2
    outcome = scenario_run(scenario, args.out, timeout_s=args.timeout_s)
    sys.stdout.write(
        f"scenario: task {outcome.state}; {len(outcome.results)} results in {args.out}\n"
    )
    if outcome.state != "completed":
        sys.stderr.write(f"scenario: {outcome.message}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
