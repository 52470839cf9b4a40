"""The outbound guard: every refusal class, the allow-list, and address pinning."""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evaluator.agents.guard import (
    LOOPBACK_NETWORKS,
    GuardedTransport,
    IPAddress,
    OutboundGuard,
    RefusedAddressError,
    ResolveError,
)

REFUSED = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.8.9.10:8080/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://10.1.2.3/", "private"),
    ("http://172.16.0.5/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://100.64.0.1/", "not a public address"),  # RFC 6598 carrier-grade NAT
    ("http://169.254.10.20/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://[fd12:3456::1]/", "private"),  # RFC 4193 unique local
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://192.0.2.10/", "private"),  # documentation range TEST-NET-1
    ("http://[::ffff:127.0.0.1]/", "embedding 127.0.0.1"),
    ("http://[64:ff9b::a9fe:a9fe]/", "embedding 169.254.169.254"),  # NAT64 of metadata
    ("http://[2002:c0a8:101::1]/", "embedding 192.168.1.1"),  # 6to4 of a private address
]


@pytest.mark.parametrize(("url", "reason"), REFUSED)
def test_non_public_addresses_are_refused(url: str, reason: str) -> None:
    with pytest.raises(RefusedAddressError) as info:
        OutboundGuard().check_url(url)
    assert reason in str(info.value)
    assert "refused" in str(info.value)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://8.8.8.8/", "gopher://8.8.8.8/", "8.8.8.8:80", "http://"]
)
def test_only_http_urls_with_a_host_are_accepted(url: str) -> None:
    with pytest.raises(RefusedAddressError):
        OutboundGuard().check_url(url)


def test_public_addresses_pass_and_are_pinned() -> None:
    target = OutboundGuard().check_url("https://8.8.8.8:8443/v1")
    assert target.address == ipaddress.ip_address("8.8.8.8")
    assert OutboundGuard().check_url("http://[2001:4860:4860::8888]/").address.version == 6


def test_allow_list_admits_only_its_networks() -> None:
    guard = OutboundGuard(LOOPBACK_NETWORKS)
    assert guard.check_url("http://127.0.0.1:9000/").address == ipaddress.ip_address("127.0.0.1")
    assert guard.check_url("http://[::1]:9000/").address == ipaddress.ip_address("::1")
    with pytest.raises(RefusedAddressError, match="allowed networks: 127.0.0.0/8, ::1/128"):
        guard.check_url("http://10.0.0.1/")


def test_metadata_stays_refused_even_inside_an_allowed_network() -> None:
    guard = OutboundGuard(["169.254.0.0/16", "fd00::/8"])
    assert guard.check_url("http://169.254.1.1/").address == ipaddress.ip_address("169.254.1.1")
    for url in ("http://169.254.169.254/", "http://[fd00:ec2::254]/"):
        with pytest.raises(RefusedAddressError, match="always refused"):
            guard.check_url(url)


def test_bad_allow_list_entry_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not an IP network"):
        OutboundGuard(["localhost"])


def test_names_are_resolved_and_every_address_checked() -> None:
    class TwoAnswers(OutboundGuard):
        def resolve(self, host: str, port: int) -> list[IPAddress]:
            return [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("10.0.0.7")]

    with pytest.raises(RefusedAddressError, match="agent.example -> 10.0.0.7 is a private"):
        TwoAnswers().check_url("http://agent.example/")


def test_localhost_by_name_is_refused() -> None:
    with pytest.raises(RefusedAddressError, match="loopback"):
        OutboundGuard().check_url("http://localhost:8000/")


def test_unresolvable_name_is_a_resolve_error() -> None:
    with pytest.raises(ResolveError):
        OutboundGuard().check_url("http://no-such-host.invalid/")


def test_transport_connects_to_the_checked_address_and_keeps_the_host_header(serve) -> None:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"host": request.headers.get("host")})

    server = serve(Starlette(routes=[Route("/echo", echo)]))
    calls: list[str] = []

    class Pinned(OutboundGuard):
        """Resolves the made-up name once to loopback; httpx itself could not resolve it."""

        def resolve(self, host: str, port: int) -> list[IPAddress]:
            calls.append(host)
            return [ipaddress.ip_address("127.0.0.1")]

    guard = Pinned(LOOPBACK_NETWORKS)
    with httpx.Client(transport=guard.transport(), trust_env=False) as client:
        response = client.get(f"http://agent.test:{server.port}/echo")
    assert response.json() == {"host": f"agent.test:{server.port}"}
    assert calls == ["agent.test"]


def test_https_requests_carry_the_original_name_for_sni() -> None:
    seen: list[httpx.Request] = []

    def inner(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    transport = GuardedTransport(OutboundGuard(), httpx.MockTransport(inner))

    class Fixed(OutboundGuard):
        def resolve(self, host: str, port: int) -> list[IPAddress]:
            return [ipaddress.ip_address("93.184.215.14")]

    transport.guard = Fixed()
    with httpx.Client(transport=transport) as client:
        client.post("https://agent.example.org/v1/chat/completions", json={})
    (request,) = seen
    assert request.url.host == "93.184.215.14"
    assert request.headers["host"] == "agent.example.org"
    assert request.extensions["sni_hostname"] == "agent.example.org"
