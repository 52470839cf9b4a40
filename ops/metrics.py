"""Platform metrics for Prometheus, computed from the database and the broker at scrape time.

django-prometheus exports the site's own request, database and cache metrics; this collector
adds what only the platform knows. Figures come from stored rows (not from in-process
counters), so every web process reports the same values whichever worker did the work.

==========================================  =====  ================================================
name                                        type   meaning
==========================================  =====  ================================================
``netarena_queue_depth``                    gauge  tasks waiting in a Celery queue (label ``queue``)
``netarena_episodes_per_minute``            gauge  episodes finished per minute over the last
                                                   :data:`RATE_WINDOW_S` seconds (label ``app``)
``netarena_infrastructure_failures_total``  gauge  episodes closed as infrastructure failures,
                                                   all time (labels ``app``, ``cause``)
``netarena_submission_wait_seconds``        gauge  median seconds from a submission's creation
                                                   to its start, over the last
                                                   :data:`WAIT_SAMPLE` started submissions
``netarena_submissions``                    gauge  submissions by status (label ``status``)
``netarena_episodes_open``                  gauge  episodes pending or running (label ``app``)
==========================================  =====  ================================================

``cause`` is the kind of the stored infrastructure error (``details.error_kind``, e.g.
``EmulatorError``, ``expired``).
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

#: Window of ``netarena_episodes_per_minute``, in seconds.
RATE_WINDOW_S = 300
#: How many of the most recently started submissions ``netarena_submission_wait_seconds`` uses.
WAIT_SAMPLE = 50

_registered = False
_lock = threading.Lock()


def queue_depths() -> dict[str, int]:
    """Waiting tasks per platform queue, read from the Redis broker (``LLEN`` of the queue's
    list, as kombu's Redis transport stores it). Empty when the broker cannot be reached."""
    from celery import current_app

    from ops.health import platform_queues

    depths: dict[str, int] = {}
    try:
        with current_app.connection_for_read() as connection:
            client = connection.default_channel.client
            for queue in platform_queues():
                depths[queue] = int(client.llen(queue))
    except Exception as exc:  # noqa: BLE001 - broker down or not Redis: report no depth rather than fail
        logger.warning("queue depth unavailable: %s", exc)
        return {}
    return depths


class PlatformCollector(Collector):
    """Prometheus collector of the platform figures listed in this module's docstring."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without samples: lets the registry check names without a query
        (prometheus_client calls ``describe`` at registration instead of ``collect``)."""
        for name, labels in (
            ("netarena_queue_depth", ["queue"]),
            ("netarena_episodes_per_minute", ["app"]),
            ("netarena_infrastructure_failures_total", ["app", "cause"]),
            ("netarena_submission_wait_seconds", []),
            ("netarena_submissions", ["status"]),
            ("netarena_episodes_open", ["app"]),
        ):
            yield GaugeMetricFamily(name, name, labels=labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield one metric family per figure; a failing source is logged and left out."""
        yield from self._queue_depth()
        try:
            yield from self._from_database()
        except Exception as exc:  # noqa: BLE001 - a scrape must never take the site down
            logger.warning("platform metrics unavailable: %s", exc)

    def _queue_depth(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "netarena_queue_depth", "Tasks waiting in a Celery queue", labels=["queue"]
        )
        for queue, depth in sorted(queue_depths().items()):
            family.add_metric([queue], depth)
        yield family

    def _from_database(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count
        from django.utils import timezone

        from submissions.models import EpisodeRecord, Submission

        now = timezone.now()
        rate = GaugeMetricFamily(
            "netarena_episodes_per_minute",
            f"Episodes finished per minute over the last {RATE_WINDOW_S} s",
            labels=["app"],
        )
        recent = (
            EpisodeRecord.objects.filter(
                status=EpisodeRecord.Status.DONE,
                finished_at__gte=now - timedelta(seconds=RATE_WINDOW_S),
            )
            .values("app_id")
            .annotate(n=Count("id"))
        )
        for row in recent:
            rate.add_metric([row["app_id"]], row["n"] * 60.0 / RATE_WINDOW_S)
        yield rate

        failures = GaugeMetricFamily(
            "netarena_infrastructure_failures_total",
            "Episodes closed as infrastructure failures, by app and cause",
            labels=["app", "cause"],
        )
        counts: dict[tuple[str, str], int] = {}
        for app_id, details in EpisodeRecord.objects.filter(
            status=EpisodeRecord.Status.ERROR
        ).values_list("app_id", "details"):
            cause = str((details or {}).get("error_kind") or "error")
            counts[(app_id, cause)] = counts.get((app_id, cause), 0) + 1
        for (app_id, cause), count in sorted(counts.items()):
            failures.add_metric([app_id, cause], count)
        yield failures

        wait = GaugeMetricFamily(
            "netarena_submission_wait_seconds",
            f"Median seconds from creation to start of the last {WAIT_SAMPLE} started submissions",
        )
        started = Submission.objects.filter(started_at__isnull=False).order_by("-started_at")
        waits = [
            (s.started_at - s.created_at).total_seconds()
            for s in started.only("created_at", "started_at")[:WAIT_SAMPLE]
            if s.started_at is not None
        ]
        if waits:
            wait.add_metric([], statistics.median(waits))
        yield wait

        by_status = GaugeMetricFamily(
            "netarena_submissions", "Submissions by status", labels=["status"]
        )
        status_counts: dict[Any, int] = {
            row["status"]: row["n"]
            for row in Submission.objects.values("status").annotate(n=Count("id"))
        }
        for status in Submission.Status.values:
            by_status.add_metric([status], status_counts.get(status, 0))
        yield by_status

        open_episodes = GaugeMetricFamily(
            "netarena_episodes_open", "Episodes pending or running", labels=["app"]
        )
        for row in (
            EpisodeRecord.objects.filter(
                status__in=[EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING]
            )
            .values("app_id")
            .annotate(n=Count("id"))
        ):
            open_episodes.add_metric([row["app_id"]], row["n"])
        yield open_episodes


def register_platform_collector() -> None:
    """Register :class:`PlatformCollector` with prometheus_client's default registry, once."""
    global _registered
    with _lock:
        if not _registered:
            REGISTRY.register(PlatformCollector())
            _registered = True
