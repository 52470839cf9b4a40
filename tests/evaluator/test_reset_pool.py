"""The reset pool abstraction (evaluator/reset_pool/) on a fake environment: leases,
restore and verification, discard and rebuild on a failed verification, stats, the pool's
thread, shutdown, the exit hook and the fork hook."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evaluator.app import EmulatorError
from evaluator.reset_pool import PoolRegistry, ResetPool, pool_env, pool_size, shutdown_all


@dataclass
class FakeEnv:
    """An environment whose whole state is ``state``; ``sticky`` keys survive a restore."""

    key: str
    serial: int
    state: dict[str, int] = field(default_factory=lambda: {"routes": 1})
    sticky: set[str] = field(default_factory=set)
    destroyed: bool = False
    forgotten: bool = False
    attached: int = 0
    detached: int = 0


class FakePool(ResetPool[str, FakeEnv, dict[str, int]]):
    def __init__(self, **options: object) -> None:
        super().__init__("fake", **options)  # type: ignore[arg-type]
        self.serial = 0
        self.fail_attach = False
        self.fail_detach = False
        self.fail_destroy = False
        self.restore_raises = False

    def _build(self, request: str) -> tuple[FakeEnv, dict[str, int]]:
        self.serial += 1
        env = FakeEnv(request, self.serial)
        return env, dict(env.state)

    def _restore(self, env: FakeEnv, record: dict[str, int]) -> list[str]:
        if self.restore_raises:
            raise OSError("restore script died")
        for key in list(env.state):
            if key not in env.sticky:
                del env.state[key]
        env.state.update({k: v for k, v in record.items() if k not in env.sticky})
        return []

    def _verify(self, env: FakeEnv, record: dict[str, int]) -> list[str]:
        return [f"{k} differs" for k in sorted(set(env.state) | set(record))
                if env.state.get(k) != record.get(k)]

    def _destroy(self, env: FakeEnv, timeout_s: float | None) -> None:
        if self.fail_destroy:
            raise RuntimeError("host refused")
        env.destroyed = True

    def _attach(self, env: FakeEnv, record: dict[str, int]) -> None:
        if self.fail_attach:
            raise RuntimeError("no credentials")
        env.attached += 1

    def _detach(self, env: FakeEnv) -> None:
        if self.fail_detach:
            raise RuntimeError("revocation not proved")
        env.detached += 1

    def _unchanged(self, env: FakeEnv, record: dict[str, int]) -> bool:
        return env.state == record

    def _forget(self, env: FakeEnv) -> None:
        env.forgotten = True

    def _describe(self, env: FakeEnv) -> str:
        return f"env{env.serial}"


def test_a_restored_and_verified_environment_is_leased_again() -> None:
    pool = FakePool(max_idle=1)
    env = pool.acquire("2x2")
    env.state["routes"] = 7
    env.state["rule"] = 1
    assert pool.release(env) is True
    assert env.state == {"routes": 1} and env.detached == 1
    assert pool.idle_count() == 1
    assert pool.acquire("2x2") is env and env.attached == 2
    other = pool.acquire("4x4")  # another key builds its own
    assert other is not env
    s = pool.stats
    assert (s.built, s.leased, s.reused, s.restored, s.rebuilds, s.destroyed) == (2, 3, 1, 1, 0, 0)
    assert len(s.restore_s) == 1 and len(s.verify_s) == 1 and len(s.build_s) == 2
    assert all(x >= 0 for x in (*s.restore_s, *s.verify_s, *s.acquire_s))
    pool.shutdown()


def test_a_failed_verification_discards_and_the_next_lease_rebuilds() -> None:
    pool = FakePool(max_idle=2)
    env = pool.acquire("2x2")
    env.state["secret"] = 1
    env.sticky.add("secret")  # what no restore takes back
    assert pool.release(env) is False
    assert env.destroyed and pool.record(env) is None and pool.idle_count() == 0
    assert pool.stats.rebuilds == 1 and pool.stats.restored == 0 and pool.stats.destroyed == 1
    assert any("env1: secret differs" in f for f in pool.stats.failures), pool.stats.failures
    fresh = pool.acquire("2x2")
    assert fresh is not env and fresh.state == {"routes": 1} and pool.stats.built == 2
    pool.restore_raises = True
    assert pool.release(fresh) is False and fresh.destroyed
    assert pool.stats.rebuilds == 2
    assert any("restore failed: OSError" in f for f in pool.stats.failures)


def test_an_idle_environment_changed_since_its_verification_is_not_leased() -> None:
    pool = FakePool(max_idle=1)
    env = pool.acquire("k")
    pool.release(env)
    env.state["routes"] = 9  # changed while idle
    again = pool.acquire("k")
    assert again is not env and env.destroyed
    assert pool.stats.stale == 1 and pool.stats.reused == 0 and pool.stats.built == 2


def test_surplus_verified_environments_are_destroyed_and_release_is_idempotent() -> None:
    pool = FakePool(max_idle=1)
    first, second = pool.acquire("k"), pool.acquire("k")
    assert first is not second
    assert pool.release(first) is True
    assert pool.release(second) is False and second.destroyed
    assert pool.stats.restored == 2 and pool.stats.rebuilds == 0
    assert pool.release(second) is False and pool.release(first) is False
    assert pool.stats.restored == 2
    with pytest.raises(ValueError):
        FakePool(max_idle=-1)


def test_attach_and_detach_failures_discard_the_environment() -> None:
    pool = FakePool(max_idle=1)
    pool.fail_attach = True
    with pytest.raises(EmulatorError, match="env1: no credentials"):
        pool.acquire("k")
    assert pool.owned() == [] and pool.stats.destroyed == 1 and pool.stats.leased == 0
    pool.fail_attach = False
    env = pool.acquire("k")
    pool.fail_detach = True
    assert pool.release(env) is False and env.destroyed and pool.idle_count() == 0
    env = pool.acquire("k")
    pool.fail_destroy = True  # not detached and not destroyed: the caller must know
    with pytest.raises(RuntimeError, match="host refused"):
        pool.release(env)


def test_shutdown_destroys_idle_and_leased_environments() -> None:
    pool = FakePool(max_idle=2)
    idle, leased = pool.acquire("k"), pool.acquire("k")
    pool.release(idle)
    pool.shutdown()
    assert idle.destroyed and leased.destroyed and pool.owned() == []
    assert pool.release(leased) is False
    with pytest.raises(EmulatorError, match="shut down"):
        pool.acquire("k")
    pool.shutdown()  # idempotent
    assert pool.stats.destroyed == 2


def test_concurrent_leases_never_share_an_environment() -> None:
    pool = FakePool(max_idle=2)
    holders: dict[int, int] = {}
    clashes: list[int] = []
    guard = threading.Lock()

    def episodes() -> None:
        for _ in range(50):
            env = pool.acquire("k")
            with guard:
                if id(env) in holders:
                    clashes.append(id(env))
                holders[id(env)] = 1
            env.state["routes"] += 1
            with guard:
                del holders[id(env)]
            pool.release(env)

    threads = [threading.Thread(target=episodes) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not clashes
    assert pool.stats.leased == 150 and pool.stats.rebuilds == 0
    assert pool.stats.built <= 3 and pool.stats.reused == 150 - pool.stats.built


def test_background_restores_spares_and_draining() -> None:
    pool = FakePool(max_idle=2, spare=1, idle_s=0.5, background=True, acquire_wait_s=5.0)
    env = pool.acquire("k")
    env.state["routes"] = 3
    assert pool.release(env) is True  # queued: restored on the pool's thread
    assert pool.wait_quiet(5.0)
    assert env.state == {"routes": 1} and pool.stats.restored == 1
    assert pool.acquire("k") is env  # waits for nothing: it is idle again
    deadline = time.monotonic() + 5
    while pool.idle_count() < 1:  # a spare is built while "k" has demand
        assert time.monotonic() < deadline, pool.stats
        time.sleep(0.02)
    spare = pool.owned()[0] if pool.owned()[0] is not env else pool.owned()[1]
    assert spare is not env and pool.stats.built == 2
    pool.release(env)
    while pool.owned() or pool.stats.drained < 2:  # no demand for 0.5 s: drained
        assert time.monotonic() < deadline + 5, (pool.owned(), pool.stats)
        time.sleep(0.05)
    assert spare.destroyed and env.destroyed
    pool.shutdown()


def test_pool_size_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pool_env("route") == "NETARENA_ROUTE_POOL"
    monkeypatch.delenv("NETARENA_FAKE_POOL", raising=False)
    assert pool_size("fake", on_by_default=False, size=2) == 0
    assert pool_size("fake", on_by_default=True, size=4) == 4
    for raw, size in (("3", 3), ("0", 0), ("-2", 0), ("off", 0), ("", 4)):
        monkeypatch.setenv("NETARENA_FAKE_POOL", raw)
        assert pool_size("fake", on_by_default=True, size=4) == size, raw


def test_a_forked_child_forgets_the_parents_environments() -> None:
    pool = FakePool(max_idle=1)
    registry: PoolRegistry[FakePool] = PoolRegistry()
    assert registry.get("one", lambda: pool) is pool
    idle, leased = pool.acquire("k"), pool.acquire("k")
    pool.release(idle)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        ok = (pool.owned() == [] and idle.forgotten and leased.forgotten
              and not idle.destroyed and registry.peek("one") is None
              and pool.acquire("k") not in (idle, leased))
        shutdown_all()
        os._exit(0 if ok and not idle.destroyed and not leased.destroyed else 1)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not idle.forgotten and not idle.destroyed  # the parent's are untouched
    assert pool.acquire("k") is idle and pool.stats.reused == 1
    pool.shutdown()


def test_every_pool_is_shut_down_at_interpreter_exit(tmp_path: Path) -> None:
    marker = tmp_path / "destroyed"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from tests.evaluator.test_reset_pool import FakePool

        class Marking(FakePool):
            def _destroy(self, env, timeout_s):
                with open({str(marker)!r}, "a") as handle:
                    handle.write(f"env{{env.serial}}\\n")

        pool = Marking(max_idle=1)
        idle, leased = pool.acquire("k"), pool.acquire("k")
        pool.release(idle)
    """)
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], cwd=root, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(root)})
    assert sorted(marker.read_text().split()) == ["env1", "env2"]
