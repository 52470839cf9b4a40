"""A per-process pool of healthy, verified episode namespaces.

Setting up an episode namespace from nothing costs about 2.5 s on the 2-core machine, nearly
all of it the workload (12 Deployments, their ReplicaSets and pods, each pod a network
namespace with a veth and listeners) and waiting for it; deleting it costs another 0.6 s.
The faults themselves cost about 0.3 s (write, dataplane barrier, probe, cross-check). So the
pool keeps namespaces after an episode and brings them back instead:

* **release** (:meth:`NamespacePool.release`, from ``K8sEpisode.close``): the agent's
  credentials are revoked at once and the revocation is proved (the old token is refused,
  :meth:`EpisodeNamespace.revoke`); the rest happens on the pool's thread;
* **restore**: the NetworkPolicies -- the only objects the agent's Role lets it create,
  change or delete (:func:`apps.k8s.namespace.agent_writable_resources`) -- are made pristine
  again (:meth:`EpisodeNamespace.restore_policies`);
* **verify**: after a dataplane barrier, the content snapshot of every object in the
  namespace (:meth:`EpisodeNamespace.snapshot`) must equal the pristine one, the measured pod
  matrix must equal the pristine (healthy) one, and the cross-check must agree; only then
  does the namespace go back to the idle list, with its resource-version fingerprint
  (:meth:`EpisodeNamespace.fingerprint`) recorded. Any difference or error deletes the
  namespace (counted in :attr:`PoolStats.replaced`) and a fresh one is prepared;
* **acquire** (from ``K8sEpisode.reset``): an idle namespace whose fingerprint is unchanged
  is handed out with fresh credentials under a new ServiceAccount name (``agent-<hex>``);
  when none is idle the caller waits for a restore under way or prepares one itself
  (verified the same way; a verification failure is raised to the episode, as before).

A namespace is owned by exactly one party at a time (idle list, the pool's thread, or one
episode), under one lock, so two episodes never share one. The pool's thread also keeps
``spare`` idle namespaces ready while episodes are being run, and deletes idle ones after
``idle_s`` without demand; :meth:`NamespacePool.shutdown` (also at process exit) deletes every
namespace it owns. Namespaces carry the label ``netarena/pool-owner=<pid>.<start time>``; a
new pool deletes those whose owner process is gone (a worker killed without its exit hooks).

Environment: ``NETARENA_K8S_POOL`` (``0``/``off``/``false`` turns the pool off: every
episode creates and deletes its own namespace, as before), ``NETARENA_K8S_POOL_SPARE``
(default 1), ``NETARENA_K8S_POOL_IDLE_S`` (default 20), ``NETARENA_K8S_POOL_MAX_IDLE``
(default 4).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import multiprocessing.util
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from evaluator.app import EmulatorError

from apps.k8s import crosscheck, manifests
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.rest import resource_path
from apps.k8s.namespace import (
    EpisodeNamespace,
    agent_writable_resources,
    service_matrix,
)
from apps.k8s.scoring import mismatches

log = logging.getLogger(__name__)

POOL_ENV = "NETARENA_K8S_POOL"
OWNER_LABEL = "netarena/pool-owner"
ACQUIRE_WAIT_S = 30.0
"""Longest wait for a restore or preparation under way before the caller prepares its own."""
SHUTDOWN_TIMEOUT_S = 60.0
FAIL_BACKOFF_S = (1.0, 30.0)
"""Background preparation after a failure: first and longest pause (doubling)."""

RESTORERS = {"networking.k8s.io/networkpolicies"}
"""Resources the restore puts back; every resource the agent may write must be here (a unit
test checks it against :data:`apps.k8s.namespace.AGENT_RULES`)."""


def pool_enabled(option: bool | None = None) -> bool:
    """``option`` if given, else the environment (:data:`POOL_ENV`; on unless ``0``, ``off``,
    ``false`` or ``no``)."""
    if option is not None:
        return option
    return os.environ.get(POOL_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass
class Pristine:
    """What a verified namespace looks like.

    Attributes:
        snapshot: :meth:`EpisodeNamespace.snapshot` of the healthy namespace without agent
            credentials.
        matrix: measured pod matrix ``{"ns/src": {"ns/dst": {"TCP/port": bool}}}``.
        fingerprint: :meth:`EpisodeNamespace.fingerprint` after the last verification.
    """

    snapshot: dict[str, str]
    matrix: dict[str, dict[str, dict[str, bool]]]
    fingerprint: tuple[tuple[str, str], ...]


@dataclass
class PoolStats:
    """Counters and timings (seconds) of one pool.

    Attributes:
        prepared: namespaces created; reused: hand-outs of a restored namespace; handed_out:
            all hand-outs; replaced: restores whose verification failed (namespace deleted);
        stale: idle namespaces dropped at hand-out (fingerprint changed); drained: idle
            namespaces deleted for lack of demand; failures: last reasons (newest last).
    """

    prepared: int = 0
    handed_out: int = 0
    reused: int = 0
    replaced: int = 0
    stale: int = 0
    drained: int = 0
    prepare_s: list[float] = field(default_factory=list)
    revoke_s: list[float] = field(default_factory=list)
    restore_s: list[float] = field(default_factory=list)
    verify_s: list[float] = field(default_factory=list)
    acquire_s: list[float] = field(default_factory=list)
    failures: deque[str] = field(default_factory=lambda: deque(maxlen=20))


class NamespacePool:
    """Healthy namespaces of one cluster, handed out to one episode at a time.

    Args:
        cluster: the running cluster.
        spare: idle namespaces to keep ready while there is demand.
        max_idle: idle namespaces kept at most (more are deleted on release).
        idle_s: seconds without an acquire after which idle namespaces are deleted.
        background: run the pool's thread (restores, spares, draining); without it
            :meth:`release` restores synchronously (tests).
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        spare: int | None = None,
        max_idle: int | None = None,
        idle_s: float | None = None,
        background: bool = True,
    ) -> None:
        self.cluster = cluster
        self.spare = int(spare if spare is not None
                         else _env_number("NETARENA_K8S_POOL_SPARE", 1))
        self.max_idle = int(max_idle if max_idle is not None
                            else _env_number("NETARENA_K8S_POOL_MAX_IDLE", 4))
        self.idle_s = float(idle_s if idle_s is not None
                            else _env_number("NETARENA_K8S_POOL_IDLE_S", 20.0))
        self.stats = PoolStats()
        self.owner = _owner_id()
        self.pid = os.getpid()
        self._lock = threading.Condition()
        self._idle: list[EpisodeNamespace] = []
        self._busy: set[str] = set()
        self._restoring: deque[EpisodeNamespace] = deque()
        self._in_flight = 0  # namespaces being restored or prepared on the pool's thread
        self._preparing = 0  # namespaces being prepared by callers of acquire()
        self._current: EpisodeNamespace | None = None  # being restored by the thread
        self._pristine: dict[str, Pristine] = {}
        self._policies = manifests.healthy_policies()
        self._last_demand = 0.0
        self._fill_after = 0.0
        self._backoff_s = FAIL_BACKOFF_S[0]
        self._closed = False
        self._thread: threading.Thread | None = None
        self._sweep_orphans()
        if background:
            self._thread = threading.Thread(target=self._run, name="k8s-namespace-pool",
                                            daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ public API

    def acquire(self) -> EpisodeNamespace:
        """A verified healthy namespace with fresh agent credentials, owned by the caller
        until :meth:`release`.

        Raises:
            EmulatorError: preparing a namespace failed or its healthy state did not verify
                (:class:`apps.k8s.crosscheck.CrossCheckError` for a cross-check
                disagreement); the namespace is deleted first.
        """
        start = time.perf_counter()
        deadline = time.monotonic() + ACQUIRE_WAIT_S
        ns: EpisodeNamespace | None = None
        while ns is None:
            with self._lock:
                if self._closed:
                    raise EmulatorError("namespace pool is shut down")
                self._last_demand = time.monotonic()
                while not self._idle and (self._restoring or self._in_flight) \
                        and time.monotonic() < deadline:
                    self._lock.wait(0.5)
                candidate = self._idle.pop() if self._idle else None
                if candidate is not None:
                    self._busy.add(candidate.name)
                else:
                    self._preparing += 1
                self._lock.notify_all()
            if candidate is None:
                try:
                    ns = self._prepare(raise_errors=True)
                finally:
                    with self._lock:
                        self._preparing -= 1
                with self._lock:
                    self._busy.add(ns.name)
                break
            if self._still_pristine(candidate):
                ns = candidate
                self.stats.reused += 1
            else:
                with self._lock:
                    self._busy.discard(candidate.name)
                self.stats.stale += 1
                self._discard(candidate, "changed while idle")
        try:
            ns.grant("agent-" + secrets.token_hex(4))
        except Exception as exc:
            with self._lock:
                self._busy.discard(ns.name)
            self._discard(ns, f"granting credentials failed: {exc}")
            raise EmulatorError(f"credentials for {ns.name}: {exc}") from exc
        self.stats.handed_out += 1
        self.stats.acquire_s.append(time.perf_counter() - start)
        return ns

    def release(self, ns: EpisodeNamespace) -> None:
        """Take back a namespace from :meth:`acquire`: revoke the agent's credentials now
        (proved: the old token is refused), then restore and verify it on the pool's thread
        (or here, without a thread). A namespace whose credentials cannot be revoked is
        deleted here (which revokes them).

        Raises:
            ValueError: ``ns`` is not handed out by this pool.
            EmulatorError: the namespace had to be deleted and did not go away.
        """
        with self._lock:
            if ns.name not in self._busy:
                raise ValueError(f"{ns.name} is not handed out by this pool")
            self._busy.discard(ns.name)
            closed = self._closed
        if closed:
            self._forget(ns)
            ns.delete()
            return
        try:
            self.stats.revoke_s.append(ns.revoke())
        except Exception as exc:  # noqa: BLE001 - any failure: delete the namespace
            self._note(f"{ns.name}: revoke failed: {exc}")
            self._forget(ns)
            ns.delete()
            return
        with self._lock:
            if self._thread is not None and not self._closed:
                self._restoring.append(ns)
                self._lock.notify_all()
                return
            self._in_flight += 1
        try:
            self._restore_job(ns)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def restore(self, ns: EpisodeNamespace) -> str | None:
        """Restore ``ns`` (revoked, owned by the caller) and verify it against its pristine
        record. Returns None when pristine (the record's fingerprint is updated), else the
        reason. Never raises for cluster errors (they are the reason)."""
        pristine = self._pristine.get(ns.name)
        if pristine is None:
            return "no pristine record"
        t0 = time.perf_counter()
        try:
            missing = agent_writable_resources() - RESTORERS
            if missing:
                return f"no restorer for {sorted(missing)}"
            ns.restore_policies(self._policies, pristine.snapshot)
            t1 = time.perf_counter()
            self.stats.restore_s.append(t1 - t0)
            reason = self._verify(ns, pristine)
            self.stats.verify_s.append(time.perf_counter() - t1)
            return reason
        except Exception as exc:  # noqa: BLE001 - an unverifiable namespace is replaced
            return f"{type(exc).__name__}: {exc}"

    def pristine_record(self, name: str) -> Pristine | None:
        """The pristine record of namespace ``name`` (None if the pool has none)."""
        return self._pristine.get(name)

    def idle_names(self) -> list[str]:
        """Names of the idle namespaces (for tests and reports)."""
        with self._lock:
            return [ns.name for ns in self._idle]

    def owned_names(self) -> set[str]:
        """Every namespace this pool owns: idle, being restored, or handed out."""
        with self._lock:
            current = {self._current.name} if self._current is not None else set()
            return {n.name for n in self._idle} | {n.name for n in self._restoring} \
                | set(self._busy) | current

    def wait_quiet(self, timeout_s: float = 60.0) -> bool:
        """Wait until no restore or preparation is under way; True if so in time."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._restoring or self._in_flight:
                if time.monotonic() > deadline:
                    return False
                self._lock.wait(0.2)
        return True

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop the pool's thread and delete every namespace the pool owns (idle, being
        restored, and -- with their episodes -- handed out), waiting until their pods and pod
        network namespaces are gone. Idempotent; errors are logged (the cluster may already
        be down)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            victims = list(self._idle) + list(self._restoring)
            busy = set(self._busy)
            self._idle.clear()
            self._restoring.clear()
        victims += [EpisodeNamespace(self.cluster, name) for name in busy]
        for ns in victims:
            ns.created = True
        deadline = time.monotonic() + timeout_s
        for ns in victims:
            try:
                ns.delete(max(1.0, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001 - best effort at shutdown
                self._log("deleting %s at shutdown: %s", ns.name, exc)
            self._pristine.pop(ns.name, None)

    # ------------------------------------------------------------------ internals

    def _prepare(self, *, raise_errors: bool) -> EpisodeNamespace:
        """Create and verify a healthy namespace (no agent credentials); record it pristine.

        Raises:
            EmulatorError: creation or verification failed (the namespace is deleted).
        """
        t0 = time.perf_counter()
        ns = EpisodeNamespace(self.cluster, labels={OWNER_LABEL: self.owner})
        try:
            ns.create(self._policies, credentials=False)
            matrix, apps = ns.measure()
            crosscheck.check(ns.rest.api, ns.name, matrix, ns.last_endpoints,
                             self.cluster.config)
            wrong = mismatches(manifests.expected_edges(), service_matrix(matrix, apps))
            if wrong:
                raise EmulatorError(
                    f"healthy namespace {ns.name} has {len(wrong)} mismatches: {wrong[:5]}"
                )
            self._pristine[ns.name] = Pristine(ns.snapshot(), matrix, ns.fingerprint())
        except BaseException as exc:
            self._note(f"{ns.name}: preparation failed: {exc}")
            self._pristine.pop(ns.name, None)
            try:
                ns.delete()
            except Exception as del_exc:  # noqa: BLE001 - report the first error
                self._log("deleting %s: %s", ns.name, del_exc)
            if raise_errors or not isinstance(exc, Exception):
                raise
            raise EmulatorError(str(exc)) from exc
        self.stats.prepared += 1
        self.stats.prepare_s.append(time.perf_counter() - t0)
        return ns

    def _verify(self, ns: EpisodeNamespace, pristine: Pristine) -> str | None:
        ns.wait()
        snapshot = ns.snapshot()
        if snapshot != pristine.snapshot:
            changed = sorted(k for k in snapshot.keys() | pristine.snapshot.keys()
                             if snapshot.get(k) != pristine.snapshot.get(k))
            return f"objects differ from the pristine snapshot: {changed[:10]}"
        matrix, _apps = ns.measure()
        if matrix != pristine.matrix:
            return "measured matrix differs from the pristine matrix"
        crosscheck.check(ns.rest.api, ns.name, matrix, ns.last_endpoints, self.cluster.config)
        pristine.fingerprint = ns.fingerprint()
        return None

    def _still_pristine(self, ns: EpisodeNamespace) -> bool:
        pristine = self._pristine.get(ns.name)
        try:
            return pristine is not None and ns.fingerprint() == pristine.fingerprint
        except Exception:  # noqa: BLE001 - unreadable (e.g. the cluster restarted): stale
            return False

    def _restore_job(self, ns: EpisodeNamespace) -> None:
        reason = self.restore(ns)
        if reason is None:
            with self._lock:
                if not self._closed and len(self._idle) < self.max_idle:
                    self._idle.append(ns)
                    self._lock.notify_all()
                    return
            self._discard(ns, None)
            return
        self.stats.replaced += 1
        self._note(f"{ns.name}: restore not verified: {reason}")
        self._discard(ns, reason)

    def _discard(self, ns: EpisodeNamespace, reason: str | None) -> None:
        if reason:
            self._note(f"{ns.name}: deleted: {reason}")
        self._forget(ns)
        try:
            ns.created = True
            ns.delete()
        except Exception as exc:  # noqa: BLE001 - logged; the cluster may be gone
            self._log("deleting %s: %s", ns.name, exc)

    def _forget(self, ns: EpisodeNamespace) -> None:
        self._pristine.pop(ns.name, None)

    def _note(self, text: str) -> None:
        self.stats.failures.append(text)
        self._log("%s", text)

    def _log(self, message: str, *args: object) -> None:
        """Log a warning, except once the pool is shut down (at interpreter exit the log
        streams may be closed already; what failed then is being deleted anyway)."""
        if not self._closed:
            log.warning("namespace pool: " + message, *args)

    def _run(self) -> None:
        """The pool's thread: restores first, then spares, then draining."""
        while True:
            job: tuple[str, EpisodeNamespace | None] | None = None
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                active = now - self._last_demand < self.idle_s
                if self._restoring:
                    job = ("restore", self._restoring.popleft())
                    self._current = job[1]
                    self._in_flight += 1
                elif (active and now >= self._fill_after
                      and len(self._idle) + self._in_flight + self._preparing < self.spare):
                    job = ("prepare", None)
                    self._in_flight += 1
                elif not active and self._idle:
                    job = ("drain", self._idle.pop())
                else:
                    self._lock.wait(0.5)
                    continue
            try:
                self._run_job(*job)
            except Exception as exc:  # noqa: BLE001 - the thread must survive cluster failures
                self._log("%s failed: %s: %s", job[0], type(exc).__name__, exc)
            finally:
                with self._lock:
                    if job[0] != "drain":
                        self._in_flight -= 1
                    self._current = None
                    self._lock.notify_all()

    def _run_job(self, kind: str, ns: EpisodeNamespace | None) -> None:
        if kind == "restore" and ns is not None:
            self._restore_job(ns)
        elif kind == "drain" and ns is not None:
            self.stats.drained += 1
            self._discard(ns, None)
        elif kind == "prepare":
            try:
                fresh = self._prepare(raise_errors=False)
            except EmulatorError:
                with self._lock:
                    self._fill_after = time.monotonic() + self._backoff_s
                    self._backoff_s = min(2 * self._backoff_s, FAIL_BACKOFF_S[1])
                return
            with self._lock:
                self._backoff_s = FAIL_BACKOFF_S[0]
                if not self._closed:
                    self._idle.append(fresh)
                    return
            self._discard(fresh, None)

    def _sweep_orphans(self) -> None:
        """Delete namespaces of pools whose process is gone (same host, pid + start time)."""
        try:
            rest = EpisodeNamespace(self.cluster, "sweep").rest
            items = rest.get(resource_path("namespaces"), labelSelector=OWNER_LABEL)["items"]
        except Exception as exc:  # noqa: BLE001 - nothing to sweep if the list fails
            self._log("listing orphans: %s", exc)
            return
        for item in items:
            owner = item["metadata"].get("labels", {}).get(OWNER_LABEL, "")
            if owner == self.owner or _owner_alive(owner) or \
                    item["metadata"].get("deletionTimestamp"):
                continue
            orphan = EpisodeNamespace(self.cluster, item["metadata"]["name"])
            orphan.created = True
            try:
                orphan.delete()
                self._note(f"{orphan.name}: orphan of {owner} deleted")
            except Exception as exc:  # noqa: BLE001 - best effort
                self._log("deleting orphan %s: %s", orphan.name, exc)


def _start_time(pid: int) -> str | None:
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - tiny procfs read
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_id() -> str:
    """``<pid>.<start time in clock ticks>`` of this process (a label value)."""
    return f"{os.getpid()}.{_start_time(os.getpid())}"


def _owner_alive(owner: str) -> bool:
    pid, _, start = owner.partition(".")
    return pid.isdigit() and _start_time(int(pid)) == start


_POOLS_LOCK = threading.Lock()
_POOLS: dict[str, tuple[str, NamespacePool]] = {}
_EXIT_HOOK: list[bool] = []


def _incarnation(cluster: Cluster) -> str:
    """Identity of the running cluster: its CA (a new ``up`` after ``down`` makes a new one)."""
    return hashlib.sha256((cluster.config.pki_dir / "ca.crt").read_bytes()).hexdigest()


def namespace_pool(cluster: Cluster, **options: Any) -> NamespacePool:
    """The process's pool for ``cluster`` (created on first use; replaced, without deleting
    anything, when the cluster was restarted since: its namespaces went with it)."""
    key = str(cluster.config.state_dir)
    incarnation = _incarnation(cluster)
    with _POOLS_LOCK:
        entry = _POOLS.get(key)
        if entry is not None and entry[0] == incarnation and not entry[1]._closed:
            return entry[1]
        if entry is not None:
            old = entry[1]
            with old._lock:
                old._closed = True
                old._idle.clear()
                old._restoring.clear()
                old._lock.notify_all()
        pool = NamespacePool(cluster, **options)
        if not _EXIT_HOOK:
            # registered after the kubernetes client's own exit hook (it removes the
            # certificate files the clients use), so that it runs before it; worker processes
            # of multiprocessing leave through os._exit, which skips atexit but runs its
            # finalizers
            atexit.register(shutdown_pools)
            multiprocessing.util.Finalize(None, shutdown_pools, exitpriority=50)
            _EXIT_HOOK.append(True)
        _POOLS[key] = (incarnation, pool)
        return pool


def shutdown_pools() -> None:
    """Shut every pool of this process down (registered to run at exit)."""
    with _POOLS_LOCK:
        pools = [(i, p) for i, p in _POOLS.values() if p.pid == os.getpid()]
        _POOLS.clear()
    for incarnation, pool in pools:
        try:
            current = _incarnation(pool.cluster)
        except OSError:  # the cluster is down and its state gone: so are its namespaces
            continue
        if current == incarnation:  # a restarted cluster has no namespace of this pool
            pool.shutdown()


def _forget_pools_in_child() -> None:
    """After ``fork``: the parent's pools (their namespaces, threads and lock) are the
    parent's; the child starts without any and never deletes the parent's namespaces."""
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_pools_in_child)

