"""API throttle counters are shared by every web process when NETARENA_CACHE_URL names a Redis
database (gunicorn runs several workers; a per-process cache would grant each the full rate)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
#: One throttle check in a fresh process: prints True (allowed) or False (throttled).
CHECK = """
import django
django.setup()
from django.core.cache import caches
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory
from submissions.throttling import AnonRateThrottle
request = Request(APIRequestFactory().get("/api/v1/rounds/", REMOTE_ADDR="203.0.113.7"))
print(type(caches["default"]).__name__, AnonRateThrottle().allow_request(request, None))
"""


def _redis_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    require(url.startswith("redis://"), "needs Redis (CELERY_BROKER_URL, scripts/test.sh)")
    return url.rsplit("/", 1)[0] + "/1"


def _checks(count: int, **extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETARENA_CACHE_")}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", "NETARENA_API_ANON_RATE": "3/min"}
    env |= extra
    return [
        subprocess.run(
            [sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
            check=True, timeout=60,
        ).stdout.strip()
        for _ in range(count)
    ]


@pytest.mark.integration
def test_separate_processes_share_the_rate_through_redis() -> None:
    prefix = f"throttle-test-{uuid.uuid4().hex}"
    shared = _checks(4, NETARENA_CACHE_URL=_redis_url(), NETARENA_CACHE_KEY_PREFIX=prefix)
    assert shared == ["RedisCache True"] * 3 + ["RedisCache False"]


def test_without_a_cache_url_each_process_counts_alone() -> None:
    """The default (one process, e.g. runserver or a test): a local-memory cache."""
    assert _checks(4) == ["LocMemCache True"] * 4
