"""The deploy check's scenario layout (scripts/deploy/scenario_compose.py): every agent is
started with only AgentBeats' three options, and the scenario file the client reads carries
NetArena's published config verbatim."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest

from evaluator.green.scenario import scenario_load
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "scenario_compose", ROOT / "scripts" / "deploy" / "scenario_compose.py"
)
assert _spec and _spec.loader
scenario_compose = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scenario_compose)


@pytest.mark.parametrize("app_id", ["malt", "route"])
def test_the_published_scenario_is_laid_out_as_agentbeats_runs_it(app_id, tmp_path) -> None:
    scenario_file = ROOT / "scripts" / "deploy" / "scenarios" / f"{app_id}.toml"
    assert tomllib.loads(scenario_file.read_text())["config"] == PUBLISHED_SCENARIO_CONFIGS[app_id]
    assert scenario_compose.main([str(scenario_file), str(tmp_path), "--client-image", "c:1"]) == 0
    compose = json.loads((tmp_path / "compose.yml").read_text())
    operator = f"{app_id}_operator"
    assert set(compose["services"]) == {"green-agent", operator, "agentbeats-client"}
    for name in ("green-agent", operator):
        service = compose["services"][name]
        assert service["command"] == [
            "--host", "0.0.0.0", "--port", "9009", "--card-url", f"http://{name}:9009"
        ]  # fmt: skip
    green = compose["services"]["green-agent"]
    assert green["privileged"] and green["environment"]["NETARENA_GREEN_APP"] == app_id
    scenario = scenario_load(tmp_path / "a2a-scenario.toml")
    assert scenario.green_endpoint == "http://green-agent:9009"
    assert scenario.participants == {operator: f"http://{operator}:9009"}
    assert scenario.config == PUBLISHED_SCENARIO_CONFIGS[app_id]


def test_a_scenario_without_an_image_is_refused(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[green_agent]\nenv = { A = "1" }\n')
    assert scenario_compose.main([str(bad), str(tmp_path / "out"), "--client-image", "c"]) == 2
    assert "missing 'image'" in capsys.readouterr().err
