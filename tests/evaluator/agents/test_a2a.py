"""The ``a2a`` protocol: client against real local A2A servers, the served reference agents,
and ``evaluate --protocol a2a`` end to end.

The fake agents below are small starlette apps speaking A2A v0.3 JSON-RPC on loopback; each
records what it received so the tests can check the wire format, not only the outcome.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evaluator import registry
from evaluator.agents import A2AClient, AgentError, make_client
from evaluator.agents.a2a import (
    CARD_PATH,
    LEGACY_CARD_PATH,
    PART_TEXT_MAX_CHARS,
    PARTS_KEPT,
    parse_transcript,
    render_transcript,
)
from evaluator.oracle_vault import OracleVault
from evaluator.reference import server as server_module
from evaluator.reference.agents import make_agent
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from evaluator.runner import run_episode
from tests.conftest import require
from tests.evaluator.conftest import LOOPBACK, free_port


def run_vaulted(app, query, client, vault):
    """``run_episode`` with ``query`` deposited in the oracle vault for its duration."""
    with vault.deposit(query) as episode_id:
        return run_episode(app, query, client, episode_id=episode_id)


REPO = Path(__file__).resolve().parents[3]

CHAT = [
    {"role": "user", "content": "task: find the word"},
    {"role": "assistant", "content": '{"action": "look"}'},
    {"role": "user", "content": "The secret word is wren."},
]


def text_message(*texts: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": "m-1",
        "role": "agent",
        "parts": [{"kind": "text", "text": t} for t in texts],
    }


def rpc_result(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "1", "result": result}


class FakeA2A:
    """An A2A agent on loopback: serves ``card`` (``{base}`` is replaced by the server URL) at
    the paths in ``card_paths`` and answers JSON-RPC POSTs at ``/rpc`` with ``answer(body)``.
    """

    def __init__(
        self,
        serve: Callable[[Any], Any],
        answer: Callable[[Any], Response | dict[str, Any]],
        *,
        card: dict[str, Any] | None = None,
        card_paths: tuple[str, ...] = (CARD_PATH,),
    ) -> None:
        self.gets: list[dict[str, Any]] = []
        self.posts: list[dict[str, Any]] = []
        self.answer = answer
        self.card = card if card is not None else {"name": "fake", "url": "{base}/rpc"}

        async def card_endpoint(request: Request) -> Response:
            self.gets.append({"path": request.url.path, "headers": dict(request.headers)})
            text = json.dumps(self.card).replace("{base}", self.url)
            return Response(text, media_type="application/json")

        async def rpc(request: Request) -> Response:
            body = json.loads(await request.body())
            self.posts.append(
                {"path": request.url.path, "headers": dict(request.headers), "body": body}
            )
            answer = self.answer(body)
            return answer if isinstance(answer, Response) else JSONResponse(answer)

        routes = [Route(path, card_endpoint, methods=["GET"]) for path in card_paths]
        routes.append(Route("/rpc", rpc, methods=["POST"]))
        self.server = serve(Starlette(routes=routes))
        self.url: str = self.server.url

    def client(self, **options: Any) -> A2AClient:
        options.setdefault("allowed_networks", LOOPBACK)
        options.setdefault("timeout_s", 10)
        return A2AClient(self.url, **options)


def reply(answer: dict[str, Any]) -> Callable[[Any], dict[str, Any]]:
    return lambda body: answer


# -- the conversation as one text ------------------------------------------------------


def test_one_user_message_is_sent_verbatim_and_a_chat_as_headed_blocks() -> None:
    assert render_transcript(CHAT[:1]) == "task: find the word"
    assert render_transcript(CHAT) == (
        "=== task ===\ntask: find the word\n\n"
        '=== your reply 1 ===\n{"action": "look"}\n\n'
        "=== observation 1 ===\nThe secret word is wren."
    )


def test_the_fence_grows_past_any_run_of_equals_in_the_chat() -> None:
    chat = [{"role": "user", "content": "a ==== b"}, {"role": "assistant", "content": "x"}]
    text = render_transcript(chat)
    assert text.startswith("===== task =====\n")
    assert parse_transcript(text) == chat


def test_transcript_round_trips_exactly_on_awkward_chats() -> None:
    rng = random.Random(20261121)
    alphabet = ["=", "==", "\n", "\n\n", " ", "task", "your reply 1", "observation", "a", "{"]
    for _ in range(300):
        chat: list[dict[str, Any]] = []
        if rng.random() < 0.2:
            chat.append({"role": "system", "content": "be brief"})
        for number in range(rng.randrange(1, 8)):
            role = "user" if number % 2 == 0 else "assistant"
            content = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
            chat.append({"role": role, "content": content})
        assert parse_transcript(render_transcript(chat)) == chat, chat


def test_a_lone_message_that_looks_like_a_transcript_still_round_trips() -> None:
    chat = [{"role": "user", "content": "=== task ===\nnot really a header"}]
    assert parse_transcript(render_transcript(chat)) == chat
    assert parse_transcript("plain text\n=== task ===\n") == [
        {"role": "user", "content": "plain text\n=== task ===\n"}
    ]


# -- card resolution and the request -----------------------------------------------------


def test_card_is_fetched_once_and_each_turn_is_one_message_send(serve) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("look again"))))
    client = fake.client(api_key="sk-team")
    assert client.complete(CHAT, episode_id="tok-12345678").text == "look again"
    assert client.complete(CHAT[:1], episode_id="tok-87654321").text == "look again"
    assert [g["path"] for g in fake.gets] == [CARD_PATH]
    assert fake.gets[0]["headers"]["authorization"] == "Bearer sk-team"
    first, second = fake.posts
    assert first["path"] == "/rpc"
    assert first["headers"]["x-netarena-episode"] == "tok-12345678"
    assert first["headers"]["authorization"] == "Bearer sk-team"
    body = first["body"]
    assert body["jsonrpc"] == "2.0" and body["method"] == "message/send"
    message = body["params"]["message"]
    assert message["role"] == "user" and message["kind"] == "message"
    assert message["parts"] == [{"kind": "text", "text": render_transcript(CHAT)}]
    assert "contextId" not in message
    assert re.fullmatch(r"[0-9a-f]{32}", message["messageId"])
    assert second["body"]["params"]["message"]["parts"][0]["text"] == "task: find the word"
    assert second["body"]["params"]["message"]["messageId"] != message["messageId"]
    assert second["body"]["id"] != body["id"]
    described = client.describe()
    assert described["protocol"] == "a2a"
    assert described["card"]["endpoint"] == fake.url + "/rpc"
    assert described["card"]["name"] == "fake"
    assert re.fullmatch(r"[0-9a-f]{64}", described["card"]["sha256"])
    assert "sk-team" not in json.dumps(described)


def test_legacy_card_path_is_the_fallback(serve) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card_paths=(LEGACY_CARD_PATH,))
    assert fake.client().complete(CHAT, episode_id="tok-12345678").text == "ok"
    assert [g["path"] for g in fake.gets] == [LEGACY_CARD_PATH]


def test_no_card_at_either_path_is_an_http_status_failure(serve) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card_paths=("/elsewhere",))
    with pytest.raises(AgentError, match="no A2A agent card found") as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "http_status"
    assert fake.posts == []


def test_a_registered_card_url_and_a_relative_endpoint_are_accepted(serve) -> None:
    fake = FakeA2A(
        serve,
        reply(rpc_result(text_message("ok"))),
        card={"name": "rel", "url": "/rpc"},
        card_paths=("/cards/main.json",),
    )
    client = A2AClient(fake.url + "/cards/main.json", allowed_networks=LOOPBACK)
    assert client.complete(CHAT, episode_id="tok-12345678").text == "ok"
    assert [p["path"] for p in fake.posts] == ["/rpc"]


def test_the_json_rpc_interface_is_found_among_additional_interfaces(serve) -> None:
    card = {
        "name": "multi",
        "url": "{base}/grpc",
        "preferredTransport": "GRPC",
        "additionalInterfaces": [
            {"url": "{base}/grpc", "transport": "GRPC"},
            {"url": "{base}/rpc", "transport": "JSONRPC"},
        ],
    }
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card=card)
    assert fake.client().complete(CHAT, episode_id="tok-12345678").text == "ok"


@pytest.mark.parametrize(
    ("card", "fragment"),
    [
        ({"name": "grpc only", "url": "{base}/rpc", "preferredTransport": "GRPC"}, "no JSON-RPC"),
        ({"name": "no url"}, "no JSON-RPC"),
        (["not", "a", "card"], "not a JSON object"),
    ],
)
def test_unusable_cards_are_bad_responses(serve, card: Any, fragment: str) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card=card)
    with pytest.raises(AgentError, match=fragment) as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "bad_response"
    assert fake.posts == []


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://10.1.2.3:9009/", "private"),
        ("file:///etc/passwd", "scheme"),
    ],
)
def test_a_card_pointing_at_a_refused_address_is_refused(serve, endpoint: str, why: str) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card={"url": endpoint})
    client = fake.client()
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "refused_address"
    assert why in str(info.value) and "agent card" in str(info.value)
    assert fake.posts == []
    with pytest.raises(AgentError):  # not cached: the next episode asks for the card again
        client.complete(CHAT, episode_id="tok-12345678")
    assert len(fake.gets) == 2


def test_the_card_itself_goes_through_the_guard(serve) -> None:
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))))
    client = make_client("a2a", fake.url)  # no allow-list: loopback is refused
    with pytest.raises(AgentError, match="loopback") as info:
        client.complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "refused_address"
    assert fake.gets == [] and fake.posts == []


# -- reading the reply -------------------------------------------------------------------


def test_a_message_reply_joins_text_parts_and_renders_data_parts(serve) -> None:
    message = text_message("first", "second")
    message["parts"].insert(1, {"kind": "file", "file": {"uri": "https://x.example/f"}})
    message["parts"].append({"kind": "data", "data": {"machine": "r0"}})
    fake = FakeA2A(serve, reply(rpc_result(message)))
    text = fake.client().complete(CHAT, episode_id="tok-12345678").text
    assert text == 'first\nsecond\n{\n  "machine": "r0"\n}'


def test_a_reply_keeps_the_parts_it_was_read_from_bounded(serve) -> None:
    message = text_message("first", "x" * (PART_TEXT_MAX_CHARS + 50))
    message["parts"].insert(
        1, {"kind": "file", "file": {"name": "plan.pdf", "mimeType": "application/pdf",
                                     "bytes": "JVBERi0="}}
    )  # fmt: skip
    message["parts"].append({"kind": "data", "data": {"machine": "r0", "hops": [1, 2]}})
    message["parts"] += [{"kind": "text", "text": f"extra {k}"} for k in range(PARTS_KEPT)]
    fake = FakeA2A(serve, reply(rpc_result(message)))
    answer = fake.client().complete(CHAT, episode_id="tok-12345678")
    assert answer.parts_from == "message"
    assert answer.parts is not None and len(answer.parts) == PARTS_KEPT + 1
    assert answer.parts[0] == {"kind": "text", "text": "first"}
    assert answer.parts[1] == {"kind": "file", "name": "plan.pdf", "mime_type": "application/pdf"}
    assert answer.parts[2]["text"].startswith("x" * PART_TEXT_MAX_CHARS + "\n[... 50 characters")
    assert answer.parts[3] == {"kind": "data", "data": {"machine": "r0", "hops": [1, 2]}}
    assert answer.parts[-1] == {"kind": "more", "count": 4}
    assert "extra 9" in answer.text  # the answer itself is read from every part


def test_a_task_reply_names_the_artifact_its_parts_came_from(serve) -> None:
    artifact = {"artifactId": "b", "parts": [{"data": {"cmd": "ip route"}}]}
    fake = FakeA2A(serve, reply(rpc_result(task("completed", artifacts=[artifact]))))
    answer = fake.client().complete(CHAT, episode_id="tok-12345678")
    assert (answer.parts, answer.parts_from) == (
        [{"kind": "data", "data": {"cmd": "ip route"}}],
        "artifact",
    )


@pytest.mark.usefixtures("toy_apps")
def test_the_episode_transcript_records_each_replys_parts(serve) -> None:
    app = registry.get_app("toy")
    server = serve(build_asgi_app(make_agent("heuristic", app), "a2a"))
    client = make_client("a2a", server.url, allowed_networks=LOOPBACK, timeout_s=10)
    result = run_episode(app, app.generate(1, seed=5)[0], client)
    said = [entry for entry in result.transcript if entry["role"] == "assistant"]
    assert len(said) == 2
    for entry in said:
        assert entry["parts"] == [{"kind": "text", "text": entry["content"]}]
        assert entry["parts_from"] in {"message", "artifact"}


def task(state: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": state}, **fields}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            task(
                "completed",
                artifacts=[
                    {"artifactId": "a", "parts": [{"kind": "text", "text": "old"}]},
                    {"artifactId": "b", "parts": [{"kind": "text", "text": "answer"}]},
                ],
                history=[text_message("from history")],
            ),
            "answer",
        ),
        (
            task(
                "completed",
                history=[
                    text_message("earlier"),
                    text_message("latest agent words"),
                    {"kind": "message", "messageId": "u", "role": "user", "parts": []},
                ],
            ),
            "latest agent words",
        ),
        (
            {
                **task("input-required"),
                "status": {"state": "input-required", "message": text_message("which node?")},
            },
            "which node?",
        ),
    ],
)
def test_a_task_reply_gives_its_answer(serve, result: dict[str, Any], expected: str) -> None:
    fake = FakeA2A(serve, reply(rpc_result(result)))
    assert fake.client().complete(CHAT, episode_id="tok-12345678").text == expected


@pytest.mark.parametrize("state", ["failed", "rejected", "canceled"])
def test_a_failed_task_is_a_bad_response_quoting_the_agent(serve, state: str) -> None:
    result = task(state)
    result["status"]["message"] = text_message("model quota exhausted")
    fake = FakeA2A(serve, reply(rpc_result(result)))
    with pytest.raises(AgentError) as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "bad_response"
    assert f"task ended {state}" in str(info.value)
    assert "model quota exhausted" in str(info.value)


def test_an_unfinished_task_is_a_bad_response(serve) -> None:
    fake = FakeA2A(serve, reply(rpc_result(task("working"))))
    with pytest.raises(AgentError, match="is 'working', not completed") as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "bad_response"


def test_a_json_rpc_error_is_a_bad_response_with_its_message(serve) -> None:
    error = {"jsonrpc": "2.0", "id": "1", "error": {"code": -32602, "message": "bad params!"}}
    fake = FakeA2A(serve, reply(error))
    with pytest.raises(AgentError) as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "bad_response"
    assert "JSON-RPC error -32602" in str(info.value) and "bad params!" in str(info.value)
    assert len(fake.posts) == 1  # an answer, even an error, is never retried


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        {"jsonrpc": "2.0", "id": "1"},
        rpc_result("just a string"),
        rpc_result({"kind": "status-update", "final": True}),
        rpc_result({"kind": "message", "role": "agent", "parts": "text"}),
        rpc_result({"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": 7}]}),
        rpc_result({"kind": "message", "role": "agent", "parts": []}),
        rpc_result(task("completed")),
        rpc_result({"kind": "task", "status": {"state": ["completed"]}}),
        rpc_result({"status": "done"}),
        {"jsonrpc": "2.0", "id": "1", "error": "nope"},
    ],
)
def test_hostile_or_malformed_replies_are_bad_responses(serve, payload: Any) -> None:
    fake = FakeA2A(serve, reply(payload))
    with pytest.raises(AgentError) as info:
        fake.client().complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "bad_response"


def test_an_oversized_reply_is_cut_off(serve) -> None:
    big = rpc_result(text_message("a" * 300_000))
    fake = FakeA2A(serve, reply(big))
    with pytest.raises(AgentError) as info:
        fake.client(max_response_bytes=100_000).complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "too_large"


def test_an_oversized_card_is_cut_off(serve) -> None:
    card = {"name": "x" * 300_000, "url": "{base}/rpc"}
    fake = FakeA2A(serve, reply(rpc_result(text_message("ok"))), card=card)
    with pytest.raises(AgentError) as info:
        fake.client(max_response_bytes=100_000).complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "too_large"
    assert fake.posts == []


def test_an_unreachable_agent_is_a_transport_failure_after_retries() -> None:
    client = A2AClient(
        f"http://127.0.0.1:{free_port()}", max_retries=2, backoff_s=0.01, allowed_networks=LOOPBACK
    )
    with pytest.raises(AgentError, match=r"agent card.*after 3 attempt") as info:
        client.complete(CHAT, episode_id="tok-12345678")
    assert info.value.category == "transport"


# -- the served reference agents ---------------------------------------------------------


@pytest.mark.usefixtures("toy_apps")
def test_served_card_is_at_both_paths_and_names_the_rpc_endpoint(serve) -> None:
    agent = make_agent("null", registry.get_app("toy"))
    server = serve(build_asgi_app(agent, "a2a"))
    for path in (CARD_PATH, LEGACY_CARD_PATH):
        card = httpx.get(server.url + path).json()
        assert card["url"] == server.url + "/"
        assert card["protocolVersion"] == "0.3.0" and card["preferredTransport"] == "JSONRPC"
        assert card["capabilities"]["streaming"] is False
        assert [s["id"] for s in card["skills"]] == ["toy-null"]
    proxied = serve(build_asgi_app(agent, "a2a", public_url="https://agents.example.org/a2a"))
    assert httpx.get(proxied.url + CARD_PATH).json()["url"] == "https://agents.example.org/a2a"


@pytest.mark.usefixtures("toy_apps")
def test_served_oracle_over_a2a_reads_the_vault(serve, tmp_path) -> None:
    app = registry.get_app("toy")
    vault = OracleVault(tmp_path / "vault")
    server = serve(build_asgi_app(make_agent("oracle", app, vault_dir=vault.directory), "a2a"))
    client = make_client("a2a", server.url, allowed_networks=LOOPBACK, timeout_s=10)
    results = [run_vaulted(app, q, client, vault) for q in app.generate(4, seed=21)]
    assert [(r.correct, r.safe, r.steps) for r in results] == [(True, True, 1)] * 4
    query = app.generate(1, seed=22)[0]
    unvaulted = run_episode(app, query, client)  # no vault entry: the agent's task fails
    assert not unvaulted.correct and unvaulted.failure == "agent:bad_response"
    assert "no oracle vault entry" in unvaulted.transcript[-1]["content"]


@pytest.mark.usefixtures("toy_apps")
def test_served_heuristic_sees_the_whole_chat_through_the_transcript(serve) -> None:
    app = registry.get_app("toy")
    server = serve(build_asgi_app(make_agent("heuristic", app), "a2a"))
    client = make_client("a2a", server.url, allowed_networks=LOOPBACK, timeout_s=10)
    results = [run_episode(app, q, client) for q in app.generate(3, seed=5)]
    assert [(r.correct, r.steps) for r in results] == [(True, 2)] * 3


@pytest.mark.usefixtures("toy_apps")
@pytest.mark.parametrize(
    ("body", "code", "request_id"),
    [
        (b"not json", -32700, None),
        (b"[]", -32600, None),
        (b'{"id": "q", "method": "message/send"}', -32600, "q"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "message/send"}', -32600, None),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "agent/dance"}', -32601, 4),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "message/stream"}', -32004, 5),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {"id": "t"}}', -32001, 6),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": {}}', -32602, 7),
        (
            b'{"jsonrpc": "2.0", "id": 8, "method": "message/send", "params": {"message": '
            b'{"role": "agent", "parts": [{"kind": "text", "text": "x"}]}}}',
            -32602,
            8,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 9, "method": "message/send", "params": {"message": '
            b'{"role": "user", "parts": [{"kind": "file", "file": {}}]}}}',
            -32602,
            9,
        ),
    ],
)
def test_malformed_json_rpc_requests_get_error_objects(serve, body, code, request_id) -> None:
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), "a2a"))
    response = httpx.post(server.url + "/", content=body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id
    assert answer["error"]["code"] == code and answer["error"]["message"]
    assert "result" not in answer


@pytest.mark.usefixtures("toy_apps")
def test_served_agent_answers_a_plain_a2a_message_with_an_agent_message(serve) -> None:
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), "a2a"))
    request = {
        "jsonrpc": "2.0",
        "id": "r-1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "u-1",
                "contextId": "ctx-9",
                "parts": [{"kind": "text", "text": "find the secret word"}],
            }
        },
    }
    answer = httpx.post(server.url + "/", json=request).json()
    assert answer["id"] == "r-1"
    result = answer["result"]
    assert result["kind"] == "message" and result["role"] == "agent"
    assert result["contextId"] == "ctx-9"
    assert result["parts"] == [{"kind": "text", "text": '{"action": "look"}'}]


# -- end to end: evaluate --protocol a2a -------------------------------------------------


@pytest.mark.integration
def test_evaluate_a2a_with_a_served_malt_oracle_is_fully_correct(tmp_path) -> None:
    vault = tmp_path / "vault"
    server = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "serve_agent",
            "--agent",
            "oracle",
            "--app",
            "malt",
            "--protocol",
            "a2a",
            "--port",
            "0",
            "--vault",
            str(vault),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"\(a2a\) at (http://127\.0\.0\.1:\d+)", line)
        assert match, line + (server.stderr.read() if server.stderr else "")
        out = tmp_path / "result.json"
        done = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "evaluate",
                "--agent-url",
                match.group(1),
                "--protocol",
                "a2a",
                "--apps",
                "malt",
                "--queries",
                "6",
                "--seed",
                "7",
                "--oracle-vault",
                str(vault),
                "--json",
                str(out),
                "--quiet",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    episodes = result["episodes"]
    assert len(episodes) == 6
    assert [(e["correct"], e["safe"], e["failure"]) for e in episodes] == [(True, True, None)] * 6
    assert result["summary"]["malt"]["all"]["correctness"]["value"] == 1.0
    assert result["agent"]["protocol"] == "a2a"
    assert result["agent"]["card"]["name"] == "netarena-oracle"
    assert list(vault.iterdir()) == []


# -- interoperability with the official a2a-sdk (what NetArena's harness uses) -------------
#
# NetArena's purple agents are a2a-sdk servers and its harness is an a2a-sdk client
# (a2a-sdk 0.3.22). These tests put our client in front of a real
# a2a-sdk server and a real a2a-sdk client in front of our reference server.


def require_sdk() -> None:
    """Skip (locally) or fail (CI) unless a2a-sdk with its server extra is importable."""
    with warnings.catch_warnings():  # a2a-sdk 0.3 uses a constant newer starlette deprecates
        warnings.simplefilter("ignore")
        try:
            import a2a.server.apps  # noqa: F401
        except ImportError:
            require(False, "a2a-sdk[http-server] is not installed (dev requirement)")


def sdk_purple_agent(mode: str) -> tuple[str, RunningServer]:
    """Serve an a2a-sdk agent that plays the toy app from the text it receives.

    ``mode``: ``message`` answers with an agent message (like NetArena's LiteLLM purple agent),
    ``task`` with a completed task carrying an artifact, ``fail`` with a failed task.
    Returns the base URL and the running server (the caller stops it).
    """
    require_sdk()
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.apps import A2AStarletteApplication
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TextPart
    from a2a.utils import new_agent_text_message, new_task

    class WordFinder(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            seen = re.findall(r"The secret word is (\w+)\.", context.get_user_input())
            answer = {"action": "say", "word": seen[-1]} if seen else {"action": "look"}
            text = json.dumps(answer)
            if mode == "message":
                await event_queue.enqueue_event(new_agent_text_message(text))
                return
            assert context.message is not None
            task = context.current_task or new_task(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            if mode == "fail":
                said = new_agent_text_message(
                    "upstream model unavailable", task.context_id, task.id
                )
                await updater.failed(said)
                return
            await updater.add_artifact([Part(root=TextPart(text=text))], name="answer")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise RuntimeError("the evaluator never cancels a task")

    port = free_port()
    card = AgentCard(
        name="purple",
        description="plays the toy app",
        url=f"http://127.0.0.1:{port}/",
        version="1.0.0",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="toy", name="toy", description="toy", tags=["toy"])],
    )
    handler = DefaultRequestHandler(agent_executor=WordFinder(), task_store=InMemoryTaskStore())
    asgi = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    server = serve_in_thread(asgi, port=port)
    return server.url, server


@pytest.mark.usefixtures("toy_apps")
@pytest.mark.parametrize("mode", ["message", "task"])
def test_our_client_plays_an_episode_against_an_a2a_sdk_agent(mode: str) -> None:
    url, server = sdk_purple_agent(mode)
    try:
        app = registry.get_app("toy")
        client = make_client("a2a", url, allowed_networks=LOOPBACK, timeout_s=10)
        results = [run_episode(app, q, client) for q in app.generate(3, seed=9)]
    finally:
        server.stop()
    assert [(r.correct, r.steps, r.failure) for r in results] == [(True, 2, None)] * 3
    assert client.describe()["card"]["name"] == "purple"


@pytest.mark.usefixtures("toy_apps")
def test_a_failed_a2a_sdk_task_fails_the_episode_cleanly() -> None:
    url, server = sdk_purple_agent("fail")
    try:
        app = registry.get_app("toy")
        client = make_client("a2a", url, allowed_networks=LOOPBACK, timeout_s=10)
        result = run_episode(app, app.generate(1, seed=9)[0], client)
    finally:
        server.stop()
    assert not result.correct and result.failure == "agent:bad_response"
    assert "task ended failed" in result.transcript[-1]["content"]
    assert "upstream model unavailable" in result.transcript[-1]["content"]


@pytest.mark.usefixtures("toy_apps")
def test_the_a2a_sdk_client_talks_to_our_served_agent(serve) -> None:
    require_sdk()
    import asyncio
    import uuid

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, TextPart

    server = serve(build_asgi_app(make_agent("heuristic", registry.get_app("toy")), "a2a"))

    async def ask(text: str) -> Any:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()
            # the reference harness's configuration: streaming requested, card says no
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
            message = Message(
                role=Role.user, parts=[Part(root=TextPart(text=text))], message_id=uuid.uuid4().hex
            )
            events = [event async for event in client.send_message(message)]
            return card, events[-1]

    card, last = asyncio.run(ask(render_transcript(CHAT)))
    assert card.name == "netarena-heuristic" and card.url == server.url + "/"
    assert isinstance(last, Message) and last.role == Role.agent
    assert [p.root.model_dump(exclude_none=True) for p in last.parts] == [
        {"kind": "text", "text": '{"action": "say", "word": "wren"}'}
    ]


@pytest.mark.usefixtures("toy_apps")
def test_an_oversized_request_gets_413_with_a_json_rpc_error(serve, monkeypatch) -> None:
    monkeypatch.setattr(server_module, "MAX_REQUEST_BYTES", 1000)
    server = serve(build_asgi_app(make_agent("null", registry.get_app("toy")), "a2a"))
    client = make_client("a2a", server.url, allowed_networks=LOOPBACK, timeout_s=10)
    with pytest.raises(AgentError, match="HTTP 413") as info:
        client.complete([{"role": "user", "content": "x" * 5000}], episode_id="tok-12345678")
    assert info.value.category == "http_status"
    assert "-32600" in str(info.value)
