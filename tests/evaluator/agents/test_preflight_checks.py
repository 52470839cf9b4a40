"""The pre-flight probes (``evaluator.agents.preflight_checks``) against real local servers, without
Django: each check's verdict and message for a working, a silent, a redirecting and a wrong
endpoint, and the guard's refusal when loopback is not allowed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from evaluator.agents import preflight_checks
from evaluator.agents.preflight_checks import Check, PreflightTarget
from evaluator.testing import GuessApp
from tests.evaluator.conftest import LOOPBACK, RawServer

ROOT = Path(__file__).resolve().parents[3]
#: A link-local (cloud metadata) address: the guard refuses it even with loopback allowed.
METADATA_URL = "http://169.254.169.254/latest"


def _agent_app(reply: str = "7", *, models: bool = True) -> tuple[Starlette, list[dict]]:
    """An endpoint that speaks http-json (``POST /act``) and lists OpenAI models
    (``GET /v1/models``); it records every request's path and headers."""
    seen: list[dict] = []

    async def act(request: Request) -> Response:
        seen.append({"path": request.url.path, "headers": dict(request.headers)})
        if request.method == "GET":
            return PlainTextResponse("hello")
        body = json.loads(await request.body())
        seen[-1]["body"] = body
        return JSONResponse({"text": reply})

    async def list_models(request: Request) -> Response:
        seen.append({"path": request.url.path, "headers": dict(request.headers)})
        if not models:
            return PlainTextResponse("not here", status_code=404)
        return JSONResponse({"object": "list", "data": [{"id": "m-1"}, {"id": "m-2"}]})

    app = Starlette(
        routes=[
            Route("/act", act, methods=["GET", "POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/moved", lambda r: RedirectResponse(METADATA_URL), methods=["GET"]),
        ]
    )
    return app, seen


def _target(url: str, protocol: str = "http-json", **options: object) -> PreflightTarget:
    return PreflightTarget(url=url, protocol=protocol, allowed_networks=LOOPBACK, **options)  # type: ignore[arg-type]


def test_reachable_and_http_json_protocol_pass_and_send_the_key(serve) -> None:
    app, seen = _agent_app()
    server = serve(app)
    target = _target(server.url + "/act", auth_headers={"X-API-Key": "sk-probe"})
    reach = preflight_checks.check_reachable(target)
    assert (reach.name, reach.status) == ("reachable", "passed")
    assert reach.message.startswith("answered HTTP 200 in ") and reach.latency_s is not None
    protocol = preflight_checks.check_protocol(target)
    assert protocol.status == "passed"
    assert protocol.message.startswith('http-json: POST answered {"text": ...}')
    assert seen[-1]["body"]["prompt"] == "pre-flight: reply with any text"
    assert all(r["headers"]["x-api-key"] == "sk-probe" for r in seen)
    assert all("authorization" not in r["headers"] for r in seen)


def test_openai_protocol_reads_the_model_list_with_a_bearer_key(serve) -> None:
    app, seen = _agent_app()
    server = serve(app)
    target = _target(server.url, "openai-chat", model_name="m-9", api_key="sk-bearer")
    check = preflight_checks.check_protocol(target)
    assert check.status == "passed"
    assert check.message == (
        "openai-chat: /v1/models lists 2 model(s): m-1, m-2; note: 'm-9' is not among them"
    )
    assert seen[-1]["path"] == "/v1/models"
    assert seen[-1]["headers"]["authorization"] == "Bearer sk-bearer"


def test_openai_protocol_without_a_model_list_fails(serve) -> None:
    app, _ = _agent_app(models=False)
    server = serve(app)
    check = preflight_checks.check_protocol(_target(server.url, "openai-tools"))
    assert check.status == "failed"
    assert check.message.startswith("GET /v1/models answered HTTP 404 without an OpenAI model")


def test_a_redirect_fails_reachability_and_names_the_refused_target(serve) -> None:
    app, _ = _agent_app()
    server = serve(app)
    check = preflight_checks.check_reachable(
        PreflightTarget(url=server.url + "/moved", protocol="http-json", allowed_networks=LOOPBACK)
    )
    assert check.status == "failed"
    assert check.message == (
        f"answered HTTP 307 redirecting to {METADATA_URL!r}, an address the outbound guard "
        "refuses; agent calls never follow redirects: register the final URL"
    )


def test_loopback_is_refused_unless_allowed(serve) -> None:
    app, seen = _agent_app()
    server = serve(app)
    check = preflight_checks.check_reachable(
        PreflightTarget(url=server.url + "/act", protocol="http-json")
    )
    assert (check.status, check.message) == ("failed", "the outbound guard refused the address")
    assert seen == []  # nothing reached the endpoint
    assert preflight_checks.address_kind(server.url, LOOPBACK) == "a loopback address"


def test_a_silent_endpoint_fails_within_the_probe_deadline() -> None:
    raw = RawServer("close")
    try:
        check = preflight_checks.check_reachable(_target(raw.url, timeout_s=2.0))
    finally:
        raw.stop()
    assert check.status == "failed"
    assert check.message.startswith("connection failed: ")


def test_canary_passes_a_parsable_answer_and_fails_an_empty_one(serve) -> None:
    app = GuessApp()
    query = app.generate(1, 5)[0]
    good = serve(_agent_app("7")[0])
    passed = preflight_checks.check_canary(
        _target(good.url + "/act"), app, query, episode_id="tok-1"
    )
    assert (passed.name, passed.title, passed.status) == (
        "canary:guess",
        "Canary prompt (guess)",
        "passed",
    )
    assert passed.message.startswith("the guess reply parser accepted the answer (command)")
    empty = serve(_agent_app("  ")[0])
    failed = preflight_checks.check_canary(
        _target(empty.url + "/act"), app, query, episode_id="tok-2"
    )
    assert failed.status == "failed"
    assert failed.message.startswith("the guess reply parser refused the answer: the reply is")


def test_canary_on_a_malformed_url_fails_as_misconfigured() -> None:
    app = GuessApp()
    check = preflight_checks.check_canary(
        _target("ftp://example.org/act"), app, app.generate(1, 5)[0], episode_id="tok-3"
    )
    assert check.status == "failed"
    assert check.message.startswith("the endpoint is misconfigured: ")


def test_latency_reports_the_slowest_and_median_canary() -> None:
    canaries = [
        Check("canary:a", "A", "passed", "", 0.5),
        Check("canary:b", "B", "failed", "", 2.0),
        Check("canary:c", "C", "passed", "", 1.0),
    ]
    check = preflight_checks.check_latency(canaries, reply_timeout_s=60)
    assert check.status == "passed" and check.latency_s == 2.0
    assert check.message == (
        "slowest canary reply 2.00 s, median 1.00 s (an episode allows 60 s per reply)"
    )
    none = preflight_checks.check_latency(
        [Check("canary:a", "A", "failed", "")], reply_timeout_s=60
    )
    assert none.status == "skipped"


def test_skipped_checks_carry_their_titles() -> None:
    skipped = list(preflight_checks.skipped_checks(["protocol", "canary:k8s"], "it is down"))
    assert [(c.title, c.status, c.message) for c in skipped] == [
        ("Protocol", "skipped", "not run: it is down"),
        ("Canary prompt (k8s)", "skipped", "not run: it is down"),
    ]


def test_preflight_checks_import_no_django() -> None:
    code = (
        "import sys, evaluator.agents.preflight_checks\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
