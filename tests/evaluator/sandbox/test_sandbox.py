"""Behaviour of evaluator.sandbox: happy paths and hostile agent code (docs/architecture.md §8).

Every hostile case must end as a clean failed ``SandboxResult`` (or an ok result proving the
attempt had no effect), the evaluator process must survive, and no sandbox process may outlive
its run. Real bubblewrap is used throughout (no mocks); limits are small to keep runs short.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import networkx as nx
import pytest

from evaluator.sandbox import (
    SandboxExitError,
    SandboxLimits,
    SandboxSetupError,
    _bwrap,
    _io,
    _run,
    run_function,
)
from tests.conftest import require, require_root, require_tool

FAST = SandboxLimits(wall_timeout_s=2.0, cpu_time_s=2.0, memory_bytes=1024**3)
NX = "import networkx as nx"


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_tool("bwrap")
    require_tool("setpriv")
    require_root()


def sandbox_processes(uids: set[int]) -> list[int]:
    """Host pids whose real uid is one of ``uids`` (the per-run uids of this test's runs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) in uids:
                found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _no_leftovers(_needs_bwrap: None, monkeypatch: pytest.MonkeyPatch):
    """Fail the test if any process of its sandbox runs is still alive shortly after it."""
    uids: set[int] = set()
    allocate = _bwrap.allocate_uid

    def recording_allocate() -> int:
        uid = allocate()
        uids.add(uid)
        return uid

    monkeypatch.setattr(_bwrap, "allocate_uid", recording_allocate)
    yield
    deadline = time.monotonic() + 2.0
    while sandbox_processes(uids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(uids) == [], "a sandbox process outlived its run"


def run(code: str, argument: object = None, limits: SandboxLimits = FAST, **kw):
    return run_function(code, "f", argument, limits=limits, **kw)


def malt_like_graph(switches: int = 8, ports: int = 16) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_node("ju1.a1.m1", name="ju1.a1.m1", type=["EK_AGG_BLOCK"])
    for s in range(switches):
        sw = f"ju1.a1.m1.s{s}c1"
        graph.add_node(sw, name=sw, type=["EK_PACKET_SWITCH"])
        graph.add_edge("ju1.a1.m1", sw, type="RK_CONTAINS")
        for p in range(ports):
            port = f"{sw}.p{p}"
            graph.add_node(port, name=port, type=["EK_PORT"], physical_capacity_bps=1e9)
            graph.add_edge(sw, port, type="RK_CONTAINS")
    return graph


# --- happy paths -------------------------------------------------------------------------


def test_graph_in_graph_out() -> None:
    graph = malt_like_graph()
    code = (
        "def process_graph(graph_data):\n"
        "    g = graph_data.copy()\n"
        "    g.remove_node('ju1.a1.m1.s0c1.p0')\n"
        "    g.add_node('new_port', name='new_port', type=['EK_PORT'], physical_capacity_bps=1e9)\n"
        "    g.add_edge('ju1.a1.m1.s1c1', 'new_port', type='RK_CONTAINS')\n"
        "    return {'type': 'graph', 'data': nx.node_link_data(g, edges='links'),\n"
        "            'updated_graph': g}\n"
    )
    result = run_function(code, "process_graph", graph, limits=FAST, preamble=NX)
    assert result.ok, result.error
    back = nx.node_link_graph(result.value["updated_graph"]["__networkx__"], edges="links")
    assert isinstance(back, nx.DiGraph)
    assert back.number_of_nodes() == graph.number_of_nodes()
    assert "ju1.a1.m1.s0c1.p0" not in back and back.nodes["new_port"]["type"] == ["EK_PORT"]
    assert back.edges["ju1.a1.m1.s1c1", "new_port"]["type"] == "RK_CONTAINS"
    assert result.value["data"]["links"]  # node_link_data dicts pass through as plain JSON
    # the caller's graph is untouched (passed by value)
    assert "ju1.a1.m1.s0c1.p0" in graph and "new_port" not in graph


def test_list_number_and_set_conversion() -> None:
    code = (
        "def f(x):\n"
        "    print('working on', x)\n"
        "    return [('b', 2.5), ('a', 1)], {3, 1, 2}, x * 2, 'text', None, True\n"
    )
    result = run(code, 21)
    assert result.ok, result.error
    assert result.value == [[["b", 2.5], ["a", 1]], [1, 2, 3], 42, "text", None, True]
    assert result.stdout == "working on 21\n"
    assert 0 < result.exec_s < result.wall_s


def test_number_out_and_preamble_namespace() -> None:
    result = run(
        "def f(g):\n    return nx.number_of_nodes(g)\n", malt_like_graph(2, 3), preamble=NX
    )
    assert result.ok and result.value == 1 + 2 + 2 * 3


def test_exception_carries_agent_traceback() -> None:
    code = "def helper(v):\n    return v / 0\n\ndef f(x):\n    return helper(x)\n"
    result = run(code, 1)
    assert not result.ok and result.failure == "exception" and result.value is None
    assert "ZeroDivisionError" in result.error
    assert 'File "<agent>", line 2, in helper' in result.error
    assert "return v / 0" in result.error
    assert "sandbox_child" not in result.error  # harness frames are hidden


def test_syntax_error_is_an_exception() -> None:
    result = run("def f(x):\n    return (\n", 1)
    assert result.failure == "exception" and "SyntaxError" in result.error


@pytest.mark.parametrize("code", ["x = 1\n", "f = 3\n", ""])
def test_missing_function(code: str) -> None:
    result = run(code, 1)
    assert result.failure == "no_function" and "'f'" in result.error


def test_sandbox_identity_has_no_privileges_and_no_network() -> None:
    code = (
        "import os, socket\n"
        "def f(x):\n"
        "    status = open('/proc/self/status').read()\n"
        "    fields = dict(l.split(':', 1) for l in status.splitlines())\n"
        "    return {'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),\n"
        "            'cap_eff': fields['CapEff'].strip(), 'cap_bnd': fields['CapBnd'].strip(),\n"
        "            'nnp': fields['NoNewPrivs'].strip(), 'pid': os.getpid(),\n"
        "            'ifaces': [n for _, n in socket.if_nameindex()], 'cwd': os.getcwd(),\n"
        "            'root': sorted(os.listdir('/'))}\n"
    )
    result = run(code)
    assert result.ok, result.error
    value = result.value
    assert value["uid"] >= _bwrap.UID_BASE and value["gid"] == value["uid"]
    assert value["groups"] == []
    assert int(value["cap_eff"], 16) == 0 and int(value["cap_bnd"], 16) == 0
    assert value["nnp"] == "1"
    assert value["pid"] < 10  # own pid namespace
    assert value["ifaces"] == ["lo"]
    assert value["cwd"] == "/tmp"
    assert "etc" not in value["root"] and "home" not in value["root"]


# --- hostile: time, processes, memory, output --------------------------------------------


def test_busy_loop_hits_cpu_or_wall_limit() -> None:
    result = run("def f(x):\n    while True:\n        pass\n", limits=SandboxLimits(1.5, 1.0))
    assert result.failure in {"cpu", "timeout"}, result
    assert result.exec_s < 5


def test_busy_loop_hits_wall_timeout_when_cpu_budget_is_larger() -> None:
    limits = SandboxLimits(wall_timeout_s=1.0, cpu_time_s=30.0)
    result = run("def f(x):\n    while True:\n        pass\n", limits=limits)
    assert result.failure == "timeout" and "wall_timeout_s=1.0" in result.error
    assert 1.0 <= result.exec_s < 3.0


def test_sleeping_code_times_out_and_cannot_write_a_late_result() -> None:
    code = (
        "import os, sys, time, json\n"
        "def f(x):\n"
        "    time.sleep(3)\n"
        "    fd = int(sys.argv[1])\n"
        '    os.write(fd, b\'{"kind":"result","value":"late"}\\n\')\n'
        "    os._exit(0)\n"
    )
    result = run(code, limits=SandboxLimits(wall_timeout_s=1.0))
    assert result.failure == "timeout" and result.value is None
    assert result.wall_s < 2.9


def test_cpu_limit_via_sigxcpu() -> None:
    code = "def f(x):\n    n = 0\n    while True:\n        n += 1\n"
    result = run(code, limits=SandboxLimits(wall_timeout_s=20.0, cpu_time_s=1.0))
    assert result.failure == "cpu" and "SIGXCPU" in result.error
    assert result.exec_s < 5


def test_fork_bomb_is_contained() -> None:
    code = (
        "import os\n"
        "def f(x):\n"
        "    while True:\n"
        "        try:\n"
        "            os.fork()\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = run(code, limits=SandboxLimits(wall_timeout_s=2.0, cpu_time_s=2.0, max_processes=8))
    assert result.failure in {"timeout", "cpu", "crash", "bad_result"}, result
    assert run("def f(x):\n    return 'alive'\n").value == "alive"


def test_process_limit_refuses_extra_forks() -> None:
    code = (
        "import os, time\n"
        "def f(x):\n"
        "    children = 0\n"
        "    try:\n"
        "        for _ in range(50):\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(30)\n"
        "                os._exit(0)\n"
        "            children += 1\n"
        "    except OSError as exc:\n"
        "        return [children, type(exc).__name__]\n"
        "    return [children, None]\n"
    )
    result = run(code, limits=SandboxLimits(wall_timeout_s=5.0, max_processes=6))
    assert result.ok, result.error
    children, error = result.value
    assert error == "BlockingIOError" and children < 6


def test_background_children_die_with_the_run() -> None:
    code = (
        "import os, time\n"
        "def f(x):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    return 'parent done'\n"
    )
    result = run(code)
    assert result.ok and result.value == "parent done"
    assert result.wall_s < 2.0  # no waiting on the orphan; the fixture checks it is gone


@pytest.mark.parametrize(
    "expression", ["bytearray(10 * 1024**3)", "[0] * (10 * 1024**3)", "' ' * (10 * 1024**3)"]
)
def test_ten_gigabyte_allocation_fails_cleanly(expression: str) -> None:
    result = run(f"def f(x):\n    big = {expression}\n    return len(big)\n")
    assert result.failure == "memory", result
    assert run("def f(x):\n    return 1\n").ok


def test_gradual_allocation_fails_cleanly() -> None:
    code = (
        "def f(x):\n"
        "    chunks = []\n"
        "    while True:\n"
        "        chunks.append(bytearray(50 * 1024**2))\n"
    )
    result = run(code, limits=SandboxLimits(wall_timeout_s=5.0, memory_bytes=512 * 1024**2))
    assert result.failure == "memory", result


def test_one_gigabyte_of_output_is_cut_off() -> None:
    code = (
        "import sys\n"
        "def f(x):\n"
        "    line = 'x' * (1024 * 1024)\n"
        "    for _ in range(1024):\n"
        "        sys.stdout.write(line)\n"
        "    return 'finished'\n"
    )
    limits = SandboxLimits(wall_timeout_s=10.0, output_bytes=256 * 1024)
    result = run(code, limits=limits)
    assert result.failure == "output_limit" and result.value is None
    assert len(result.stdout) + len(result.stderr) == 256 * 1024
    assert result.wall_s < 8


def test_stderr_flood_counts_against_output() -> None:
    code = "import os\ndef f(x):\n    while True:\n        os.write(2, b'e' * 65536)\n"
    result = run(code, limits=SandboxLimits(wall_timeout_s=10.0, output_bytes=100_000))
    assert result.failure == "output_limit"


# --- hostile: filesystem, network, environment, signals -----------------------------------


def test_writes_outside_scratch_are_refused() -> None:
    marker = f"netarena-sandbox-test-{uuid.uuid4().hex}"
    targets = [
        "/etc/" + marker,
        "/usr/" + marker,
        "/" + marker,
        str(Path.cwd() / marker),
        str(Path(_bwrap.sys.prefix) / marker),
    ]
    code = (
        "def f(targets):\n"
        "    outcome = {}\n"
        "    for path in targets:\n"
        "        try:\n"
        "            with open(path, 'w') as fh:\n"
        "                fh.write('pwned')\n"
        "            outcome[path] = 'written'\n"
        "        except OSError as exc:\n"
        "            outcome[path] = type(exc).__name__\n"
        f"    with open('/tmp/{marker}', 'w') as fh:\n"
        "        fh.write('scratch is fine')\n"
        f"    outcome['scratch'] = open('/tmp/{marker}').read()\n"
        "    return outcome\n"
    )
    result = run(code, targets)
    assert result.ok, result.error
    for path in targets:
        assert result.value[path] != "written"
        assert not Path(path).exists()
    assert result.value["scratch"] == "scratch is fine"
    assert not (Path("/tmp") / marker).exists()  # the scratch tmpfs is private and gone


def test_scratch_space_is_capped() -> None:
    code = (
        "def f(x):\n"
        "    written = 0\n"
        "    try:\n"
        "        with open('/tmp/fill', 'wb') as fh:\n"
        "            for _ in range(64):\n"
        "                fh.write(b'0' * (1024 * 1024))\n"
        "                fh.flush()\n"
        "                written += 1\n"
        "    except OSError as exc:\n"
        "        return [exc.errno, written]\n"
        "    return ['filled', written]\n"
    )
    result = run(code, limits=SandboxLimits(scratch_bytes=4 * 1024**2))
    assert result.ok, result.error
    error, written_mib = result.value
    assert error in {errno.EFBIG, errno.ENOSPC} and written_mib <= 4


def test_socket_connect_cannot_reach_the_host() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "def f(port):\n"
        "    out = []\n"
        "    for host in ('127.0.0.1', '192.0.2.1'):\n"
        "        s = socket.socket()\n"
        "        s.settimeout(1)\n"
        "        try:\n"
        "            s.connect((host, port))\n"
        "            out.append('connected')\n"
        "        except OSError as exc:\n"
        "            out.append(type(exc).__name__)\n"
        "    return out\n"
    )
    try:
        result = run(code, port)
        assert result.ok, result.error
        assert "connected" not in result.value
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_parent_environment_is_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = uuid.uuid4().hex
    monkeypatch.setenv("NETARENA_TEST_SECRET", secret)
    code = (
        "import os\n"
        "def f(host_pid):\n"
        "    seen = {'env': dict(os.environ)}\n"
        "    for pid in ('self', '1', str(os.getppid()), str(host_pid)):\n"
        "        try:\n"
        "            seen[pid] = open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1')\n"
        "        except OSError as exc:\n"
        "            seen[pid] = type(exc).__name__\n"
        "    return seen\n"
    )
    result = run(code, os.getpid())
    assert result.ok, result.error
    assert secret not in json.dumps(result.value)
    assert "NETARENA_TEST_SECRET" not in json.dumps(result.value)
    assert result.value[str(os.getpid())] in {"FileNotFoundError", "PermissionError"}


def test_signalling_the_evaluator_or_host_processes_fails() -> None:
    victim = subprocess.Popen(["sleep", "30"])
    code = (
        "import os, signal\n"
        "def f(pids):\n"
        "    out = []\n"
        "    for pid in pids:\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "            out.append('sent')\n"
        "        except OSError as exc:\n"
        "            out.append(type(exc).__name__)\n"
        "    try:\n"
        "        os.kill(-1, signal.SIGKILL)\n"
        "    except OSError as exc:\n"
        "        out.append(type(exc).__name__)\n"
        "    return out\n"
    )
    try:
        result = run(code, [os.getpid(), os.getppid(), victim.pid])
        time.sleep(0.1)
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
        assert result.ok, result
        assert "sent" not in result.value[:3]
    finally:
        victim.send_signal(signal.SIGTERM)
        victim.wait()


def test_killing_the_sandbox_init_is_a_crash() -> None:
    code = "import os, signal\ndef f(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 1\n"
    result = run(code)
    # pid 1 of the namespace belongs to root: the agent's uid may not signal it
    assert result.failure == "exception" and "PermissionError" in result.error


# --- hostile: state leaks and malformed results ------------------------------------------


def test_argument_is_passed_by_value_and_runs_share_no_state() -> None:
    argument = {"items": [1, 2], "nested": {"k": "v"}}
    first = (
        "import builtins\n"
        "LEAK = 'first run'\n"
        "def f(arg):\n"
        "    arg['items'].append(3)\n"
        "    arg['nested'].clear()\n"
        "    builtins.leaked = True\n"
        "    open('/tmp/first-run', 'w').write('x')\n"
        "    return arg\n"
    )
    result = run(first, argument)
    assert result.ok and result.value == {"items": [1, 2, 3], "nested": {}}
    assert argument == {"items": [1, 2], "nested": {"k": "v"}}
    second = (
        "import builtins, os\n"
        "def f(arg):\n"
        "    return ['LEAK' in globals(), hasattr(builtins, 'leaked'),\n"
        "            os.path.exists('/tmp/first-run'), arg]\n"
    )
    result = run(second, argument)
    assert result.ok and result.value == [False, False, False, argument]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("return object()", "object"),
        ("return lambda: 1", "function"),
        ("return {(1, 2): 'tuple key'}", "keys must be"),
        ("l = []\n    l.append(l)\n    return l", "Circular"),
        ("v = []\n    for _ in range(5000):\n        v = [v]\n    return v", "RecursionError"),
        ("return {'x': open('/proc/self/status')}", "TextIOWrapper"),
    ],
)
def test_malformed_results_are_bad_result(body: str, needle: str) -> None:
    result = run(f"def f(x):\n    {body}\n")
    assert result.failure == "bad_result" and needle in result.error, result


def test_hostile_sort_during_encoding_is_bad_result() -> None:
    code = (
        "class Evil:\n"
        "    def __lt__(self, other):\n"
        "        raise SystemExit('no')\n"
        "    def __hash__(self):\n"
        "        return id(self)\n"
        "def f(x):\n"
        "    return {Evil(), Evil()}\n"
    )
    result = run(code)
    assert result.failure == "bad_result"


def test_huge_result_is_refused() -> None:
    limits = SandboxLimits(result_bytes=1024 * 1024)
    result = run("def f(x):\n    return 'x' * (4 * 1024 * 1024)\n", limits=limits)
    assert result.failure == "result_too_large" and result.value is None


def test_agent_recursion_is_an_exception() -> None:
    result = run("def f(x):\n    return f(x + 1)\n", 0)
    assert result.failure == "exception" and "RecursionError" in result.error


def test_none_is_a_value_but_exiting_early_is_a_crash() -> None:
    assert run("def f(x):\n    return None\n").value is None
    assert run("def f(x):\n    pass\n").ok
    result = run("import os\ndef f(x):\n    os._exit(0)\n")
    assert result.failure == "crash" and "no result" in result.error
    result = run("import sys\ndef f(x):\n    sys.exit(0)\n")
    assert result.failure == "exception" and "SystemExit" in result.error


# --- hostile: forging the result channel and the timing -----------------------------------

WRITE = (
    "import os, sys, time\n"
    "def send(line):\n"
    "    os.write(int(sys.argv[1]), line.encode() + b'\\n')\n"
)


def test_forged_result_followed_by_real_failure_is_bad_result() -> None:
    code = WRITE + 'def f(x):\n    send(\'{"kind":"result","value":"forged"}\')\n    1 / 0\n'
    result = run(code)
    assert not result.ok and result.failure == "bad_result" and result.value is None


def test_forged_ready_is_a_protocol_violation() -> None:
    code = WRITE + 'def f(x):\n    send(\'{"kind":"ready"}\')\n    return 1\n'
    assert run(code).failure == "bad_result"


def test_garbage_on_the_channel_is_bad_result() -> None:
    code = WRITE + "def f(x):\n    send('not json')\n    return 1\n"
    assert run(code).failure == "bad_result"


def test_forged_timing_cannot_lower_exec_s() -> None:
    code = WRITE + (
        "def f(x):\n"
        "    time.sleep(0.6)\n"
        '    send(\'{"kind":"result","value":7,"exec_s":0.0}\')\n'
        "    os._exit(0)\n"
    )
    result = run(code)
    assert result.value == 7  # the value it delivered, never another one
    assert result.exec_s >= 0.6


def slow_exit(delay_s: float) -> str:
    """Agent code that delivers the complete result 42 and exits ``delay_s`` later. (The
    harness's own exit cannot be delayed from agent code: ``os._exit(main(...))`` looks
    ``os._exit`` up before the agent runs. From the parent's side this is the same run.)"""
    return WRITE + (
        "def f(x):\n"
        '    send(\'{"kind":"result","value":42}\')\n'
        f"    time.sleep({delay_s})\n"
        "    os._exit(0)\n"
    )


def test_late_exit_after_a_complete_result_is_a_platform_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sandbox that exits after ``EXIT_GRACE_S`` (0.5 s here) once its result is in raises
    ``SandboxExitError`` (infrastructure, retried by the runner), never a failed result."""
    for module in (_io, _run):
        monkeypatch.setattr(module, "EXIT_GRACE_S", 0.5)
    on_time = run(slow_exit(0.1))
    assert on_time.ok and on_time.value == 42
    started = time.monotonic()
    with pytest.raises(SandboxExitError, match="did not exit within 0.5 s"):
        run(slow_exit(30))
    assert time.monotonic() - started < 5.0  # killed at the grace, not waited for


def test_module_level_work_counts_towards_exec_s() -> None:
    code = "import time\ntime.sleep(0.4)\ndef f(x):\n    return 1\n"
    result = run(code)
    assert result.ok and result.exec_s >= 0.4


# --- infrastructure errors ---------------------------------------------------------------


def test_preamble_failure_is_a_setup_error() -> None:
    with pytest.raises(SandboxSetupError, match="ZeroDivisionError"):
        run("def f(x):\n    return 1\n", preamble="1 / 0")


def test_unpicklable_argument_is_a_setup_error() -> None:
    with pytest.raises(SandboxSetupError, match="pickled"):
        run("def f(x):\n    return 1\n", lambda: 1)


def test_limits_validate() -> None:
    with pytest.raises(ValueError, match="wall_timeout_s"):
        SandboxLimits(wall_timeout_s=0)


# --- scale and concurrency ---------------------------------------------------------------


def test_malt_sized_graph_round_trips_intact() -> None:
    graph = malt_like_graph(switches=320, ports=16)  # 5,441 nodes, like the MALT topology
    result = run_function(
        "def process_graph(graph_data):\n    return graph_data\n", "process_graph", graph,
        limits=SandboxLimits(wall_timeout_s=20.0), preamble=NX,
    )  # fmt: skip
    assert result.ok, result.error
    back = nx.node_link_graph(result.value["__networkx__"], edges="links")
    assert nx.utils.graphs_equal(graph, back)


def test_concurrent_runs_do_not_mix() -> None:
    from concurrent.futures import ThreadPoolExecutor

    code = "import os, time\ndef f(x):\n    time.sleep(0.2)\n    return [x, os.getuid()]\n"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: run(code, i), range(8)))
    assert [r.value[0] for r in results] == list(range(8))
    assert len({r.value[1] for r in results}) == 8  # every run had its own uid


def test_cgroup_caps_memory_across_processes() -> None:
    probe = run("def f(x):\n    return 1\n")
    # An optional layer by design (docs/sandbox.md), but on the project's machines it exists.
    require("cgroup" in probe.controls, "cgroup v1 memory/pids groups cannot be created here")
    code = (
        "import os, time\n"
        "def f(x):\n"
        "    pids = []\n"
        "    for _ in range(3):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            block = bytearray(200 * 1024**2)\n"
        "            time.sleep(1)\n"
        "            os._exit(0)\n"
        "        pids.append(pid)\n"
        "    return [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]\n"
    )
    limits = SandboxLimits(wall_timeout_s=10.0, memory_bytes=256 * 1024**2)
    result = run(code, limits=limits)
    # each child stays under RLIMIT_AS; together they exceed the group's memory limit
    assert result.failure == "memory" or (result.ok and -signal.SIGKILL in result.value), result


def test_namespaces_mounts_and_ptrace_are_refused_but_processes_work() -> None:
    probe = run("def f(x):\n    return 1\n")
    require("seccomp" in probe.controls, "libseccomp is not installed: the seccomp layer is off")
    code = (
        "import ctypes, subprocess\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno_of(rc):\n"
        "    return 0 if rc == 0 else ctypes.get_errno()\n"
        "def f(x):\n"
        "    return {\n"
        "        'unshare_user': errno_of(libc.unshare(0x10000000)),\n"
        "        'unshare_net': errno_of(libc.unshare(0x40000000)),\n"
        "        'mount': errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "        'ptrace': errno_of(libc.ptrace(16, 1, None, None)),\n"
        "        'subprocess': subprocess.run(['echo', 'hi'], capture_output=True,\n"
        "                                     text=True).stdout,\n"
        "    }\n"
    )
    result = run(code)
    assert result.ok, result.error
    value = result.value
    assert value["unshare_user"] == value["unshare_net"] == value["mount"] == 1  # EPERM
    assert value["ptrace"] == 1
    assert value["subprocess"] == "hi\n"


def test_slow_preamble_is_a_setup_timeout() -> None:
    limits = SandboxLimits(setup_timeout_s=1.0)
    with pytest.raises(SandboxSetupError, match="setup_timeout_s"):
        run("def f(x):\n    return 1\n", limits=limits, preamble="import time\ntime.sleep(30)")


def test_bwrap_start_failure_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from evaluator.sandbox import SandboxUnavailableError

    plan = _bwrap.plan()
    broken = _bwrap.Plan(plan.bwrap, plan.setpriv, plan.python, ("/nonexistent-netarena-dir",))
    monkeypatch.setattr(_bwrap, "plan", lambda: broken)
    with pytest.raises(SandboxUnavailableError, match="did not start"):
        run("def f(x):\n    return 1\n")
    result = run("def f(x):\n    return 1\n", raise_unavailable=False)
    assert result.failure == "sandbox_unavailable" and "nonexistent" in result.error


def test_read_only_dirs_under_tmp_stay_visible_above_the_scratch_tmpfs(monkeypatch) -> None:
    # A checkout (and its venv) may live under /tmp, as CI clones do: the sandbox's own /tmp
    # must not hide it.
    import dataclasses
    import tempfile

    from evaluator.sandbox import _bwrap

    host_dir = tempfile.mkdtemp(prefix="netarena-ro-", dir="/tmp")
    Path(host_dir, "marker.txt").write_text("visible")
    os.chmod(host_dir, 0o755)
    os.chmod(Path(host_dir, "marker.txt"), 0o644)
    plan = _bwrap.plan()
    monkeypatch.setattr(
        _bwrap, "plan", lambda: dataclasses.replace(plan, ro_dirs=(*plan.ro_dirs, host_dir))
    )
    result = run(f"def f(x):\n    return open({str(Path(host_dir, 'marker.txt'))!r}).read()\n")
    assert result.ok and result.value == "visible", result
