"""A per-process pool of healthy, verified episode namespaces.

Setting up an episode namespace from nothing costs about 2.5 s on the 2-core machine, nearly
all of it the workload (12 Deployments, their ReplicaSets and pods, each pod a network
namespace with a veth and listeners) and waiting for it; deleting it costs another 0.6 s.
The faults themselves cost about 0.3 s (write, dataplane barrier, probe, cross-check). So the
pool keeps namespaces after an episode and brings them back instead:

* **release** (:meth:`NamespacePool.release`, from ``K8sEpisode.close``): the agent's
  credentials are revoked at once and the revocation is proved (the old token is refused,
  :meth:`EpisodeNamespace.revoke`: the pool's detach); the rest happens on the pool's thread;
* **restore**: the NetworkPolicies -- the only objects the agent's Role lets it create,
  change or delete (:func:`apps.k8s.namespace.agent_writable_resources`) -- are made pristine
  again (:meth:`EpisodeNamespace.restore_policies`);
* **verify**: after a dataplane barrier, the content snapshot of every object in the
  namespace (:meth:`EpisodeNamespace.snapshot`) must equal the pristine one, the measured pod
  matrix must equal the pristine (healthy) one, and the cross-check must agree; only then
  does the namespace go back to the idle list, with its resource-version fingerprint
  (:meth:`EpisodeNamespace.fingerprint`) recorded. Any difference or error deletes the
  namespace (counted in :attr:`~evaluator.reset_pool.ResetStats.rebuilds`) and a fresh one is
  prepared;
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

The lease cycle, its statistics and the exit and fork hooks are the engine's reset pool
(:mod:`evaluator.reset_pool`); this module supplies the namespace-specific hooks.

Switch: ``NETARENA_K8S_POOL=<n>`` keeps at most ``n`` idle namespaces per process (unset:
:data:`POOL_SIZE`, on); ``0`` (or ``off``) turns the pool off: every episode creates and
deletes its own namespace. ``NETARENA_K8S_POOL_SPARE`` (default 1) and
``NETARENA_K8S_POOL_IDLE_S`` (default 20) tune the pool's thread.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from typing import Any

from evaluator.app import EmulatorError
from evaluator.reset_pool import PoolRegistry, ResetPool, pool_env, pool_size

from apps.k8s import crosscheck, manifests
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.rest import resource_path
from apps.k8s.namespace import (
    EpisodeNamespace,
    agent_writable_resources,
    service_matrix,
)
from apps.k8s.scoring import mismatches

POOL_ENV = pool_env("k8s")
#: Idle namespaces kept at most when :data:`POOL_ENV` is unset (or a pool is asked for while
#: it is 0).
POOL_SIZE = 4
#: Whether the pool is on when :data:`POOL_ENV` is unset.
ON_BY_DEFAULT = True
OWNER_LABEL = "netarena/pool-owner"
ACQUIRE_WAIT_S = 30.0
"""Longest wait for a restore or preparation under way before the caller prepares its own."""
SHUTDOWN_TIMEOUT_S = 60.0

RESTORERS = {"networking.k8s.io/networkpolicies"}
"""Resources the restore puts back; every resource the agent may write must be here (a unit
test checks it against :data:`apps.k8s.namespace.AGENT_RULES`)."""


def pool_enabled(option: bool | None = None) -> bool:
    """``option`` if given, else whether :data:`POOL_ENV` sizes a pool (on unless ``0`` or
    text that is not a number: :func:`evaluator.reset_pool.pool_size`)."""
    if option is not None:
        return option
    return pool_size("k8s", on_by_default=ON_BY_DEFAULT, size=POOL_SIZE) > 0


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass
class Pristine:
    """What a verified namespace looks like (the pool's clean record of it).

    Attributes:
        snapshot: :meth:`EpisodeNamespace.snapshot` of the healthy namespace without agent
            credentials.
        matrix: measured pod matrix ``{"ns/src": {"ns/dst": {"TCP/port": bool}}}``.
        fingerprint: :meth:`EpisodeNamespace.fingerprint` after the last verification.
    """

    snapshot: dict[str, str]
    matrix: dict[str, dict[str, dict[str, bool]]]
    fingerprint: tuple[tuple[str, str], ...]


class NamespacePool(ResetPool[None, EpisodeNamespace, Pristine]):
    """Healthy namespaces of one cluster, handed out to one episode at a time
    (:class:`evaluator.reset_pool.ResetPool`).

    Args:
        cluster: the running cluster.
        spare: idle namespaces to keep ready while there is demand.
        max_idle: idle namespaces kept at most (more are deleted on release).
        idle_s: seconds without an acquire after which idle namespaces are deleted.
        background: run the pool's thread (restores, spares, draining); without it
            :meth:`release` restores synchronously (tests).

    Hooks: a build creates the namespace, measures it and cross-checks it (:meth:`_build`);
    a lease checks the resource-version fingerprint and grants fresh credentials; a release
    revokes them (proved); the restore makes the NetworkPolicies pristine; the verification
    compares the object snapshot and the measured matrix and runs the cross-check.
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
        size = pool_size("k8s", on_by_default=ON_BY_DEFAULT, size=POOL_SIZE) or POOL_SIZE
        super().__init__(
            "k8s namespace",
            max_idle=int(max_idle if max_idle is not None else size),
            spare=int(spare if spare is not None else _env_number("NETARENA_K8S_POOL_SPARE", 1)),
            idle_s=float(idle_s if idle_s is not None
                         else _env_number("NETARENA_K8S_POOL_IDLE_S", 20.0)),
            background=background,
            acquire_wait_s=ACQUIRE_WAIT_S,
        )
        self.cluster = cluster
        self.owner = _owner_id()
        try:
            self.incarnation: str | None = _incarnation(cluster)
        except OSError:
            self.incarnation = None
        self._policies = manifests.healthy_policies()
        self._sweep_orphans()

    def acquire(self, request: None = None) -> EpisodeNamespace:
        """A verified healthy namespace with fresh agent credentials, owned by the caller
        until :meth:`release`.

        Raises:
            EmulatorError: preparing a namespace failed or its healthy state did not verify
                (:class:`apps.k8s.crosscheck.CrossCheckError` for a cross-check
                disagreement); the namespace is deleted first.
        """
        return super().acquire(None)

    # ------------------------------------------------------------------ hooks

    def _build(self, request: None) -> tuple[EpisodeNamespace, Pristine]:
        """Create and verify a healthy namespace (no agent credentials) and its record.

        Raises:
            EmulatorError: creation or verification failed (the namespace is deleted).
        """
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
            return ns, Pristine(ns.snapshot(), matrix, ns.fingerprint())
        except BaseException:
            try:
                ns.delete()
            except Exception as del_exc:  # noqa: BLE001 - report the first error
                self._log("deleting %s: %s", ns.name, del_exc)
            raise

    def _attach(self, env: EpisodeNamespace, record: Pristine) -> None:
        try:
            env.grant("agent-" + secrets.token_hex(4))
        except Exception as exc:
            raise EmulatorError(f"credentials for {env.name}: {exc}") from exc

    def _detach(self, env: EpisodeNamespace) -> None:
        env.revoke()

    def _unchanged(self, env: EpisodeNamespace, record: Pristine) -> bool:
        return env.fingerprint() == record.fingerprint

    def _restore(self, env: EpisodeNamespace, record: Pristine) -> list[str]:
        missing = agent_writable_resources() - RESTORERS
        if missing:
            return [f"no restorer for {sorted(missing)}"]
        env.restore_policies(self._policies, record.snapshot)
        return []

    def _verify(self, env: EpisodeNamespace, record: Pristine) -> list[str]:
        env.wait()
        snapshot = env.snapshot()
        if snapshot != record.snapshot:
            changed = sorted(k for k in snapshot.keys() | record.snapshot.keys()
                             if snapshot.get(k) != record.snapshot.get(k))
            return [f"objects differ from the pristine snapshot: {changed[:10]}"]
        matrix, _apps = env.measure()
        if matrix != record.matrix:
            return ["measured matrix differs from the pristine matrix"]
        crosscheck.check(env.rest.api, env.name, matrix, env.last_endpoints, self.cluster.config)
        record.fingerprint = env.fingerprint()
        return []

    def _destroy(self, env: EpisodeNamespace, timeout_s: float | None) -> None:
        env.created = True
        if timeout_s is None:
            env.delete()
        else:
            env.delete(timeout_s)

    def _describe(self, env: EpisodeNamespace) -> str:
        return env.name

    def _host_gone(self) -> bool:
        """The cluster was restarted (a new CA) or its state removed: its namespaces went."""
        try:
            return _incarnation(self.cluster) != self.incarnation
        except OSError:
            return True

    # ------------------------------------------------------------------ internals

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


def _incarnation(cluster: Cluster) -> str:
    """Identity of the running cluster: its CA (a new ``up`` after ``down`` makes a new one)."""
    return hashlib.sha256((cluster.config.pki_dir / "ca.crt").read_bytes()).hexdigest()


_POOLS: PoolRegistry[NamespacePool] = PoolRegistry()


def namespace_pool(cluster: Cluster, **options: Any) -> NamespacePool:
    """The process's pool for ``cluster`` (created on first use; replaced, without deleting
    anything, when the cluster was restarted since: its namespaces went with it). It is shut
    down at process exit (:mod:`evaluator.reset_pool`: the hook is registered anew with each
    pool, so it runs before the Kubernetes client's own exit hook, which removes the
    certificate files a deletion needs); a forked child starts without it."""
    incarnation = _incarnation(cluster)
    return _POOLS.get(
        str(cluster.config.state_dir),
        lambda: NamespacePool(cluster, **options),
        keep=lambda pool: pool.incarnation == incarnation,
    )


def shutdown_pools() -> None:
    """Shut every namespace pool of this process down (they are also shut down at exit)."""
    for pool in _POOLS.pop_all():
        pool.shutdown(SHUTDOWN_TIMEOUT_S)
