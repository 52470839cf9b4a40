"""The counters and timings of one reset pool (:class:`ResetStats`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: Timing samples kept per figure in :class:`ResetStats` (the newest).
SAMPLES_KEPT = 1000
#: Failure texts kept in :attr:`ResetStats.failures` (the newest).
FAILURES_KEPT = 20


@dataclass
class ResetStats:
    """Counters (monotonic over the pool's life) and timings of one pool.

    Attributes:
        built: environments built (first builds, rebuilds, background spares).
        leased: leases handed out; reused: those served by an idle, verified environment.
        restored: releases whose restore verified (kept, or destroyed as surplus).
        rebuilds: releases whose restore did not verify: discarded, so a later lease
            builds a new one.
        stale: idle environments discarded at lease time (changed while idle).
        drained: idle environments destroyed for lack of demand (``idle_s``).
        destroyed: environments destroyed for any reason (failed, surplus, stale, drained,
            shut down).
        build_s, acquire_s, detach_s, restore_s, verify_s: seconds per build, per
            :meth:`ResetPool.acquire` call (waiting included), per detach, restore and
            verification (the newest :data:`SAMPLES_KEPT` each).
        failures: the newest :data:`FAILURES_KEPT` reasons (``"<environment>: <what>"``).
    """

    built: int = 0
    leased: int = 0
    reused: int = 0
    restored: int = 0
    rebuilds: int = 0
    stale: int = 0
    drained: int = 0
    destroyed: int = 0
    build_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    acquire_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    detach_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    restore_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    verify_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    failures: deque[str] = field(default_factory=lambda: deque(maxlen=FAILURES_KEPT))
