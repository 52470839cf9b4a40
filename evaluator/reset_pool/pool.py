"""A reset pool: built emulator environments reused across episodes, restored and verified
between them.

Building an app's emulated environment (a Mininet network, a Kubernetes namespace with its
workload) costs far more than putting back what one episode changed. A :class:`ResetPool`
keeps built environments and runs one cycle for every app:

* **acquire** (an episode's ``reset``): lease an idle environment of the requested key, or
  build one; a built environment's *clean record* (the app's snapshot of its state right
  after the build) is kept beside it for its whole life;
* **release** (an episode's ``close``): take the environment back, cut the episode off it
  (:meth:`ResetPool._detach`), then **restore** it to the clean record and **verify** it
  equals that record -- synchronously, or on the pool's thread with ``background``;
* a verified environment goes back to the idle list (or is destroyed when the list is full);
  one that fails verification is **discarded** (destroyed; counted in
  :attr:`ResetStats.rebuilds`), so the next lease of its key builds a fresh one. Nothing an
  episode did can reach a later episode through an environment that did not verify.

An app subclasses :class:`ResetPool` and supplies what is app-specific as hooks: ``_build``,
``_restore``, ``_verify``, ``_destroy`` (required) and ``_key``, ``_attach``, ``_detach``,
``_unchanged``, ``_forget``, ``_describe``, ``_host_gone`` (optional). The contract:

* ``_build(request)`` returns a new environment and its clean record, or raises (having
  destroyed whatever it built);
* ``_restore(env, record)`` puts back every kind of state an episode can write, and returns
  the differences it already saw (empty: nothing seen; a restore that prints the state it
  repaired may compare as it goes); ``_verify(env, record)`` then compares the environment
  with the record and returns the differences (empty: equal). Together they must guarantee
  that a kept environment is indistinguishable, by anything the next episode can observe,
  from the recorded one (each app documents what it reads: ``docs/route.md`` "Network pool",
  ``docs/k8s.md`` "The namespace pool"). An exception from either counts as a difference;
* ``_unchanged(env, record)`` is a cheap check at lease time of an idle environment (a
  fingerprint); False discards it (:attr:`ResetStats.stale`);
* ``_destroy(env, timeout_s)`` tears the environment down; ``_forget(env)`` drops a forked
  child's copy without touching it.

Thread and process safety: every method may be called from any thread; an environment is
owned by exactly one party at a time (the idle list, the pool's thread, or one lease), moved
under one lock, so two episodes never share one. Pools are per process: a forked child keeps
its pool objects but empty (``_forget`` on each environment, which stays the parent's), and
every pool of a process is shut down when it exits -- at interpreter exit (``atexit``) and,
in a :mod:`multiprocessing` child that leaves through ``os._exit``, by a
``multiprocessing.util`` finalizer. A process killed outright leaves its environments to the
app's own sweep of dead owners.

Switch: ``NETARENA_<APP>_POOL=<n>`` keeps ``n`` idle environments per key; ``0`` (or text that
is not a number) turns the pool off; unset, the app's declared default applies
(:func:`evaluator.reset_pool.switch.pool_size`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from evaluator.app import EmulatorError
from evaluator.reset_pool.process import register_finalizer, track
from evaluator.reset_pool.stats import ResetStats

log = logging.getLogger(__name__)

T = TypeVar("T")  # an environment
R = TypeVar("R")  # its clean record
K = TypeVar("K")  # what acquire() is asked for

#: Background builds after a failure: first and longest pause, in seconds (doubling).
BUILD_BACKOFF_S = (1.0, 30.0)


class ResetPool(Generic[K, T, R]):
    """Built environments per key, leased to one episode at a time (thread-safe).

    Args:
        kind: what the environments are, for messages (``"route network"``).
        max_idle: idle environments kept per key; a verified one beyond that is destroyed.
        spare: idle environments per key the pool's thread keeps ready while the key has
            demand (``background`` only).
        idle_s: seconds without an acquire of a key after which the pool's thread destroys
            that key's idle environments (``background`` only; None: never).
        background: restore released environments, build spares and drain on the pool's
            thread (started on first use in each process); without it :meth:`release`
            restores synchronously.
        acquire_wait_s: longest wait in :meth:`acquire`, when no environment of the key is
            idle, for one being restored or built before building one itself (seconds).

    Raises:
        ValueError: a negative ``max_idle``.
    """

    def __init__(
        self,
        kind: str,
        *,
        max_idle: int,
        spare: int = 0,
        idle_s: float | None = None,
        background: bool = False,
        acquire_wait_s: float = 0.0,
    ) -> None:
        if max_idle < 0:
            raise ValueError("max_idle must be >= 0")
        self.kind = kind
        self.max_idle = max_idle
        self.spare = spare
        self.idle_s = idle_s
        self.background = background
        self.acquire_wait_s = acquire_wait_s
        self.stats = ResetStats()
        self._lock = threading.Condition()
        self._idle: dict[Hashable, list[T]] = {}
        self._leased: dict[int, T] = {}
        self._records: dict[int, R] = {}
        self._keys: dict[int, Hashable] = {}
        self._restoring: deque[T] = deque()
        self._current: T | None = None  # being restored or drained by the pool's thread
        self._coming: Counter[Hashable] = Counter()  # being restored or built by the pool
        self._preparing: Counter[Hashable] = Counter()  # being built by acquire() callers
        self._demand: dict[Hashable, tuple[float, K]] = {}  # key -> (monotonic s, request)
        self._fill_after = 0.0
        self._backoff_s = BUILD_BACKOFF_S[0]
        self._closed = False
        self._thread: threading.Thread | None = None
        self._thread_pid = 0
        track(self)

    # ------------------------------------------------------------------ hooks

    def _build(self, request: K) -> tuple[T, R]:
        """A new environment for ``request`` and its clean record. Raises on failure, after
        destroying whatever it built."""
        raise NotImplementedError

    def _restore(self, env: T, record: R) -> list[str]:
        """Put ``env`` back to ``record``; the differences already seen (module docstring)."""
        raise NotImplementedError

    def _verify(self, env: T, record: R) -> list[str]:
        """Differences between ``env`` and ``record`` (empty: equal)."""
        raise NotImplementedError

    def _destroy(self, env: T, timeout_s: float | None) -> None:
        """Tear ``env`` down (within ``timeout_s`` seconds when given)."""
        raise NotImplementedError

    def _key(self, request: K) -> Hashable:
        """The idle list ``request`` draws from (default: the request itself)."""
        return request

    def _attach(self, env: T, record: R) -> None:
        """Prepare a leased ``env`` for its episode (may raise: the lease fails)."""

    def _detach(self, env: T) -> None:
        """Cut the episode off a released ``env`` before its restore (may raise: it is
        destroyed at once, and what the destruction raises reaches the caller)."""

    def _unchanged(self, env: T, record: R) -> bool:
        """Whether an idle ``env`` still matches ``record`` at lease time (cheap check)."""
        return True

    def _forget(self, env: T) -> None:
        """Drop a forked child's copy of ``env`` without touching the environment."""

    def _describe(self, env: T) -> str:
        """A short name of ``env`` for failure texts."""
        return self.kind

    def _host_gone(self) -> bool:
        """True when every environment went with its host (shutdown then only forgets)."""
        return False

    # ------------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        """True after :meth:`shutdown` or :meth:`abandon`."""
        return self._closed

    def record(self, env: T) -> R | None:
        """The clean record of ``env`` (None when the pool does not own it)."""
        with self._lock:
            return self._records.get(id(env))

    def idle_count(self) -> int:
        """Idle environments over all keys."""
        with self._lock:
            return sum(len(envs) for envs in self._idle.values())

    def owned(self) -> list[T]:
        """Every environment the pool owns: idle, queued or under restore, and leased."""
        with self._lock:
            envs = [env for envs in self._idle.values() for env in envs]
            envs += list(self._restoring) + list(self._leased.values())
            if self._current is not None:
                envs.append(self._current)
            return envs

    def acquire(self, request: K) -> T:
        """Lease a clean environment for ``request``: an idle one of its key that is
        unchanged since its verification, else a new build. The caller owns it until
        :meth:`release`.

        Raises:
            EmulatorError: the pool was shut down, or the lease could not be prepared (the
                environment is discarded first); whatever ``_build`` raises.
        """
        started = time.perf_counter()
        key = self._key(request)
        deadline = time.monotonic() + self.acquire_wait_s
        register_finalizer()
        while True:
            with self._lock:
                if self._closed:
                    raise EmulatorError(f"the {self.kind} pool was shut down")
                self._demand[key] = (time.monotonic(), request)
                self._start_thread()
                while (not self._idle.get(key) and self._coming[key]
                       and time.monotonic() < deadline):
                    self._lock.wait(0.5)
                idle = self._idle.get(key)
                env = idle.pop() if idle else None
                if env is not None:
                    self._leased[id(env)] = env
                else:
                    self._preparing[key] += 1
                self._lock.notify_all()
            if env is None:
                try:
                    env = self._build_recorded(request, key)
                finally:
                    with self._lock:
                        self._preparing[key] -= 1
                with self._lock:
                    self._leased[id(env)] = env
                break
            record = self.record(env)
            try:
                unchanged = record is not None and self._unchanged(env, record)
            except Exception:  # noqa: BLE001 - unreadable: not known to be clean
                unchanged = False
            if unchanged:
                with self._lock:
                    self.stats.reused += 1
                break
            with self._lock:
                self._leased.pop(id(env), None)
                self.stats.stale += 1
            self.discard(env, "changed while idle")
        try:
            self._attach(env, self._records[id(env)])
        except Exception as exc:
            with self._lock:
                self._leased.pop(id(env), None)
            self.discard(env, f"attach failed: {exc}")
            if isinstance(exc, EmulatorError):
                raise
            raise EmulatorError(f"{self._describe(env)}: {exc}") from exc
        with self._lock:
            self.stats.leased += 1
            self.stats.acquire_s.append(time.perf_counter() - started)
        return env

    def release(self, env: T) -> bool:
        """Take back a leased ``env``: detach it, then restore and verify it (here, or on
        the pool's thread with ``background``); keep it idle if it verified and the idle
        list of its key has room, else destroy it.

        Returns True when ``env`` went back to the idle list (with ``background``: when it
        was queued for its restore). Releasing an environment this pool has not leased out
        (already released, or destroyed by :meth:`shutdown`) does nothing and returns False.

        Raises:
            Exception: what destroying an environment that could not be detached raised
                (it may still be reachable by the episode that held it).
        """
        with self._lock:
            if self._leased.pop(id(env), None) is None:
                return False
            closed = self._closed
        if closed:
            self.discard(env, None, raise_errors=True)
            return False
        started = time.perf_counter()
        try:
            self._detach(env)
        except Exception as exc:  # noqa: BLE001 - any failure: destroy the environment
            self.discard(env, f"detach failed: {exc}", raise_errors=True)
            return False
        key = self._keys.get(id(env))
        with self._lock:
            self.stats.detach_s.append(time.perf_counter() - started)
            self._coming[key] += 1
            if self.background and not self._closed:
                self._start_thread()
                self._restoring.append(env)
                self._lock.notify_all()
                return True
        try:
            return self._restore_job(env)
        finally:
            with self._lock:
                self._coming[key] -= 1
                self._lock.notify_all()

    def restore(self, env: T) -> list[str]:
        """Restore an owned, detached ``env`` to its clean record and verify it.

        Returns the differences left (empty: verified). Never raises for the environment's
        errors: an exception of the restore or the verification is a difference. Times go
        to :attr:`ResetStats.restore_s` and :attr:`ResetStats.verify_s`.
        """
        record = self.record(env)
        if record is None:
            return ["no clean record"]
        started = time.perf_counter()
        try:
            problems = list(self._restore(env, record))
        except Exception as exc:  # noqa: BLE001 - an unrestorable environment is discarded
            problems = [f"restore failed: {type(exc).__name__}: {exc}"]
        restored = time.perf_counter()
        if not problems:
            try:
                problems = list(self._verify(env, record))
            except Exception as exc:  # noqa: BLE001 - an unverifiable one too
                problems = [f"verification failed: {type(exc).__name__}: {exc}"]
        with self._lock:
            self.stats.restore_s.append(restored - started)
            self.stats.verify_s.append(time.perf_counter() - restored)
        return problems

    def verify(self, env: T) -> list[str]:
        """Compare an owned ``env`` with its clean record without restoring it; the
        differences (empty: equal). Never raises for the environment's errors."""
        record = self.record(env)
        if record is None:
            return ["no clean record"]
        try:
            return list(self._verify(env, record))
        except Exception as exc:  # noqa: BLE001 - reported as a difference
            return [f"verification failed: {type(exc).__name__}: {exc}"]

    def discard(self, env: T, reason: str | None, *, raise_errors: bool = False) -> None:
        """Destroy ``env`` (not leased, not idle) and forget its record; ``reason``, when
        given, goes to :attr:`ResetStats.failures`. Errors of the destruction are logged,
        or raised with ``raise_errors``."""
        if reason:
            self._note(f"{self._describe(env)}: discarded: {reason}")
        with self._lock:
            self._records.pop(id(env), None)
            self._keys.pop(id(env), None)
            self.stats.destroyed += 1
        try:
            self._destroy(env, None)
        except Exception as exc:
            if raise_errors:
                raise
            self._log("destroying %s: %s", self._describe(env), exc)

    def wait_quiet(self, timeout_s: float = 60.0) -> bool:
        """Wait until no restore or build of the pool's thread is queued or under way;
        True if so within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._restoring or any(n > 0 for n in self._coming.values()):
                if time.monotonic() > deadline:
                    return False
                self._lock.wait(0.2)
        return True

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop the pool's thread and destroy every environment the pool owns: idle, under
        restore and leased (an episode still holding one finds it gone; its release does
        nothing). Idempotent; later acquires raise. Errors are logged. When the host is
        gone (``_host_gone``) the environments went with it and are only forgotten."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if (thread is not None and self._thread_pid == os.getpid()
                and thread is not threading.current_thread()):
            thread.join(timeout_s)
        with self._lock:
            victims = [env for envs in self._idle.values() for env in envs]
            victims += list(self._restoring) + list(self._leased.values())
            self._idle.clear()
            self._restoring.clear()
            self._leased.clear()
        try:
            gone = self._host_gone()
        except Exception:  # noqa: BLE001 - an unreadable host is a gone one
            gone = True
        deadline = time.monotonic() + timeout_s
        for env in victims:
            if gone:
                self._drop(env)
                continue
            with self._lock:
                self._records.pop(id(env), None)
                self._keys.pop(id(env), None)
                self.stats.destroyed += 1
            try:
                self._destroy(env, max(1.0, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001 - best effort at shutdown
                self._log("destroying %s at shutdown: %s", self._describe(env), exc)

    def abandon(self) -> None:
        """Close the pool and forget every environment without destroying any (their host
        was replaced: a restarted cluster). Leases still out are released to nothing."""
        with self._lock:
            self._closed = True
            victims = [env for envs in self._idle.values() for env in envs]
            victims += list(self._restoring) + list(self._leased.values())
            self._idle.clear()
            self._restoring.clear()
            self._leased.clear()
            self._lock.notify_all()
        for env in victims:
            self._drop(env)

    def forget_after_fork(self) -> None:
        """In a forked child: drop every environment without touching it (they are the
        parent's; ``_forget`` on each) and start empty, with a new lock and no thread."""
        envs = [env for envs in self._idle.values() for env in envs]
        envs += list(self._restoring) + list(self._leased.values())
        if self._current is not None:
            envs.append(self._current)
        self._lock = threading.Condition()
        self._idle, self._leased, self._records, self._keys = {}, {}, {}, {}
        self._restoring, self._current = deque(), None
        self._coming, self._preparing, self._demand = Counter(), Counter(), {}
        self._thread = None
        for env in envs:
            with contextlib.suppress(Exception):
                self._forget(env)

    # ------------------------------------------------------------------ internals

    def _drop(self, env: T) -> None:
        with self._lock:
            self._records.pop(id(env), None)
            self._keys.pop(id(env), None)

    def _build_recorded(self, request: K, key: Hashable) -> T:
        started = time.perf_counter()
        try:
            env, record = self._build(request)
        except BaseException as exc:
            self._note(f"{self.kind}: build failed: {exc}")
            raise
        with self._lock:
            self._records[id(env)] = record
            self._keys[id(env)] = key
            self.stats.built += 1
            self.stats.build_s.append(time.perf_counter() - started)
        return env

    def _restore_job(self, env: T) -> bool:
        problems = self.restore(env)
        if not problems:
            key = self._keys.get(id(env))
            with self._lock:
                self.stats.restored += 1
                idle = self._idle.setdefault(key, [])
                if not self._closed and len(idle) < self.max_idle:
                    idle.append(env)
                    self._lock.notify_all()
                    return True
            self.discard(env, None)
            return False
        with self._lock:
            self.stats.rebuilds += 1
        name = self._describe(env)
        for problem in problems[:3]:
            self._note(f"{name}: {problem}")
        self.discard(env, "not verified")
        return False

    def _note(self, text: str) -> None:
        with self._lock:
            self.stats.failures.append(text)
        self._log("%s", text)

    def _log(self, message: str, *args: object) -> None:
        """A warning, except once the pool is closed (at interpreter exit the log streams
        may be closed already; what failed then is being destroyed anyway)."""
        if not self._closed:
            log.warning(f"{self.kind} pool: " + message, *args)

    def _start_thread(self) -> None:
        """Start the pool's thread in this process if ``background`` (caller holds the lock)."""
        if not self.background or self._closed:
            return
        if self._thread is not None and self._thread_pid == os.getpid():
            return
        self._thread_pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name=f"{self.kind} pool", daemon=True)
        self._thread.start()

    def _next_job(self) -> tuple[str, Hashable, T | None, K | None] | None:
        """The thread's next job (caller holds the lock): restores first, then spares, then
        draining."""
        if self._restoring:
            env = self._restoring.popleft()
            self._current = env
            return ("restore", self._keys.get(id(env)), env, None)
        now = time.monotonic()
        for key, (last, request) in self._demand.items():
            active = self.idle_s is None or now - last < self.idle_s
            have = len(self._idle.get(key, [])) + self._coming[key] + self._preparing[key]
            if active and now >= self._fill_after and have < self.spare:
                self._coming[key] += 1
                return ("build", key, None, request)
            if not active and self._idle.get(key):
                env = self._idle[key].pop()
                self._current = env
                return ("drain", key, env, None)
        return None

    def _run(self) -> None:
        """The pool's thread."""
        while True:
            with self._lock:
                if self._closed or self._thread_pid != os.getpid():
                    return
                job = self._next_job()
                if job is None:
                    self._lock.wait(0.5)
                    continue
            kind, key, env, request = job
            try:
                if kind == "restore" and env is not None:
                    self._restore_job(env)
                elif kind == "drain" and env is not None:
                    with self._lock:
                        self.stats.drained += 1
                    self.discard(env, None)
                else:
                    self._build_spare(request, key)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - the thread must survive host failures
                self._log("%s failed: %s: %s", kind, type(exc).__name__, exc)
            finally:
                with self._lock:
                    if kind != "drain":
                        self._coming[key] -= 1
                    self._current = None
                    self._lock.notify_all()

    def _build_spare(self, request: K, key: Hashable) -> None:
        try:
            env = self._build_recorded(request, key)
        except Exception:  # noqa: BLE001 - noted by _build_recorded; retried after a pause
            with self._lock:
                self._fill_after = time.monotonic() + self._backoff_s
                self._backoff_s = min(2 * self._backoff_s, BUILD_BACKOFF_S[1])
            return
        with self._lock:
            self._backoff_s = BUILD_BACKOFF_S[0]
            if not self._closed:
                self._idle.setdefault(key, []).append(env)
                self._lock.notify_all()
                return
        self.discard(env, None)
