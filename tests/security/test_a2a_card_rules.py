"""An A2A agent card's JSON-RPC endpoint obeys the registered URL's rules: the
address rules and the team agents' port set, in episodes and in the pre-flight alike."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evaluator.agents import AgentError
from evaluator.agents.a2a import CARD_PATH
from evaluator.agents.guard import OutboundGuard, RefusedAddressError
from evaluator.agents.preflight_checks import check_protocol
from evaluator.reference.server import serve_in_thread
from submissions.models import Agent, Team
from submissions.services import endpoints as endpoint_services

pytestmark = pytest.mark.django_db

CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def card_server():
    """An A2A agent on loopback whose card names ``rpc`` (``{base}``: the server's URL)."""
    state: dict[str, object] = {"rpc": "{base}/rpc", "posts": 0}

    async def card(request: Request) -> Response:
        text = json.dumps({"name": "fake", "url": state["rpc"]}).replace("{base}", server.url)
        return Response(text, media_type="application/json")

    async def rpc(request: Request) -> Response:
        state["posts"] = int(str(state["posts"])) + 1
        message = {"kind": "message", "role": "agent", "messageId": "m1"}
        message["parts"] = [{"kind": "text", "text": "ok"}]  # type: ignore[assignment]
        return JSONResponse({"jsonrpc": "2.0", "id": "1", "result": message})

    app = Starlette(routes=[Route(CARD_PATH, card), Route("/rpc", rpc, methods=["POST"])])
    server = serve_in_thread(app)
    try:
        yield server, state
    finally:
        server.stop()


@pytest.fixture
def team_agent(card_server, settings):
    """A team's a2a agent on the card server, which the operator's settings allow (loopback
    as in the demo, the server's port in the port set)."""
    server, _ = card_server
    port = int(server.url.rsplit(":", 1)[1])
    settings.NETARENA = {
        **settings.NETARENA,
        "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"],
        "AGENT_PORTS": frozenset({port}),
    }
    team = Team.objects.create(name="carders")
    return Agent.objects.create(team=team, name="a", endpoint_url=server.url, protocol="a2a")


def test_the_guard_refuses_a_port_outside_its_set() -> None:
    guard = OutboundGuard(allowed_ports={443, 8443})
    guard.check_syntax("https://93.184.215.14/act")
    guard.check_syntax("https://93.184.215.14:8443/act")
    with pytest.raises(RefusedAddressError, match="port 22 is not one of the allowed"):
        guard.check_syntax("https://93.184.215.14:22/act")
    OutboundGuard().check_syntax("https://93.184.215.14:22/act")  # no set: any port


def test_a_card_on_the_allowed_port_is_used(team_agent, card_server) -> None:
    client = endpoint_services.agent_client_build(agent=team_agent)
    assert client.complete(CHAT, episode_id="tok-12345678").text == "ok"
    assert card_server[1]["posts"] == 1


@pytest.mark.parametrize(
    ("rpc", "why"),
    [
        ("http://127.0.0.1:9/rpc", "port 9 is not one of the allowed agent ports"),
        ("http://10.1.2.3:{port}/rpc", "private"),  # an allowed port, a refused network
    ],
)
def test_a_card_pointing_elsewhere_is_refused_in_episodes_and_the_preflight(
    team_agent, card_server, rpc, why
) -> None:
    server, state = card_server
    state["rpc"] = rpc.replace("{port}", server.url.rsplit(":", 1)[1])
    client = endpoint_services.agent_client_build(agent=team_agent)
    with pytest.raises(AgentError) as refused:
        client.complete(CHAT, episode_id="tok-12345678")
    assert refused.value.category == "refused_address"
    assert "agent card" in str(refused.value) and why in str(refused.value)
    target = endpoint_services.agent_preflight_target(agent=team_agent, timeout_s=5)
    check = check_protocol(target)
    assert check.status == "failed" and why in check.message
    assert state["posts"] == 0


def test_reference_agents_keep_any_port(card_server, settings) -> None:
    _, state = card_server
    state["rpc"] = "http://127.0.0.1:9/rpc"
    team = Team.objects.create(name="refs")
    agent = Agent.objects.create(
        team=team, name="r", endpoint_url=card_server[0].url, protocol="a2a", reference_kind="null"
    )
    client = endpoint_services.agent_client_build(agent=agent)
    card = client.card  # type: ignore[attr-defined]
    assert card.rpc_url == state["rpc"]
