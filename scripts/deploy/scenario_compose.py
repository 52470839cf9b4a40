"""Write the compose file and the A2A scenario file for one scenario, the way AgentBeats'
runner lays a scenario out (docs/agentbeats.md, "Running a scenario"), so that the deploy check
runs our green image exactly as NetArena's leaderboard would:

* ``green-agent``: the scenario's green image, started with only ``--host 0.0.0.0 --port 9009
  --card-url http://green-agent:9009`` after its entry point, privileged, its ``env``;
* one service per participant, named by the participant, started with the same three options
  (``--card-url http://<name>:9009``) and its ``env``;
* ``agentbeats-client``: the scenario client (``python -m evaluator.green.scenario``, in the
  image given by ``--client-image``) reading ``a2a-scenario.toml`` and writing
  ``output/results.json``;
* all on one bridge network, ``agent-network``.

One addition of ours: the green agent and the participants share a volume at ``/vault``, the
oracle vault through which the reference oracle participant learns the answers (a scenario
with a real agent does not need it; it changes nothing else).

Usage: ``scenario_compose.py SCENARIO.toml OUT_DIR --client-image IMAGE``. Writes
``OUT_DIR/compose.yml`` (JSON, which is YAML) and ``OUT_DIR/a2a-scenario.toml``. Needs
``tomli-w`` (the deploy check installs it next to podman-compose). Exit status 2 on a scenario
without images.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

PORT = 9009
#: Every interface of the container: the compose network reaches the agents there.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104
CLIENT = "agentbeats-client"
GREEN = "green-agent"


def _service(name: str, image: str, env: dict[str, Any], privileged: bool) -> dict[str, Any]:
    return {
        "image": image,
        "container_name": name,
        "privileged": privileged,
        "command": [
            "--host",
            ALL_INTERFACES,
            "--port",
            str(PORT),
            "--card-url",
            f"http://{name}:{PORT}",
        ],  # noqa: S104
        "environment": {"PYTHONUNBUFFERED": "1", **{k: str(v) for k, v in env.items()}},
        "volumes": ["vault:/vault"],
        "networks": ["agent-network"],
    }


def compose_of(scenario: dict[str, Any], client_image: str) -> dict[str, Any]:
    """The compose file (a dict) of ``scenario`` (module docstring).

    Raises:
        KeyError: the green agent or a participant has no ``image``, or a participant no
            ``name``.
    """
    green = scenario["green_agent"]
    participants = scenario.get("participants", [])
    services = {GREEN: _service(GREEN, green["image"], green.get("env", {}), True)}
    for participant in participants:
        name = participant["name"]
        services[name] = _service(name, participant["image"], participant.get("env", {}), False)
    services[CLIENT] = {
        "image": client_image,
        "container_name": CLIENT,
        "user": "root",
        "entrypoint": ["python", "-m", "evaluator.green.scenario"],
        "command": ["/scenario/a2a-scenario.toml", "/output/results.json"],
        "volumes": ["./a2a-scenario.toml:/scenario/a2a-scenario.toml:ro", "./output:/output"],
        "depends_on": [GREEN, *(p["name"] for p in participants)],
        "networks": ["agent-network"],
    }
    return {
        "services": services,
        "networks": {"agent-network": {"driver": "bridge"}},
        "volumes": {"vault": {}},
    }


def a2a_scenario_of(scenario: dict[str, Any]) -> str:
    """The scenario file the client reads: endpoints on the compose network, the config."""
    return tomli_w.dumps(
        {
            "green_agent": {"endpoint": f"http://{GREEN}:{PORT}"},
            "participants": [
                {"role": p["name"], "endpoint": f"http://{p['name']}:{PORT}"}
                for p in scenario.get("participants", [])
            ],
            "config": scenario.get("config", {}),
        }
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description="Lay out a scenario as AgentBeats' runner does.")
    parser.add_argument("scenario", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--client-image", required=True)
    args = parser.parse_args(argv)
    scenario = tomllib.loads(args.scenario.read_text())
    try:
        compose = compose_of(scenario, args.client_image)
    except KeyError as missing:
        sys.stderr.write(f"scenario_compose: {args.scenario}: missing {missing}\n")
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "output").mkdir(exist_ok=True)
    (args.out_dir / "compose.yml").write_text(json.dumps(compose, indent=2) + "\n")
    (args.out_dir / "a2a-scenario.toml").write_text(a2a_scenario_of(scenario))
    return 0


if __name__ == "__main__":
    sys.exit(main())
