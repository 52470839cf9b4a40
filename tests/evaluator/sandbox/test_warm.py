"""The warm path of evaluator.sandbox (docs/sandbox.md "Warm path").

Every call forked from the worker's zygote must be as isolated as a cold bubblewrap sandbox:
its own processes, files, namespaces and uid, nothing left for the next call, and the zygote
itself out of reach. Real bubblewrap and cgroups throughout; ``test_sandbox.py`` runs the
whole hostile suite against the same (default) warm path.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import networkx as nx
import pytest

from evaluator.sandbox import (
    SandboxLimits,
    SandboxSetupError,
    SharedArgument,
    _zygote,
    run_function,
)
from tests.evaluator.sandbox.test_sandbox import (  # noqa: F401 - autouse fixtures
    FAST,
    _needs_bwrap,
    _no_leftovers,
    malt_like_graph,
    run,
)


@pytest.fixture(autouse=True)
def _warm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_zygote.WARM_ENV, "1")


def _zygote_now() -> _zygote.Zygote:
    zygote = _zygote._zygotes.get(os.getpid())
    assert zygote is not None, "no zygote after a warm call"
    return zygote


def _zygote_host_pid(zygote: _zygote.Zygote) -> int:
    """Host pid of the zygote's interpreter (below bubblewrap's monitor and its pid 1)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    for pid, parent in parents.items():
        if parents.get(parent) == zygote.proc.pid:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"--zygote" in handle.read():
                    return pid
    raise AssertionError("zygote process not found")


def test_calls_use_the_warm_path_and_the_cold_switch_works(monkeypatch) -> None:
    warm = run("def f(x):\n    return x + 1\n", 1)
    assert warm.ok and warm.value == 2 and "warm" in warm.controls
    monkeypatch.setenv(_zygote.WARM_ENV, "0")
    cold = run("def f(x):\n    return x + 1\n", 1)
    assert cold.ok and cold.value == 2 and "warm" not in cold.controls
    assert set(warm.controls) - {"warm"} == set(cold.controls)


def test_concurrent_calls_see_neither_processes_nor_files_of_each_other() -> None:
    code = (
        "import os, time\n"
        "def f(name):\n"
        "    open('/tmp/' + name, 'w').write(name)\n"
        "    time.sleep(0.8)\n"
        "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "    return [sorted(os.listdir('/tmp')), pids, os.getuid(),\n"
        "            os.readlink('/proc/self/ns/net'), os.readlink('/proc/self/ns/mnt')]\n"
    )
    limits = SandboxLimits(wall_timeout_s=10.0)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda n: run(code, f"call-{n}", limits=limits), range(3)))
    assert all(r.ok for r in results), results
    for n, result in enumerate(results):
        files, pids, _, _, _ = result.value
        # only its own scratch file (other entries can only be mount points of read-only binds,
        # e.g. a checkout under /tmp, which bubblewrap creates in the call's private /tmp)
        assert [f for f in files if f.startswith("call-")] == [f"call-{n}"], files
        assert pids == [1, 2]  # only its own pid 1 and itself
    assert len({r.value[2] for r in results}) == 3  # a uid per call
    assert len({r.value[3] for r in results}) == 3  # a network namespace per call
    assert len({r.value[4] for r in results}) == 3  # a mount namespace per call


def test_state_of_one_call_is_absent_in_the_next_including_the_shared_argument() -> None:
    shared = SharedArgument(malt_like_graph(2, 3))
    first = (
        "import sys, builtins\n"
        "def f(g):\n"
        "    g.remove_node('ju1.a1.m1')\n"
        "    g.graph['mark'] = 1\n"
        "    sys.modules['networkx'].number_of_nodes = lambda g: -1\n"
        "    builtins.leaked = True\n"
        "    open('/tmp/mark', 'w').write('x')\n"
        "    return len(g)\n"
    )
    result = run_function(first, "f", shared, limits=FAST, preamble="import networkx as nx")
    assert result.ok and result.value == 1 + 2 + 2 * 3 - 1, result
    second = (
        "import builtins, os\n"
        "def f(g):\n"
        "    return [nx.number_of_nodes(g), 'ju1.a1.m1' in g, 'mark' in g.graph,\n"
        "            hasattr(builtins, 'leaked'), os.path.exists('/tmp/mark')]\n"
    )
    result = run_function(second, "f", shared, limits=FAST, preamble="import networkx as nx")
    assert result.ok and result.value == [1 + 2 + 2 * 3, True, False, False, False], result


def test_a_different_shared_argument_replaces_the_zygote() -> None:
    small, large = SharedArgument(malt_like_graph(1, 1)), SharedArgument(malt_like_graph(3, 2))
    code = "def f(g):\n    return len(g)\n"
    assert run(code, small).value == 3
    first = _zygote_now()
    assert first.digest == small.digest
    assert run(code, large).value == 1 + 3 + 3 * 2
    second = _zygote_now()
    assert second is not first and second.digest == large.digest
    assert first.proc.poll() is not None or first.died(within_s=5.0)  # the old one ended
    assert run("def f(x):\n    return x\n", 7).value == 7  # plain arguments: no shared copy


def test_shared_argument_on_the_cold_path(monkeypatch) -> None:
    monkeypatch.setenv(_zygote.WARM_ENV, "0")
    graph = malt_like_graph(2, 2)
    result = run("def f(g):\n    return sorted(g.nodes)[:2]\n", SharedArgument(graph))
    assert result.ok and result.value == sorted(graph.nodes)[:2]
    assert "warm" not in result.controls


def test_unpicklable_shared_argument_is_a_setup_error() -> None:
    with pytest.raises(SandboxSetupError, match="pickled"):
        SharedArgument(lambda: 1)


def test_a_killed_zygote_is_restarted() -> None:
    assert run("def f(x):\n    return 1\n").ok
    zygote = _zygote_now()
    os.kill(_zygote_host_pid(zygote), signal.SIGKILL)
    zygote.proc.wait(timeout=5.0)  # bubblewrap ends with it
    result = run("def f(x):\n    return 2\n")
    assert result.ok and result.value == 2 and "warm" in result.controls
    assert _zygote_now() is not zygote


def test_a_zygote_dying_during_a_call_is_an_infrastructure_error() -> None:
    from evaluator.sandbox import SandboxError

    assert run("def f(x):\n    return 1\n").ok
    victim = _zygote_host_pid(_zygote_now())

    def kill_later() -> None:
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)

    killer = ThreadPoolExecutor(max_workers=1)
    future = killer.submit(kill_later)
    try:
        with pytest.raises(SandboxError, match="zygote died"):
            run("import time\ndef f(x):\n    time.sleep(5)\n", limits=SandboxLimits(10.0))
    finally:
        future.result()
        killer.shutdown()
    assert run("def f(x):\n    return 3\n").value == 3


def test_the_agent_cannot_reach_the_zygote_or_its_spare() -> None:
    code = (
        "import os, signal\n"
        "def f(x):\n"
        "    out = {'ppid': os.getppid(), 'visible': sorted(\n"
        "        int(p) for p in os.listdir('/proc') if p.isdigit())}\n"
        "    try:\n"
        "        os.kill(1, signal.SIGKILL)\n"
        "        out['kill1'] = 'sent'\n"
        "    except OSError as exc:\n"
        "        out['kill1'] = type(exc).__name__\n"
        "    out['fds'] = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"
        "    return out\n"
    )
    result = run(code)
    assert result.ok, result
    assert result.value["ppid"] == 1 and result.value["visible"] == [1, 2]
    assert result.value["kill1"] == "PermissionError"
    # stdin, stdout, stderr, the result channel and the fd of the listing itself: no control
    # or status socket of the zygote
    assert result.value["fds"] == [0, 1, 2, 3, 4]
    assert run("def f(x):\n    return 'next'\n").value == "next"


def test_warm_calls_are_fast() -> None:
    """A warm call with a MALT-sized shared graph costs <= 50 ms (median).

    Generous bound for a loaded CI machine; benchmarks/bench_sandbox.py has the figures."""
    shared = SharedArgument(malt_like_graph(switches=320, ports=16))
    code = "def f(g):\n    return g.number_of_nodes()\n"
    run_function(code, "f", shared, limits=FAST, preamble="import networkx as nx")
    walls = []
    for _ in range(9):
        t0 = time.perf_counter()
        result = run_function(code, "f", shared, limits=FAST, preamble="import networkx as nx")
        walls.append(time.perf_counter() - t0)
        assert result.ok and result.value == 5441
    assert sorted(walls)[len(walls) // 2] < 0.2, walls


def test_graph_results_are_unchanged_on_the_warm_path() -> None:
    graph = malt_like_graph(4, 4)
    result = run("def f(g):\n    return g\n", SharedArgument(graph))
    assert result.ok
    back = nx.node_link_graph(result.value["__networkx__"], edges="links")
    assert nx.utils.graphs_equal(back, graph)


def test_a_killed_zygote_is_restarted_with_its_shared_argument() -> None:
    shared = SharedArgument(malt_like_graph(2, 2))
    code = "def f(g):\n    return len(g)\n"
    assert run(code, shared).value == 1 + 2 + 2 * 2
    from evaluator.sandbox import SandboxError

    for _ in range(3):
        os.kill(_zygote_host_pid(_zygote_now()), signal.SIGKILL)  # no wait: any path
        try:
            result = run(code, shared)
        except SandboxError as exc:  # the call had started before the zygote's end reached it
            assert "died during the call" in str(exc)
            result = run(code, shared)
        assert result.ok and result.value == 1 + 2 + 2 * 2, result
        assert _zygote_now().digest == shared.digest


def test_calls_leak_no_host_fds() -> None:
    shared = SharedArgument(malt_like_graph(1, 2))
    assert run("def f(x):\n    return 1\n", shared).ok
    before = len(os.listdir("/proc/self/fd"))
    for index in range(12):
        argument = shared if index % 2 else index
        assert run("def f(x):\n    return 1\n", argument).ok
    sleeper = run("import time\ndef f(x):\n    time.sleep(5)\n", limits=SandboxLimits(0.5))
    assert sleeper.failure == "timeout"
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_zygote_and_its_spare_end_with_the_worker() -> None:
    """A worker killed without clean-up (os._exit skips atexit) takes its zygote along."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import os, sys\n"
        "from evaluator.sandbox import run_function, _zygote\n"
        "assert run_function('def f(x):\\n    return 1\\n', 'f', 0).ok\n"
        "print(_zygote._zygotes[os.getpid()].proc.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    bwrap_pid = int(out.stdout.strip())
    deadline = time.monotonic() + 5.0
    while Path(f"/proc/{bwrap_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{bwrap_pid}").exists(), "the zygote outlived its worker"
