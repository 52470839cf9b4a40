"""The HTTP agent clients against real local servers: success, limits and every failure."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from evaluator.agents import (
    PROTOCOLS,
    AgentError,
    HttpJsonClient,
    OpenAIChatClient,
    make_client,
)
from evaluator.reference.server import RunningServer, serve_in_thread
from tests.evaluator.conftest import LOOPBACK, free_port

CHAT = [
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": "look"},
    {"role": "user", "content": "observation 1"},
]


class Recorder:
    """A starlette app whose single POST route answers with a configurable handler."""

    def __init__(self, handler) -> None:
        self.requests: list[dict] = []
        self.handler = handler

        async def endpoint(request: Request) -> Response:
            body = await request.body()
            self.requests.append(
                {"path": request.url.path, "headers": dict(request.headers), "body": body}
            )
            return await self.handler(request)

        self.app = Starlette(
            routes=[
                Route("/{path:path}", endpoint, methods=["POST"]),
            ]
        )


def reply_with(response_factory):
    async def handler(request: Request) -> Response:
        return response_factory()

    return handler


def test_http_json_request_shape_and_reply(serve) -> None:
    recorder = Recorder(reply_with(lambda: JSONResponse({"text": "the reply"})))
    server = serve(recorder.app)
    client = make_client("http-json", server.url + "/act", allowed_networks=LOOPBACK)
    reply = client.complete(CHAT, episode_id="tok-123456789")
    assert reply.text == "the reply"
    assert 0 < reply.latency_s < 5
    (request,) = recorder.requests
    assert request["path"] == "/act"
    assert request["headers"]["x-netarena-episode"] == "tok-123456789"
    assert json.loads(request["body"]) == {
        "prompt": "observation 1",
        "history": CHAT[:2],
        "episode_id": "tok-123456789",
    }


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/chat/completions"])
def test_openai_chat_request_shape_and_reply(serve, suffix: str) -> None:
    completion = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    recorder = Recorder(reply_with(lambda: JSONResponse(completion)))
    server = serve(recorder.app)
    client = make_client(
        "openai-chat",
        server.url + suffix,
        model="m-7b",
        api_key="sk-secret",
        allowed_networks=LOOPBACK,
    )
    assert client.complete(CHAT, episode_id="tok-abcdefgh").text == "hello"
    (request,) = recorder.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer sk-secret"
    assert request["headers"]["x-netarena-episode"] == "tok-abcdefgh"
    assert json.loads(request["body"]) == {"model": "m-7b", "messages": CHAT}
    assert "sk-secret" not in json.dumps(client.describe())


def test_openai_chat_accepts_content_parts(serve) -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    completion = {"choices": [{"message": {"role": "assistant", "content": parts}}]}
    server = serve(Recorder(reply_with(lambda: JSONResponse(completion))).app)
    client = OpenAIChatClient(server.url, allowed_networks=LOOPBACK)
    assert client.complete(CHAT, episode_id="tok-abcdefgh").text == "ab"


def test_make_client_validates_its_arguments() -> None:
    assert PROTOCOLS == ("openai-chat", "http-json", "a2a", "openai-tools")
    assert isinstance(make_client("http-json", "https://agent.example.org/"), HttpJsonClient)
    assert isinstance(make_client("openai-chat", "https://agent.example.org"), OpenAIChatClient)
    with pytest.raises(ValueError, match="unknown agent protocol"):
        make_client("a2a-v0", "https://agent.example.org")
    with pytest.raises(ValueError, match="scheme"):
        make_client("http-json", "file:///etc/passwd")
    with pytest.raises(ValueError, match="not an IP network"):
        make_client("http-json", "https://agent.example.org", allowed_networks=["nope"])


def test_describe_hides_credentials_in_the_url() -> None:
    client = make_client("http-json", "https://user:pw@agent.example.org/x?token=abc")
    assert client.describe()["url"] == "https://agent.example.org/x"


def test_loopback_is_refused_without_an_allow_list_and_nothing_is_sent(serve) -> None:
    recorder = Recorder(reply_with(lambda: JSONResponse({"text": "x"})))
    server = serve(recorder.app)
    client = make_client("http-json", server.url)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "refused_address"
    assert "loopback" in str(info.value)
    assert recorder.requests == []


def test_read_timeout_is_final_and_respects_the_deadline(serve) -> None:
    async def slow(request: Request) -> Response:
        await asyncio.sleep(2)
        return JSONResponse({"text": "late"})

    recorder = Recorder(slow)
    server = serve(recorder.app)
    client = HttpJsonClient(server.url, timeout_s=0.5, allowed_networks=LOOPBACK)
    started = time.monotonic()
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "timeout"
    assert time.monotonic() - started < 1.5
    assert client.last_attempts == 1
    assert len(recorder.requests) == 1


def test_slow_drip_body_hits_the_total_deadline(serve) -> None:
    async def drip() -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(100):
            await asyncio.sleep(0.1)
            yield b"a"
        yield b'"}'

    server = serve(Recorder(reply_with(lambda: StreamingResponse(drip()))).app)
    client = HttpJsonClient(server.url, timeout_s=1.0, allowed_networks=LOOPBACK)
    started = time.monotonic()
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "timeout"
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("mode", ["close", "reset"])
def test_dropped_connections_are_retried_then_fail_as_transport(raw_server, mode: str) -> None:
    server = raw_server(mode)
    client = HttpJsonClient(
        server.url, max_retries=2, backoff_s=0.01, timeout_s=5, allowed_networks=LOOPBACK
    )
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "transport"
    assert "after 3 attempt(s)" in str(info.value)
    deadline = time.monotonic() + 2
    while server.accepted < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.accepted == 3
    assert client.last_attempts == 3


def test_connection_refused_is_retried() -> None:
    client = HttpJsonClient(
        f"http://127.0.0.1:{free_port()}/",
        max_retries=3,
        backoff_s=0.01,
        allowed_networks=LOOPBACK,
    )
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "transport"
    assert client.last_attempts == 4


def test_a_retry_that_succeeds_returns_the_reply() -> None:
    port = free_port()
    client = HttpJsonClient(
        f"http://127.0.0.1:{port}/", max_retries=5, backoff_s=0.2, allowed_networks=LOOPBACK
    )
    app = Recorder(reply_with(lambda: JSONResponse({"text": "finally"}))).app
    started: list[RunningServer] = []

    def start_later() -> None:  # the agent comes up while the client is backing off
        time.sleep(0.3)
        started.append(serve_in_thread(app, port=port))

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        reply = client.complete(CHAT, episode_id="tok-abcdefgh")
    finally:
        thread.join()
        for server in started:
            server.stop()
    assert reply.text == "finally"
    assert client.last_attempts >= 2


@pytest.mark.parametrize("status", [500, 404, 429])
def test_http_errors_are_final_and_quote_the_body(serve, status: int) -> None:
    recorder = Recorder(reply_with(lambda: Response("model overloaded\x00", status_code=status)))
    server = serve(recorder.app)
    client = HttpJsonClient(server.url, max_retries=3, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "http_status"
    assert f"HTTP {status}" in str(info.value)
    assert "model overloaded\\x00" in str(info.value)
    assert len(recorder.requests) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>not json</html>", "not usable JSON"),
        (b"\xff\xfe\x00garbage", "not usable JSON"),
        (b'{"answer": "x"}', "'text'"),
        (b'{"text": 42}', "'text'"),
        (b"[1, 2]", "JSON object"),
        (b"[" * 500_000, "not usable JSON"),  # nesting deeper than the parser's recursion
    ],
)
def test_bad_http_json_bodies_are_bad_responses(serve, body: bytes, expected: str) -> None:
    recorder = Recorder(reply_with(lambda: Response(body, media_type="application/json")))
    server = serve(recorder.app)
    client = HttpJsonClient(server.url, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "bad_response"
    assert expected in str(info.value)
    assert len(recorder.requests) == 1


@pytest.mark.parametrize(
    "payload",
    [
        {"choices": []},
        {"choices": [{"message": {"content": None}}]},
        {"error": "quota"},
        {"choices": [{"message": {"content": 7}}]},
    ],
)
def test_bad_chat_completions_are_bad_responses(serve, payload: dict) -> None:
    server = serve(Recorder(reply_with(lambda: JSONResponse(payload))).app)
    client = OpenAIChatClient(server.url, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "bad_response"


def test_streamed_oversized_response_is_cut_off(serve) -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(10_000):  # 640 MB over 100 s if read to the end
            await asyncio.sleep(0.01)
            yield b"a" * 65_536

    server = serve(Recorder(reply_with(lambda: StreamingResponse(endless()))).app)
    client = HttpJsonClient(server.url, max_response_bytes=100_000, allowed_networks=LOOPBACK)
    started = time.monotonic()
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "too_large"
    assert "exceeded 100000 bytes" in str(info.value)
    assert time.monotonic() - started < 2


def test_declared_oversized_response_is_refused_before_reading(serve) -> None:
    big = json.dumps({"text": "a" * 200_000}).encode()
    server = serve(Recorder(reply_with(lambda: Response(big))).app)
    client = HttpJsonClient(server.url, max_response_bytes=100_000, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError, match="declares") as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "too_large"


def test_compressed_bomb_is_capped_after_decoding(serve) -> None:
    bomb = gzip.compress(json.dumps({"text": " " * 5_000_000}).encode())
    assert len(bomb) < 100_000
    server = serve(
        Recorder(reply_with(lambda: Response(bomb, headers={"content-encoding": "gzip"}))).app
    )
    client = HttpJsonClient(server.url, max_response_bytes=100_000, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "too_large"


def test_redirect_to_a_refused_address_is_reported_and_not_followed(serve) -> None:
    target = "http://169.254.169.254/latest/meta-data/iam"
    recorder = Recorder(reply_with(lambda: RedirectResponse(target, status_code=307)))
    server = serve(recorder.app)
    client = HttpJsonClient(server.url, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "refused_address"
    assert "metadata" in str(info.value)
    assert len(recorder.requests) == 1


def test_redirect_to_an_allowed_address_is_not_followed_either(serve) -> None:
    recorder = Recorder(reply_with(lambda: RedirectResponse("/elsewhere", status_code=302)))
    server = serve(recorder.app)
    client = HttpJsonClient(server.url, allowed_networks=LOOPBACK)
    with pytest.raises(AgentError) as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "http_status"
    assert "redirects are not followed" in str(info.value)
    assert [r["path"] for r in recorder.requests] == ["/"]


def test_unresolvable_host_fails_at_once_as_transport() -> None:
    client = HttpJsonClient("http://no-such-host.invalid/agent")
    with pytest.raises(AgentError, match="could not resolve") as info:
        client.complete(CHAT, episode_id="tok-abcdefgh")
    assert info.value.category == "transport"
    assert client.last_attempts == 1  # a DNS failure is not worth a retry


def test_openai_usage_and_model_are_recorded_and_the_clock_is_ours(serve) -> None:
    completion = {
        "model": "m-7b-2026-01",
        "choices": [{"message": {"role": "assistant", "content": "hello"}}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 35, "total_tokens": 1235},
        "latency_s": 0.0001,  # an agent claiming to be fast: never used
    }

    async def slow(request: Request) -> Response:
        await asyncio.sleep(0.3)
        return JSONResponse(completion)

    server = serve(Recorder(slow).app)
    client = OpenAIChatClient(server.url, allowed_networks=LOOPBACK)
    reply = client.complete(CHAT, episode_id="tok-abcdefgh")
    assert (reply.input_tokens, reply.output_tokens, reply.model) == (1200, 35, "m-7b-2026-01")
    assert reply.latency_s >= 0.3


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"usage": "lots", "model": 7},
        {"usage": {"input_tokens": -5, "output_tokens": True}, "model": "\x00\x07"},
        {"usage": {"input_tokens": 10**12, "output_tokens": 1.5}},
    ],
)
def test_missing_or_malformed_usage_is_not_reported_and_never_fails(serve, extra) -> None:
    server = serve(Recorder(reply_with(lambda: JSONResponse({"text": "ok", **extra}))).app)
    client = HttpJsonClient(server.url, allowed_networks=LOOPBACK)
    reply = client.complete(CHAT, episode_id="tok-abcdefgh")
    assert reply.text == "ok"
    assert (reply.input_tokens, reply.output_tokens, reply.model) == (None, None, None)


def test_http_json_usage_is_read_from_its_usage_object(serve) -> None:
    body = {"text": "ok", "usage": {"input_tokens": 9, "output_tokens": 4}, "model": "mine"}
    server = serve(Recorder(reply_with(lambda: JSONResponse(body))).app)
    reply = HttpJsonClient(server.url, allowed_networks=LOOPBACK).complete(CHAT, episode_id="t-1")
    assert (reply.input_tokens, reply.output_tokens, reply.model) == (9, 4, "mine")
