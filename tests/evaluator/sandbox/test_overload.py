"""A timeout on a host too busy to run agent code is infrastructure; the agent's own load,
sleeping or spinning on an idle host, stays the agent's timeout (``evaluator.sandbox._load``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from evaluator.sandbox import SandboxLimits, SandboxOverloadedError, run_function
from evaluator.sandbox._load import (
    MIN_SAMPLES,
    OVERLOAD_RUNNABLE_PER_CPU,
    LoadMeter,
    procs_running,
    run_delay_ns,
    running_tasks,
)
from tests.conftest import require_root, require_tool

SPIN = "def f(x):\n    while True:\n        pass\n"


def test_running_tasks_counts_only_runnable_ones() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        assert running_tasks([os.getpid()]) == 1  # this thread, reading
        assert running_tasks([sleeper.pid]) == 0
        assert running_tasks([2**22 + 12345]) == 0  # no such task
        assert run_delay_ns(sleeper.pid) is not None and run_delay_ns(2**22 + 12345) is None
        assert procs_running() >= 1
    finally:
        sleeper.kill()
        sleeper.wait()


def test_meter_subtracts_the_runs_own_tasks_and_needs_enough_samples() -> None:
    spinners = _spinners(2)
    try:
        time.sleep(0.2)
        own = LoadMeter(lambda: [p.pid for p in spinners], cpus=1)
        foreign = LoadMeter(lambda: [], cpus=1)
        for step in range(MIN_SAMPLES + 2):
            now = step * 1.0
            own.sample(now)
            foreign.sample(now)
            foreign.sample(now + 0.01)  # too soon: not taken
        assert len(foreign.samples) == MIN_SAMPLES + 2
        # the run's own spinners are not the host's load; when foreign they are
        assert foreign.mean() >= own.mean() + 1.5
        assert own.wait_s() >= 0.0 and foreign.wait_s() == 0.0
        assert not LoadMeter(lambda: [], cpus=1).overloaded(1.0)  # no samples, no excuse
    finally:
        _stop(spinners)


def _spinners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` spinning processes, each in its own session (so each is its own scheduling
    group under autogroup, like separate workers, rather than one group sharing a CPU)."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]


def _stop(spinners: list[subprocess.Popen[bytes]]) -> None:
    for proc in spinners:
        proc.kill()
    for proc in spinners:
        proc.wait()


@pytest.fixture
def busy_host() -> Iterator[None]:
    """Two spinning trusted processes per CPU beside the sandbox (load well above the
    threshold of 1.5 other runnable tasks per CPU)."""
    cpus = len(os.sched_getaffinity(0))
    spinners = _spinners(max(2, round((OVERLOAD_RUNNABLE_PER_CPU + 1.0) * cpus)))
    time.sleep(0.3)
    try:
        yield
    finally:
        _stop(spinners)


@pytest.mark.root
@pytest.mark.slow
def test_spinning_code_starved_by_the_host_is_an_infrastructure_failure(busy_host: None) -> None:
    require_tool("bwrap")
    require_root()
    with pytest.raises(SandboxOverloadedError, match="overloaded host"):
        run_function(SPIN, "f", None, limits=SandboxLimits(wall_timeout_s=3.0, cpu_time_s=30.0))


@pytest.mark.root
@pytest.mark.slow
def test_sleeping_code_on_a_busy_host_still_times_out_as_its_own_failure(busy_host: None) -> None:
    require_tool("bwrap")
    require_root()
    code = "import time\ndef f(x):\n    time.sleep(30)\n"
    result = run_function(code, "f", None, limits=SandboxLimits(wall_timeout_s=3.0))
    assert result.failure == "timeout"


@pytest.mark.root
@pytest.mark.slow
def test_agent_load_of_its_own_making_is_never_excused() -> None:
    """Spinning processes started by the agent itself (beside its own spinning loop) contend
    only with the agent: they are in its cgroup, so the host does not count as busy."""
    require_tool("bwrap")
    require_root()
    code = (
        "import os\n"
        "def f(x):\n"
        "    for _ in range(5):\n"
        "        if os.fork() == 0:\n"
        "            break\n"
        "    while True:\n"
        "        pass\n"
    )
    limits = SandboxLimits(wall_timeout_s=3.0, cpu_time_s=30.0, max_processes=8)
    result = run_function(code, "f", None, limits=limits)
    assert result.failure == "timeout", result


FORKING_SPIN = (
    "import os\n"
    "def f(x):\n"
    "    for _ in range(5):\n"
    "        if os.fork() == 0:\n"
    "            break\n"
    "    while True:\n"
    "        pass\n"
)


@pytest.mark.root
@pytest.mark.slow
def test_an_agents_concurrent_episodes_never_excuse_each_others_timeouts() -> None:
    """Two episodes of one agent (two workers) each spin in six processes: each run sees the
    other's spinners on the host, but they are sandboxed agent code, so both timeouts are
    the agent's (before, both ended as infrastructure and went unscored)."""
    require_tool("bwrap")
    require_root()
    limits = SandboxLimits(wall_timeout_s=3.0, cpu_time_s=30.0, max_processes=8)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_function, FORKING_SPIN, "f", None, limits=limits)
                   for _ in range(2)]
        results = [future.result() for future in futures]  # SandboxOverloadedError would raise
    assert [r.failure for r in results] == ["timeout", "timeout"], results


def test_meter_subtracts_every_sandboxed_task_it_is_given() -> None:
    spinners = _spinners(2)
    try:
        time.sleep(0.2)
        pids = [p.pid for p in spinners]
        # the run owns one spinner; the other belongs to another sandboxed run
        meter = LoadMeter(lambda: pids[:1], cpus=1, agent_tasks=lambda: pids)
        own_only = LoadMeter(lambda: pids[:1], cpus=1)
        for step in range(MIN_SAMPLES):
            meter.sample(step * 1.0)
            own_only.sample(step * 1.0)
        assert own_only.mean() >= meter.mean() + 0.5
    finally:
        _stop(spinners)
