"""A new app costs one registry line: a toy app registered from the test tree, and nothing else
changed, is accepted by every consumer of the registry.

The app is :class:`evaluator.testing.GuessApp` (a test fixture, never shipped), registered
with :func:`evaluator.testing.registered_app` for the duration of each test. Covered here: the
``evaluate`` CLI (against a reference agent over real HTTP) and its result file, the site's
board, the agent pre-flight and the submission form, the Gymnasium environment, the SFT
export, the deployment's worker check (compose and Kubernetes), and the AgentBeats green
agent (``serve_green --app`` offers it; an assessment with the generic config keys runs to
completion against a purple agent over A2A). Everything runs in process, in a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml
from django.contrib.auth.models import User

from accounts import services as team_services
from config.workers import (
    COMPOSE_FILE,
    KUBE_WORKERS_FILE,
    REST,
    compose_consumers,
    compose_problems,
    consumer_problems,
    kube_consumers,
    kube_workers_text,
)
from evaluator.cli import main as evaluate_main
from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import build_asgi_app, serve_in_thread
from evaluator.registry import app_ids, get_app
from evaluator.testing import GuessApp, registered_app
from submissions.management.commands.export_sft import Command as ExportSftCommand
from submissions.models import AgentPreflight
from submissions.preflight_tasks import agent_preflight
from submissions.services import agents as agent_services
from submissions.services import preflight
from training.gym_envs import ENV_IDS, NetArenaEnv, env_id, register_envs
from training.sft import export_sft

NEW = "guess"
TITLE = GuessApp.title


@pytest.fixture(autouse=True)
def new_app() -> Iterator[None]:
    """The toy app, registered by one line, next to the shipped apps."""
    assert NEW not in app_ids()
    with registered_app({NEW: GuessApp}):
        yield


def test_the_evaluate_cli_runs_it_and_writes_it_to_the_result_file(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    server = serve_in_thread(
        build_asgi_app(make_served_agent("oracle", NEW, vault_dir=vault), "http-json")
    )
    out = tmp_path / "result.json"
    try:
        status = evaluate_main([
            "evaluate", "--agent-url", server.url, "--protocol", "http-json", "--apps", NEW,
            "--queries", "3", "--seed", "5", "--oracle-vault", str(vault), "--json", str(out),
            "--quiet",
        ])  # fmt: skip
    finally:
        server.stop()
    assert status == 0
    document = json.loads(out.read_text())
    episodes = [e for e in document["episodes"] if e["app_id"] == NEW]
    assert len(episodes) == 3 and all(e["correct"] and e["safe"] for e in episodes)
    assert NEW in json.dumps(document["summary"])


@pytest.mark.django_db
def test_the_site_shows_it_preflights_it_and_offers_it_for_submission(
    client: Any, tmp_path: Path, settings: Any
) -> None:
    board = client.get("/")
    assert board.status_code == 200 and TITLE in board.content.decode()
    # an agent answering only the new app: its pre-flight clears it, the form offers it
    server = serve_in_thread(
        build_asgi_app(make_served_agent("null", NEW, vault_dir=tmp_path), "http-json")
    )
    settings.NETARENA = {
        **settings.NETARENA,
        "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"],
        "AGENT_PORTS": frozenset({*settings.NETARENA["AGENT_PORTS"], server.port}),
    }
    try:
        user = User.objects.create_user("dee", "dee@example.org", "pw-dee-12345")
        team = team_services.team_create(user=user, name="dee-team")
        agent = agent_services.agent_create(
            team=team, name="g", endpoint_url=server.url + "/", protocol="http-json",
            apps=[NEW], actor=user,
        )  # fmt: skip
        agent_preflight(preflight.preflight_start(agent=agent).pk)
    finally:
        server.stop()
    run = preflight.preflight_latest(agent=agent)
    assert run is not None
    assert run.status == AgentPreflight.Status.PASSED, run.checks
    assert preflight.submittable_apps(agent=agent) == [NEW]
    client.force_login(user)
    page = client.get("/accounts/submit/")
    form = page.context["form"]
    assert NEW in dict(form.fields["apps"].choices)
    assert form.offered == {agent.pk: [NEW]}
    assert f'value="{NEW}"' in page.content.decode()


def test_gymnasium_registers_and_runs_its_environment() -> None:
    register_envs()
    assert ENV_IDS[NEW] == env_id(NEW) == f"netarena/{NEW}-v1"
    env = gym.make(ENV_IDS[NEW])
    try:
        observation, info = env.reset(seed=3)
        assert "Guess my number" in observation and info["level"] == 1
        inner = env.unwrapped
        assert isinstance(inner, NetArenaEnv) and inner.query is not None
        reply = get_app(NEW).oracle_reply(inner.query.ground_truth, [])
        _, reward, terminated, truncated, step_info = env.step(reply)
        assert terminated and not truncated
        assert step_info["verdict"]["correct"] is True
        assert reward == 10.0  # a valid step of an app reporting no failing count: diagnostic
    finally:
        env.close()


def test_sft_export_and_its_command_accept_it(tmp_path: Path) -> None:
    out = tmp_path / "guess.jsonl"
    summary = export_sft(NEW, count=2, seed=1, levels=[1], out=out)
    assert summary.written == 2 and summary.dropped_infrastructure == 0
    examples = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(examples) == 2
    assert all("Guess my number" in json.dumps(example) for example in examples)
    help_text = ExportSftCommand().create_parser("manage.py", "export_sft").format_help()
    assert NEW in help_text


def test_the_deployment_consumes_its_queue_with_no_change() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    assert compose_problems(compose) == []
    consumers = compose_consumers(compose)
    serving = [name for name, queues in consumers.items() if NEW in queues]
    assert len(serving) == 1
    assert compose["services"][serving[0]]["environment"]["NETARENA_WORKER_QUEUES"] == REST
    # the Kubernetes workers too: the shipped file is still the generator's output and its
    # catch-all Deployment consumes the new queue
    workers_text = KUBE_WORKERS_FILE.read_text()
    assert workers_text == kube_workers_text(compose)
    kube = kube_consumers(list(yaml.safe_load_all(workers_text)))
    assert consumer_problems(kube) == []
    assert [name for name, queues in kube.items() if NEW in queues] == serving


def test_the_green_agent_serves_it_with_the_generic_config_keys(tmp_path: Path) -> None:
    import argparse
    import warnings

    from evaluator.green.request import config_keys, parse_config
    from evaluator.oracle_vault import OracleVault
    from tests.evaluator.conftest import LOOPBACK, free_port

    with warnings.catch_warnings():  # a2a-sdk 0.3 uses a constant newer starlette deprecates
        warnings.simplefilter("ignore")
        from engine_commands.management.commands.serve_green import Command as ServeGreenCommand
        from evaluator.green.cli import add_arguments as green_arguments
        from evaluator.green.cli import chosen_app
        from evaluator.green.server import build_app as build_green_app
        from tests.evaluator.green.conftest import assess

    parser = argparse.ArgumentParser()
    green_arguments(parser)
    assert chosen_app(parser.parse_args(["--app", NEW]), environ={}) == NEW
    help_text = ServeGreenCommand().create_parser("manage.py", "serve_green").format_help()
    assert NEW in help_text
    # the app declares no keys of its own: the generic ones, nothing of NetArena's
    names = {key.name for key in config_keys(NEW)}
    assert names == {"num_queries", "complexity_level", "prompt_type", "seed", "trials",
                     "max_iterations"}
    assert parse_config(NEW, {"num_queries": 2}).num_queries == 2
    vault = tmp_path / "vault"
    purple = serve_in_thread(
        build_asgi_app(make_served_agent("oracle", NEW, vault_dir=vault), "a2a")
    )
    port = free_port()
    green = serve_in_thread(
        build_green_app(NEW, card_url=f"http://127.0.0.1:{port}/", vault=OracleVault(vault),
                        allowed_networks=LOOPBACK, timeout_s=10.0),
        port=port,
    )  # fmt: skip
    try:
        outcome = assess(green.url, {"participants": {"agent": purple.url},
                                     "config": {"num_queries": 3, "seed": 7}})  # fmt: skip
    finally:
        green.stop()
        purple.stop()
    assert outcome.state == "completed", outcome.message
    assert len(outcome.queries) == 3  # num_queries per level, the app's one level
    for record in outcome.queries:
        assert record["correctness"] and record["safety"] and record["netarena_type"] is None
        assert not {"success", "Result-Correctness", "error_type"} & set(record)
    summary = outcome.summary
    assert (summary["app"], summary["n"], summary["levels"]) == (NEW, 3, [1])
    assert (summary["avg_correctness"], summary["avg_safety"]) == (1.0, 1.0)
    assert "netarena_n" not in summary and summary["level_seeds"] == {"1": 7}
