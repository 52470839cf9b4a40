"""The scenario client (``python -m evaluator.green.scenario``): NetArena's published MALT
scenario, written as AgentBeats' runner writes it, run against our green agent and the served
oracle; the results file has AgentBeats' shape. Bad scenario files are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator.green.scenario import ScenarioError, main, scenario_load
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS, expected_count


def _toml_value(value: object) -> str:
    return json.dumps(value).lower() if isinstance(value, bool) else json.dumps(value)


def _write_scenario(path: Path, green: str, participants: dict[str, str], config: dict) -> Path:
    lines = ["[green_agent]", f'endpoint = "{green}"', ""]
    for role, endpoint in participants.items():
        lines += ["[[participants]]", f'role = "{role}"', f'endpoint = "{endpoint}"', ""]
    lines += ["[config]"] + [f"{key} = {_toml_value(value)}" for key, value in config.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_published_malt_scenario_runs_and_writes_agentbeats_results(
    start_green, start_purple, tmp_path
) -> None:
    green = start_green("malt")
    oracle = start_purple("oracle", "malt")
    config = PUBLISHED_SCENARIO_CONFIGS["malt"]
    scenario = _write_scenario(
        tmp_path / "a2a-scenario.toml", green.url, {"malt_operator": oracle}, config
    )
    out = tmp_path / "output" / "results.json"
    assert main([str(scenario), str(out), "--wait-s", "30"]) == 0
    written = json.loads(out.read_text())
    assert written["participants"] == {"malt_operator": oracle}
    (summary,) = [r for r in written["results"] if r.get("kind") == "summary"]
    assert summary["avg_correctness"] == 1.0
    queries = [r for r in written["results"] if r.get("kind") == "query"]
    assert len(queries) == expected_count("malt", config)  # NetArena's 7


def test_an_agent_without_a_card_is_reported_not_waited_for_forever(tmp_path, capsys) -> None:
    scenario = _write_scenario(
        tmp_path / "s.toml", "http://127.0.0.1:9/", {"op": "http://127.0.0.1:9/"}, {}
    )
    assert main([str(scenario), str(tmp_path / "r.json"), "--wait-s", "0.5"]) == 2
    assert "no agent card" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[config]\nx = 1\n", "[green_agent] needs an endpoint"),
        ('[green_agent]\nendpoint = "http://g/"\n[[participants]]\nrole = "a"\n', "participant 1"),
        (
            '[green_agent]\nendpoint = "http://g/"\n[[participants]]\nrole = "a"\nendpoint = "x"\n'
            '[[participants]]\nrole = "a"\nendpoint = "y"\n',
            "two participants have the role 'a'",
        ),
        ("not toml [", "s.toml"),
    ],
)
def test_bad_scenario_files_name_the_problem(tmp_path, text: str, says: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=None) as raised:
        scenario_load(path)
    assert says in str(raised.value)
