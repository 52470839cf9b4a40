"""The MALT green agent end to end: the a2a-sdk client sends NetArena's assessment request,
reference purple agents answer over A2A, and the verdicts are those of ``evaluate``."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client.errors import A2AClientJSONRPCError

from evaluator.agents import make_client
from evaluator.evaluation import evaluate_agent
from evaluator.oracle_vault import OracleVault
from tests.evaluator.conftest import LOOPBACK, free_port
from tests.evaluator.green.conftest import Outcome, assess, cancel, wait_until
from tests.evaluator.green.netarena_facts import (
    MALT_TYPES,
    PUBLISHED_SCENARIO_CONFIGS,
    expected_count,
)

REPO = Path(__file__).resolve().parents[3]


def test_card_declares_streaming_and_the_app_skill(start_green) -> None:
    green = start_green("malt")
    card = httpx.get(green.url + "/.well-known/agent-card.json", timeout=10).json()
    assert card["capabilities"]["streaming"] is True
    assert [s["id"] for s in card["skills"]] == ["malt-assessment"]
    assert card["url"] == green.url + "/" and card["name"] == "netarena-green-malt"


def test_netarenas_published_scenario_scores_oracle_1_and_null_0(
    start_green, start_purple, vault_dir
) -> None:
    """NetArena's published MALT scenario config, verbatim: NetArena's query count (one per
    operation type of levels 1 and 2: 7), NetArena's fields with NetArena's meanings."""
    green = start_green("malt")
    config = PUBLISHED_SCENARIO_CONFIGS["malt"]
    oracle = assess(green.url, {"participants": {"malt_operator": start_purple("oracle", "malt")},
                                "config": config})
    assert oracle.state == "completed", oracle.message
    assert len(oracle.queries) == expected_count("malt", config) == 7
    assert [q["query_index"] for q in oracle.queries] == list(range(7))
    assert sorted(q["Label"].rsplit(", ", 1)[1] for q in oracle.queries) == sorted(
        MALT_TYPES[1] + MALT_TYPES[2]
    )
    assert all(q["Result-Correctness"] == "Pass" and q["correctness"] for q in oracle.queries)
    assert all(q["agent_info"]["name"] == "malt_operator" for q in oracle.queries)
    assert all(q["Query"] and q["Result-Latency"] >= 0.0 for q in oracle.queries)
    summary = oracle.summary
    assert (summary["avg_correctness"], summary["avg_safety"]) == (1.0, 1.0)
    assert summary["avg_latency_s"] >= 0.0 and "avg_iterations" not in summary
    assert summary["correct_and_safe"]["value"] == 1.0 and summary["n"] == 7
    assert summary["seed_source"] == "regenerated"
    assert set(summary["not_applied"]) == {"output_dir", "output_file", "benchmark_path"}
    assert summary["infrastructure_failures"] == []
    assert sum("processed by agent \"malt_operator\"" in s for s in oracle.statuses) == 7
    assert list(vault_dir.iterdir()) == []

    # message/send (not streamed), the request as a data part
    null = assess(
        green.url,
        {"participants": {"malt_operator": start_purple("null", "malt")}, "config": config},
        streaming=False,
        as_data=True,
    )
    assert null.state == "completed", null.message
    assert len(null.queries) == 7
    assert null.summary["avg_correctness"] == 0.0
    assert all(q["Result-Correctness"] == "Fail" for q in null.queries)
    assert null.summary["correct_and_safe"]["high"] < 0.5  # Wilson: 0/7 is not "zero width"


def _evaluate_level(url: str, vault_dir: Path, level: int, seed: int, count: int) -> Any:
    client = make_client("a2a", url, allowed_networks=LOOPBACK, timeout_s=30)
    try:
        return evaluate_agent(
            client,
            ["malt"],
            queries_per_app=count,
            seed=seed,
            level=level,
            vault=OracleVault(vault_dir),
        )
    finally:
        client.close()


def test_verdicts_equal_the_evaluate_command_on_the_same_seed(
    start_green, start_purple, vault_dir
) -> None:
    """The heuristic floor agent gets some queries right and some wrong: a non-trivial
    comparison of every query's verdict with ``evaluate --level L --seed S+L-1``."""
    url = start_purple("heuristic", "malt")
    green = start_green("malt")
    seed = 23
    config = {"queries_per_level": 3, "complexity_level": ["level1", "level2"], "seed": seed}
    outcome = assess(green.url, {"participants": {"agent": url}, "config": config})
    assert outcome.state == "completed", outcome.message
    expected: list[tuple[int, int, int, bool, bool]] = []
    per_level: dict[str, Any] = {}
    for level in (1, 2):
        document = _evaluate_level(url, vault_dir, level, seed + level - 1, 3)
        expected += [
            (e["level"], e["seed"], e["index"], e["correct"], e["safe"])
            for e in document["episodes"]
        ]
        per_level[str(level)] = document["summary"]["malt"]["levels"][str(level)]
    got = [
        (q["level"], q["seed"], q["index"], q["correctness"], q["safety"])
        for q in outcome.queries
    ]
    assert got == expected
    assert len({c for *_, c, _ in got}) == 2, "the heuristic should be right and wrong"
    summary = outcome.summary
    assert summary["avg_correctness"] == sum(e[3] for e in expected) / len(expected)
    assert summary["avg_safety"] == sum(e[4] for e in expected) / len(expected)
    for level_key, group in per_level.items():
        assert summary["by_level"][level_key]["correctness"] == group["correctness"]
        assert summary["by_level"][level_key]["correct_and_safe"] == group["correct_and_safe"]
    assert summary["level_seeds"] == {"1": seed, "2": seed + 1}


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize(
    ("request_text", "key"),
    [
        ("assess http://127.0.0.1:1 please", "not JSON"),
        ('{"participants": {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}}',
         "exactly one"),
        ('{"participants": {"a": "http://127.0.0.1:1"}, "config": {"num_query": 5}}',
         "num_query"),
        ('{"participants": {"a": "http://127.0.0.1:1"}, "config": {"complexity_level": '
         '["level7"]}}', "complexity_level"),
    ],
)
def test_malformed_requests_get_invalid_params(
    start_green, request_text: str, key: str, streaming: bool
) -> None:
    green = start_green("malt")
    with pytest.raises(A2AClientJSONRPCError) as info:
        assess(green.url, request_text, streaming=streaming)
    assert info.value.error.code == -32602  # InvalidParamsError
    assert key in (info.value.error.message or "")
    assert green.executor.running == 0


def _serve(command: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """Start a green agent process; return it and the URL its start line announces."""
    process = subprocess.Popen(
        command, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=None if env is None else {**os.environ, **env},
    )
    deadline = time.monotonic() + 60
    found = None
    while found is None:
        if process.poll() is not None or time.monotonic() > deadline:
            process.terminate()
            raise AssertionError(log.read_text())
        found = re.search(r"green agent at (http://\S+)", log.read_text())
        time.sleep(0.1)
    return process, found.group(1)


def test_served_green_fails_the_task_clearly_when_the_participant_is_unreachable(
    tmp_path,
) -> None:
    """``manage.py serve_green`` in its own process, a participant nobody listens on."""
    process, url = _serve(
        [sys.executable, "manage.py", "serve_green", "--app", "malt", "--port", "0"]
        + ["--timeout-s", "3"],
        tmp_path / "green.log",
    )
    try:
        gone = f"http://127.0.0.1:{free_port()}"
        outcome = assess(url, {"participants": {"purple": gone}, "config": {}})
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert outcome.state == "failed"
    assert 'participant "purple"' in outcome.message and "could not be reached" in outcome.message
    assert outcome.artifacts == []


def test_drop_in_mode_starts_as_netarenas_compose_starts_a_green_image(
    tmp_path, start_purple
) -> None:
    """The image's entry point with exactly NetArena's generate_compose.py arguments
    (``--host --port --card-url``), the app from NETARENA_GREEN_APP, the guard's networks from
    NETARENA_GREEN_ALLOW_NETWORKS (``local``: this host's networks; loopback added here because
    the test's purple agent listens there)."""
    port = free_port()
    card_url = f"http://localhost:{port}"  # generate_compose.py: http://green-agent:PORT
    process, url = _serve(
        [sys.executable, "-m", "evaluator.green", "--host", "127.0.0.1", "--port", str(port),
         "--card-url", card_url],
        tmp_path / "green.log",
        env={"NETARENA_GREEN_APP": "malt",
             "NETARENA_GREEN_ALLOW_NETWORKS": "local,127.0.0.0/8", "PYTHONPATH": str(REPO)},
    )
    try:
        card = httpx.get(url + "/.well-known/agent-card.json", timeout=10).json()
        purple = start_purple("null", "malt")
        outcome = assess(url, {"participants": {"agent": purple},
                               "config": {"queries_per_level": 1, "complexity_level": [1]}})
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert card["url"] == card_url and card["name"] == "netarena-green-malt"
    assert outcome.state == "completed", outcome.message
    assert len(outcome.queries) == 1 and outcome.summary["avg_correctness"] == 0.0


def test_drop_in_networks_and_app_come_from_the_environment(tmp_path) -> None:
    from argparse import Namespace

    from evaluator.green.cli import allowed_networks, chosen_app, local_networks

    routes = tmp_path / "route"
    routes.write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  # default
        "eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"  # 172.18/16
        "lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n"
    )
    assert local_networks(str(routes)) == ["172.18.0.0/16"]
    none = Namespace(app=None, allow_network=None)
    assert allowed_networks(none, {}) == ("127.0.0.0/8", "::1/128")
    assert allowed_networks(none, {"NETARENA_GREEN_ALLOW_NETWORKS": "10.1.0.0/16"}) == (
        "10.1.0.0/16",
    )
    with pytest.raises(ValueError, match="neither 'local' nor a CIDR"):
        allowed_networks(none, {"NETARENA_GREEN_ALLOW_NETWORKS": "compose"})
    assert chosen_app(none, {"NETARENA_GREEN_APP": "route"}) == "route"
    assert chosen_app(Namespace(app="k8s"), {"NETARENA_GREEN_APP": "route"}) == "k8s"
    with pytest.raises(ValueError, match="NETARENA_GREEN_APP"):
        chosen_app(none, {})


def test_cancel_stops_between_queries_and_leaves_nothing_running(
    start_green, start_purple, vault_dir
) -> None:
    green = start_green("malt")
    url = start_purple("oracle", "malt", delay_s=0.5)
    seen: dict[str, Any] = {}

    async def cancel_after_first_query(client: Any, outcome: Outcome) -> None:
        if "task" not in seen and any("Query 1/" in s for s in outcome.statuses):
            seen["task"] = await cancel(client, outcome.task_id)

    config = {"queries_per_level": 5, "complexity_level": ["level1"], "seed": 3}
    outcome = assess(
        green.url,
        {"participants": {"agent": url}, "config": config},
        on_event=cancel_after_first_query,
    )
    assert seen["task"].status.state.value == "canceled"
    assert outcome.state == "canceled"
    assert 1 <= len(outcome.queries) < 5
    assert not any(a.get("kind") == "summary" for a in outcome.artifacts)
    assert wait_until(lambda: green.executor.running == 0, timeout_s=20)
    assert list(vault_dir.iterdir()) == []


def test_the_green_agent_serves_one_assessment_after_another(start_green, start_purple) -> None:
    green = start_green("malt")
    url = start_purple("oracle", "malt")
    request = {"participants": {"agent": url},
               "config": {"queries_per_level": 1, "complexity_level": ["level3"], "seed": 5,
                          "prompt_type": "fewshot_cot"}}

    async def both() -> tuple[Outcome, Outcome]:
        return await asyncio.gather(
            asyncio.to_thread(assess, green.url, request),
            asyncio.to_thread(assess, green.url, request),
        )

    first, second = asyncio.run(both())
    assert first.state == second.state == "completed"
    assert first.queries[0]["query_id"] == second.queries[0]["query_id"]
    assert first.summary["avg_correctness"] == second.summary["avg_correctness"] == 1.0
    assert first.summary["prompt_type"] == "fewshot_cot" and first.summary["not_applied"] == {}
    assert first.queries[0]["agent_info"]["prompt_type"] == "fewshot_cot"
    assert first.queries[0]["prompt_type_sent"] == "fewshot_cot"
