"""Reference agents served over HTTP (both protocols) and driven by the real episode runner."""

from __future__ import annotations

import httpx
import pytest

from evaluator import registry
from evaluator.agents import PROTOCOLS, AgentError, make_client
from evaluator.oracle_vault import OracleVault
from evaluator.reference import server as server_module
from evaluator.reference.agents import (
    AgentConfigError,
    MultiAppAgent,
    NullAgent,
    ReferenceAgent,
    load_app,
    make_agent,
    make_served_agent,
)
from evaluator.reference.server import build_asgi_app
from evaluator.runner import run_episode
from tests.evaluator.conftest import LOOPBACK


def run_vaulted(app, query, client, vault):
    """``run_episode`` with ``query`` deposited in the oracle vault for its duration."""
    with vault.deposit(query) as episode_id:
        return run_episode(app, query, client, episode_id=episode_id)


pytestmark = pytest.mark.usefixtures("toy_apps")


def served_client(serve, agent: ReferenceAgent, protocol: str):
    server = serve(build_asgi_app(agent, protocol))
    return make_client(protocol, server.url, allowed_networks=LOOPBACK, timeout_s=10)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_oracle_is_correct_on_every_query(serve, tmp_path, protocol: str) -> None:
    app = registry.get_app("toy")
    vault = OracleVault(tmp_path / "vault")
    client = served_client(serve, make_agent("oracle", app, vault_dir=vault.directory), protocol)
    results = [run_vaulted(app, q, client, vault) for q in app.generate(5, seed=3)]
    assert [r.correct for r in results] == [True] * 5
    assert all(r.safe and r.steps == 1 and r.failure is None for r in results)
    assert list(vault.directory.iterdir()) == []  # the runner discards entries afterwards


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_null_agent_never_solves_a_query(serve, protocol: str) -> None:
    app = registry.get_app("toy")
    client = served_client(serve, make_agent("null", app), protocol)
    results = [run_episode(app, q, client) for q in app.generate(3, seed=3)]
    assert [r.correct for r in results] == [False] * 3
    assert all(r.steps == app.max_steps and r.failure == "wrong_answer" for r in results)


def test_served_heuristic_solves_from_observations_alone(serve) -> None:
    app = registry.get_app("toy")
    client = served_client(serve, make_agent("heuristic", app), "http-json")
    results = [run_episode(app, q, client) for q in app.generate(3, seed=11)]
    assert [(r.correct, r.steps) for r in results] == [(True, 2)] * 3


def test_heuristic_refuses_to_start_for_an_app_without_one() -> None:
    with pytest.raises(AgentConfigError, match="no heuristic operator"):
        make_agent("heuristic", registry.get_app("toycode"))


def test_oracle_without_vault_entry_answers_a_clear_error(serve, tmp_path) -> None:
    app = registry.get_app("toy")
    client = served_client(serve, make_agent("oracle", app, vault_dir=tmp_path), "openai-chat")
    with pytest.raises(AgentError) as info:
        client.complete([{"role": "user", "content": "hi"}], episode_id="unknown-episode-1")
    assert info.value.category == "http_status"
    assert "HTTP 404" in str(info.value)
    assert "no oracle vault entry" in str(info.value)
    query = app.generate(1, seed=0)[0]
    result = run_episode(app, query, client)  # evaluated without a vault: a clean failure
    assert not result.correct and result.failure == "agent:http_status"


def test_oracle_uses_the_app_named_by_the_vault_entry(serve, tmp_path) -> None:
    code_query = registry.get_app("toycode").generate(1, seed=5)[0]
    vault = OracleVault(tmp_path)
    vault.put("episode-for-code", code_query)
    agent = make_agent("oracle", registry.get_app("toy"), vault_dir=tmp_path)
    client = served_client(serve, agent, "http-json")
    reply = client.complete([{"role": "user", "content": "x"}], episode_id="episode-for-code")
    number = code_query.ground_truth["number"]
    assert reply.text == f"```python\ndef answer():\n    return {number}\n```"


def test_oracle_needs_a_vault_and_the_episode_header(serve, tmp_path) -> None:
    app = registry.get_app("toy")
    with pytest.raises(AgentConfigError, match="vault"):
        make_agent("oracle", app)
    server = serve(build_asgi_app(make_agent("oracle", app, vault_dir=tmp_path), "http-json"))
    response = httpx.post(server.url + "/act", json={"prompt": "p", "history": []})
    assert response.status_code == 400
    assert "X-NetArena-Episode" in response.json()["error"]


@pytest.mark.parametrize(
    ("protocol", "path", "body", "status", "fragment"),
    [
        ("http-json", "/", b"not json", 400, "not JSON"),
        ("http-json", "/", b"[" * 500_000, 400, "not JSON"),
        ("http-json", "/", b'{"history": []}', 400, "'prompt'"),
        ("http-json", "/", b'{"prompt": "p", "history": [{"role": "boss"}]}', 400, "role"),
        ("http-json", "/", b'{"prompt": "p", "history": "x"}', 400, "list"),
        (
            "openai-chat",
            "/v1/chat/completions",
            b'{"messages": [{"role": "user"}]}',
            400,
            "content",
        ),
        ("openai-chat", "/v1/chat/completions", b"[]", 400, "object"),
    ],
)
def test_bad_requests_get_json_errors(serve, protocol, path, body, status, fragment) -> None:
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), protocol))
    response = httpx.post(server.url + path, content=body)
    assert response.status_code == status
    error = response.json()["error"]
    message = error["message"] if protocol == "openai-chat" else error
    assert fragment in message


def test_oversized_request_is_refused(serve, monkeypatch) -> None:
    monkeypatch.setattr(server_module, "MAX_REQUEST_BYTES", 1000)
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), "http-json"))
    response = httpx.post(server.url, json={"prompt": "x" * 5000, "history": []})
    assert response.status_code == 413


def test_a_crashing_agent_answers_500_and_the_server_keeps_serving(serve) -> None:
    class Flaky(NullAgent):
        def reply(self, messages, episode_id):
            if "crash" in messages[-1]["content"]:
                raise RuntimeError("boom")
            return super().reply(messages, episode_id)

    client = served_client(serve, Flaky(registry.get_app("toy")), "openai-chat")
    with pytest.raises(AgentError, match="HTTP 500.*RuntimeError: boom"):
        client.complete([{"role": "user", "content": "crash"}], episode_id="e-12345678")
    reply = client.complete([{"role": "user", "content": "fine"}], episode_id="e-12345678")
    assert reply.text == '{"action": "look"}'


def test_health_endpoint_describes_the_agent(serve) -> None:
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), "openai-chat"))
    assert httpx.get(server.url + "/healthz").json() == {
        "status": "ok",
        "protocol": "openai-chat",
        "agent": "null",
        "app": "toy",
    }


def test_load_app_accepts_ids_and_class_paths() -> None:
    assert load_app("toy").app_id == "toy"
    assert load_app("tests.evaluator.toyapp:ToyCodeApp").app_id == "toycode"
    with pytest.raises(AgentConfigError, match="unknown app"):
        load_app("nope")
    with pytest.raises(AgentConfigError, match="not an evaluator.app.App"):
        load_app("tests.evaluator.toyapp:WORDS")
    with pytest.raises(AgentConfigError, match="unknown reference agent"):
        make_agent("wizard", load_app("toy"))


def test_one_endpoint_serves_several_apps_routed_by_vault_entry(serve, tmp_path) -> None:
    vault = OracleVault(tmp_path)
    agent = make_served_agent("oracle", "toy,toycode", vault_dir=tmp_path)
    assert isinstance(agent, MultiAppAgent) and agent.app_ids == ["toy", "toycode"]
    client = served_client(serve, agent, "http-json")
    for app_id in ("toy", "toycode"):
        app = registry.get_app(app_id)
        results = [run_vaulted(app, q, client, vault) for q in app.generate(2, seed=8)]
        assert [r.correct for r in results] == [True, True]


def test_without_vault_entry_the_task_message_picks_the_app(serve) -> None:
    client = served_client(serve, make_served_agent("null", "toy,toycode"), "openai-chat")
    toy_task = registry.get_app("toy").generate(1, seed=1)[0].prompt
    code_task = registry.get_app("toycode").generate(1, seed=1)[0].prompt
    reply = client.complete([{"role": "user", "content": toy_task}], episode_id="e-1234567890")
    assert reply.text == '{"action": "look"}'
    reply = client.complete([{"role": "user", "content": code_task}], episode_id="e-1234567890")
    assert reply.text == ""  # App.null_reply default of the code app
    with pytest.raises(AgentError, match="HTTP 400.*cannot tell which app"):
        client.complete([{"role": "user", "content": "hello"}], episode_id="e-1234567890")


def test_all_apps_keeps_those_the_agent_supports(monkeypatch) -> None:
    monkeypatch.setattr(
        registry,
        "APP_PATHS",
        {
            "toy": "tests.evaluator.toyapp:ToyApp",
            "toycode": "tests.evaluator.toyapp:ToyCodeApp",
            "missing": "tests.agents.no_such_module:App",
        },
    )
    registry.get_app.cache_clear()
    assert make_served_agent("null", "all").app_ids == ["toy", "toycode"]
    heuristic = make_served_agent("heuristic", "all")
    assert not isinstance(heuristic, MultiAppAgent) and heuristic.app_ids == ["toy"]
    with pytest.raises(AgentConfigError, match="no heuristic operator"):
        make_served_agent("heuristic", "toy,toycode")
    with pytest.raises(AgentConfigError, match="no app"):
        make_served_agent("null", " , ")
