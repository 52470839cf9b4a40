"""The process side of reset pools: every pool of a process is shut down when it exits and
emptied in a forked child; :class:`PoolRegistry` names an app's pools (e.g. one per cluster).

A pool registers itself with :func:`track` when it is made; this module never imports the pool
class (it needs only :class:`ManagedPool`'s methods).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class ManagedPool(Protocol):
    """What the process hooks need of a pool (:class:`evaluator.reset_pool.ResetPool`)."""

    @property
    def closed(self) -> bool: ...

    def shutdown(self, timeout_s: float = 60.0) -> None: ...

    def abandon(self) -> None: ...

    def forget_after_fork(self) -> None: ...


P = TypeVar("P", bound=ManagedPool)


def track(pool: ManagedPool) -> None:
    """Count ``pool`` among this process's pools and (re)register the exit hooks."""
    _ALL_POOLS.add(pool)
    _register_exit_hooks()


class PoolRegistry(Generic[P]):
    """The process's pools of one app by name (e.g. one per cluster), emptied in a forked
    child and shut down at exit with every other pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, P] = {}
        _REGISTRIES.add(self)

    def get(self, name: str, create: Callable[[], P],
            keep: Callable[[P], bool] = lambda _pool: True) -> P:
        """The pool called ``name``: the existing one if it is open and ``keep`` accepts it,
        else a new one from ``create`` (a rejected one is abandoned, not shut down: its
        environments went with their host)."""
        with self._lock:
            pool = self._pools.get(name)
            if pool is not None and not pool.closed and keep(pool):
                return pool
            if pool is not None:
                pool.abandon()
            pool = self._pools[name] = create()
            return pool

    def peek(self, name: str) -> P | None:
        """The pool called ``name``, if any (never creates one)."""
        with self._lock:
            return self._pools.get(name)

    def pop_all(self) -> list[P]:
        """Remove and return every pool (the caller shuts them down)."""
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        return pools

    def _forget_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pools.clear()


#: Every pool and registry of this process (pools are shut down at exit).
_ALL_POOLS: weakref.WeakSet[ManagedPool] = weakref.WeakSet()
_REGISTRIES: weakref.WeakSet[PoolRegistry] = weakref.WeakSet()
_HOOKED_PID = 0


def shutdown_all() -> None:
    """Shut every pool of this process down (the exit hook; callable any time)."""
    for registry in list(_REGISTRIES):
        registry.pop_all()
    for pool in list(_ALL_POOLS):
        with contextlib.suppress(Exception):
            pool.shutdown()


def _register_exit_hooks() -> None:
    """Run :func:`shutdown_all` when this process ends.

    ``atexit`` runs hooks in reverse order of registration; the hook is moved to the end at
    every new pool, so that it runs before every hook registered before that pool existed
    (the Kubernetes client's removes the certificate files a namespace's deletion needs).
    A :mod:`multiprocessing` child leaves through ``os._exit`` without ``atexit`` but runs
    ``multiprocessing.util`` finalizers first: one is registered per process.
    """
    atexit.unregister(shutdown_all)
    atexit.register(shutdown_all)
    register_finalizer()


def register_finalizer() -> None:
    """The ``multiprocessing.util`` finalizer of :func:`shutdown_all`, once per process (a
    pool made before a fork registers it in the child at its first lease there)."""
    global _HOOKED_PID
    if _HOOKED_PID != os.getpid():
        _HOOKED_PID = os.getpid()
        multiprocessing.util.Finalize(None, shutdown_all, exitpriority=50)


def _after_fork_in_child() -> None:
    for registry in list(_REGISTRIES):
        registry._forget_after_fork()
    for pool in list(_ALL_POOLS):
        with contextlib.suppress(Exception):
            pool.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
