"""The outbound-call guard: every request the evaluator sends to an agent goes through here.

Agents are untrusted (docs/architecture.md §8) and their endpoint URLs are chosen by the teams,
so an endpoint could point the evaluator at the deployment's own services (server-side request
forgery). The guard, in order:

1. accepts only ``http`` and ``https`` URLs with a host name (and, when the guard is given a
   port set, a port from it: a team agent's ``NETARENA_AGENT_PORTS``);
2. resolves the host **once** per request (literal addresses are not resolved);
3. refuses the request if *any* resolved address is not a public unicast address — loopback,
   private (RFC 1918, RFC 4193 ULA), carrier-grade NAT (RFC 6598), link-local (RFC 3927,
   RFC 4291), multicast, reserved, unspecified, documentation ranges, and the cloud metadata
   endpoints ``169.254.169.254`` / ``fd00:ec2::254`` — unless the address lies inside a
   configured allow-list of networks (e.g. ``["127.0.0.0/8"]`` for local development, tests
   and the demo). IPv6 addresses that embed an IPv4 address (IPv4-mapped, 6to4, NAT64
   ``64:ff9b::/96``, Teredo) are judged by the embedded address as well;
4. connects to exactly the address that was checked (the URL host is replaced by the address,
   while the ``Host`` header and the TLS SNI / certificate check keep the original name), so a
   second DNS answer cannot redirect the connection (no DNS rebinding);
5. ignores proxy environment variables (a proxy would connect elsewhere).

Redirects are never followed by the clients; :meth:`OutboundGuard.check_url` tells them
whether a redirect target would have been refused so the error message can say so. The total
deadline and the response size cap are applied by the clients (``evaluator/agents/_http.py``).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance-metadata endpoints (AWS, GCP, Azure, OpenStack use the IPv4 one; AWS Nitro
#: also answers on the IPv6 one). Always refused, even when an allow-listed network covers them.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)

#: NAT64 well-known prefix (RFC 6052): the low 32 bits are an IPv4 address.
_NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")

#: Allow-list for local development, tests and the demo: IPv4 and IPv6 loopback.
LOOPBACK_NETWORKS: tuple[str, ...] = ("127.0.0.0/8", "::1/128")

_ALLOWED_SCHEMES = ("http", "https")


class RefusedAddressError(Exception):
    """The guard refused a URL: bad scheme, no host, or a non-public resolved address."""


class ResolveError(Exception):
    """The host name of a URL could not be resolved (DNS failure or resolver timeout)."""


def parse_networks(networks: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse CIDR strings (``"127.0.0.0/8"``, ``"::1/128"``, ``"10.1.2.3"``) into networks.

    Raises:
        ValueError: a string is not a network (the message names it).
    """
    parsed: list[IPNetwork] = []
    for text in networks:
        try:
            parsed.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"not an IP network: {text!r} ({exc})") from None
    return tuple(parsed)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64_PREFIX:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_problem(address: IPAddress) -> str | None:
    """Return why ``address`` is not a public unicast address, or ``None`` when it is.

    The reasons are the address classes of the ``ipaddress`` module (IANA special-purpose
    registries, RFC 6890) plus the cloud metadata endpoints.
    """
    if address in METADATA_ADDRESSES:
        return "a cloud metadata endpoint"
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            problem = address_problem(inner)
            if problem is not None:
                return f"an IPv6 address embedding {inner}, {problem}"
    checks = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
    )
    for flag, name in checks:
        if flag:
            return f"a {name} address"
    if not address.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True)
class CheckedTarget:
    """A URL that passed the guard: ``address`` is the IP to connect to for ``host``."""

    url: httpx.URL
    host: str
    address: IPAddress


class OutboundGuard:
    """Decides which addresses the evaluator may connect to, and pins connections to them.

    Args:
        allowed_networks: CIDR strings whose addresses are allowed even though they are not
            public (e.g. ``LOOPBACK_NETWORKS``). Metadata endpoints stay refused regardless.
        resolve_timeout_s: upper bound on one DNS resolution, in seconds.
        allowed_ports: the TCP ports a URL may use (its explicit port, or 80/443 by scheme);
            None (the default) allows any. The site passes a team agent's port set
            (``NETARENA_AGENT_PORTS``), so every request of its client obeys it, including
            the JSON-RPC endpoint an A2A agent card names.

    Raises:
        ValueError: an allow-list entry is not a network.
    """

    def __init__(
        self,
        allowed_networks: Sequence[str] = (),
        *,
        resolve_timeout_s: float = 5.0,
        allowed_ports: Collection[int] | None = None,
    ):
        self.allowed_networks = parse_networks(allowed_networks)
        self.resolve_timeout_s = resolve_timeout_s
        self.allowed_ports = None if allowed_ports is None else frozenset(allowed_ports)

    def is_allowed(self, address: IPAddress) -> tuple[bool, str]:
        """Return ``(allowed, reason)`` for one address; ``reason`` explains a refusal."""
        if address in METADATA_ADDRESSES:
            return False, f"{address} is a cloud metadata endpoint (always refused)"
        problem = address_problem(address)
        if problem is None:
            return True, ""
        if any(address in net for net in self.allowed_networks if net.version == address.version):
            return True, ""
        allowed = ", ".join(str(n) for n in self.allowed_networks) or "none"
        return False, f"{address} is {problem} (allowed networks: {allowed})"

    def check_syntax(self, url: str | httpx.URL) -> httpx.URL:
        """Check scheme, host and port of ``url`` without resolving it.

        Raises:
            RefusedAddressError: not an http(s) URL, no host, or a port outside
                ``allowed_ports``.
        """
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise RefusedAddressError(f"invalid URL {str(url)!r}: {exc}") from None
        if parsed.scheme not in _ALLOWED_SCHEMES:
            raise RefusedAddressError(
                f"refused URL {str(url)!r}: scheme {parsed.scheme or '(none)'!r} is not http/https"
            )
        if not parsed.host:
            raise RefusedAddressError(f"refused URL {str(url)!r}: it has no host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if self.allowed_ports is not None and port not in self.allowed_ports:
            shown = parsed.copy_with(query=None, fragment=None)
            allowed = ", ".join(str(p) for p in sorted(self.allowed_ports)) or "none"
            raise RefusedAddressError(
                f"refused {shown}: port {port} is not one of the allowed agent ports ({allowed})"
            )
        return parsed

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Resolve ``host`` to its addresses (a literal address resolves to itself).

        Raises:
            ResolveError: DNS failure or no answer within ``resolve_timeout_s``.
        """
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        executor = ThreadPoolExecutor(max_workers=1)
        future = executor.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
        try:
            infos = future.result(timeout=self.resolve_timeout_s)
        except FutureTimeoutError:
            raise ResolveError(
                f"could not resolve {host!r} within {self.resolve_timeout_s:g} s"
            ) from None
        except (OSError, UnicodeError) as exc:
            raise ResolveError(f"could not resolve {host!r}: {exc}") from None
        finally:
            executor.shutdown(wait=False)
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise ResolveError(f"{host!r} resolved to no address")
        return addresses

    def check_url(self, url: str | httpx.URL) -> CheckedTarget:
        """Check ``url`` completely: syntax, then every resolved address.

        Returns the target pinned to the first resolved address.

        Raises:
            RefusedAddressError: bad URL or a refused address (the message says which and why).
            ResolveError: the host could not be resolved.
        """
        parsed = self.check_syntax(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        addresses = self.resolve(parsed.host, port)
        for address in addresses:
            allowed, reason = self.is_allowed(address)
            if not allowed:
                shown = parsed.copy_with(query=None, fragment=None)
                via = "" if parsed.host == str(address) else f"{parsed.host} -> "
                raise RefusedAddressError(f"refused {shown}: {via}{reason}")
        return CheckedTarget(url=parsed, host=parsed.host, address=addresses[0])

    def transport(self, *, verify: ssl.SSLContext | bool = True) -> GuardedTransport:
        """Return an httpx transport that checks and pins every request through this guard.

        ``verify`` is httpx's TLS verification setting (an ``ssl.SSLContext`` for a private CA).
        """
        return GuardedTransport(self, httpx.HTTPTransport(verify=verify))


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that sends each request to the guard-checked address only.

    The request URL's host is replaced by the checked IP; the original ``Host`` header is kept
    and, for https, the original name is used for SNI and certificate verification (httpcore's
    ``sni_hostname`` request extension).

    Raises (from ``handle_request``):
        RefusedAddressError, ResolveError: as :meth:`OutboundGuard.check_url`.
    """

    def __init__(self, guard: OutboundGuard, inner: httpx.BaseTransport) -> None:
        self.guard = guard
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.guard.check_url(request.url)
        pinned_url = request.url.copy_with(host=str(target.address))
        extensions = dict(request.extensions)
        if request.url.scheme == "https":
            extensions["sni_hostname"] = target.host
        pinned = httpx.Request(
            request.method,
            pinned_url,
            headers=request.headers,  # carries the original Host header
            stream=request.stream,
            extensions=extensions,
        )
        return self.inner.handle_request(pinned)

    def close(self) -> None:
        self.inner.close()
