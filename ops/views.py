"""``/healthz`` (the process answers), ``/readyz`` (it can serve and work will be done) and
``/metrics`` (Prometheus text format). See docs/deploy.md."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django_prometheus.exports import ExportToDjangoView
from health_check.views import HealthCheckView

from ops.health import BrokerCheck, QueueWorkersCheck


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: 200 ``ok`` whenever this process can answer. Touches no database or broker,
    so an orchestrator restarts the process only when the process itself is stuck."""
    return HttpResponse("ok\n", content_type="text/plain; charset=utf-8")


class ReadyView(HealthCheckView):
    """Readiness: database, cache, broker, and a live worker for every queue
    (:mod:`ops.health`). 200 when all pass, 503 (not django-health-check's 500) otherwise, so
    that load balancers and orchestrators read it as "not ready" rather than "broken".
    Plain text by default; ``?format=json`` or ``Accept: application/json`` for JSON."""

    checks = (
        "health_check.checks.Database",
        "health_check.checks.Cache",
        BrokerCheck,
        QueueWorkersCheck,
    )

    async def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if "format" not in request.GET and "json" not in request.headers.get("accept", ""):
            mutable = request.GET.copy()
            mutable["format"] = "text"
            request.GET = mutable  # type: ignore[assignment]
        response: HttpResponse = await super().get(request, *args, **kwargs)
        if response.status_code == 500:
            response.status_code = 503
        return response


def metrics_allowed(remote_addr: str) -> bool:
    """True when ``remote_addr`` is in ``NETARENA_METRICS_NETWORKS`` (CIDRs; default loopback
    and the private ranges of RFC 1918 and RFC 4193, where a Prometheus server lives)."""
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(cidr, strict=False)
        for cidr in settings.NETARENA_METRICS_NETWORKS
    )


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics (django-prometheus's and :mod:`ops.metrics`), for scrapers on
    ``NETARENA_METRICS_NETWORKS`` only; 404 to anyone else (the figures are operational,
    not public). A TLS proxy in front must not forward ``/metrics``."""
    if not metrics_allowed(request.META.get("REMOTE_ADDR", "")):
        raise Http404
    response: HttpResponse = ExportToDjangoView(request)
    return response
