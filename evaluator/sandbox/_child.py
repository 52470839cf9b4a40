"""Child-side harness of the agent-code sandbox (runs *inside* bubblewrap, see docs/sandbox.md).

This file is executed as a script by the sandboxed interpreter (``python -s -P -B
/opt/netarena/sandbox_child.py <result_fd>``: this file, bind-mounted there); it must import
nothing from this repository, because only this single file is bind-mounted into the sandbox.

Protocol (parent in :mod:`evaluator.sandbox._io`):

1. stdin carries one pickle written by the trusted parent: ``{"code", "function",
   "preamble", "argument", "limits"}``. It is read completely and stdin is closed.
2. The trusted preamble runs in a fresh namespace; resource limits are applied.
3. The harness writes ``{"kind": "ready", "t": <its CLOCK_MONOTONIC>}`` + newline to the result
   fd, *before* any agent code runs. The parent starts the agent's wall clock when it reads it,
   and its ``exec_s`` measurement at ``t`` (or at reading it, whichever is earlier).
4. The agent code is compiled and executed in the same namespace and ``function(argument)``
   is called.
5. Exactly one terminal line follows: ``{"kind": "result", "value": <JSON>, "call_s":
   <seconds inside exec + call, informational>}`` or
   ``{"kind": "error", "failure": <category>, "error": <text>}``; then the process exits with
   ``os._exit(0)`` so that agent threads and ``atexit`` hooks cannot run afterwards.

Before step 3 a failure of the trusted part is reported as ``{"kind": "setup_error"}``.
Only JSON ever leaves this process; agent code runs in this same process and can write to the
result fd itself, which is why the parent enforces the protocol order, counts lines, caps sizes
and measures time on its side instead of trusting anything written here.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import pickle
import resource
import sys
import time
import traceback
from typing import Any

#: Longest traceback tail (characters) sent back in ``error``.
MAX_ERROR_CHARS = 4000
_HARNESS_FILE = os.path.abspath(__file__)


class ResultEncodingError(Exception):
    """The agent's return value cannot be expressed as JSON (type, depth or key problem)."""


def _send(channel: int, message: dict[str, Any]) -> None:
    """Write one newline-terminated JSON message to ``channel`` (an fd), all bytes or raise."""
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    view = memoryview(data)
    while view:
        written = os.write(channel, view)
        view = view[written:]


def _tail(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _agent_traceback(exc: BaseException) -> str:
    """Format ``exc`` without the harness's own frames (the agent sees only its code)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _HARNESS_FILE:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    return _tail("".join(lines))


class _GraphDiffer:
    """Encodes a returned networkx graph as its change against the call's argument graph.

    Made before any agent code runs (trusted): the argument's node attributes and adjacency
    pickled in chunks of :data:`_CHUNK` nodes (C-level, a few ms for the 5,493-node
    MALT-shaped graph). :meth:`encode` pickles the same chunks of a returned graph; a chunk
    whose bytes are the same is unchanged (same values, exact types, same order), and only
    the other chunks are unpickled and compared element by element. It gives the change, or
    None when the change cannot be stated so that the parent rebuilds exactly what the
    node-link form would give (then the graph goes out whole, as without diffs). Format (the
    parent's reader is ``apps.malt.checks.apply_graph_diff``)::

        {"__networkx_diff__": {
            "removed_nodes": [id, ...],
            "nodes": [{"id": id, **attrs}, ...],     # changed (argument order), added (graph order)
            "removed_links": [[source, target], ...],
            "links": [{"source": s, "target": t, **attrs}, ...],  # changed, then added
            "link_order": "append" | "source"}}

    Rebuilding: nodes = the argument's minus the removed, each entry of ``nodes`` assigned
    (a changed node keeps its place, an added one goes last); links alike, with ``append``
    (added links go last) or ``source`` (links listed source by source in node order, each
    source's surviving links in the argument's order and then its added ones) -- whichever
    equals the returned graph's own link order. An element counts as unchanged only when its
    attributes pickle to the same bytes as the argument's (same values *and* exact types, so
    that its JSON form is the same too).
    """

    def __init__(self, graph: Any) -> None:
        nodes, adj = graph._node, graph._adj
        self.keys = list(nodes)
        self.usable = list(adj) == self.keys and all(type(n) is str for n in self.keys)
        dumps = pickle.dumps
        self.chunks = [
            (
                self.keys[i : i + _CHUNK],
                dumps([nodes[n] for n in self.keys[i : i + _CHUNK]], protocol=5),
                dumps([adj[n] for n in self.keys[i : i + _CHUNK]], protocol=5),
            )
            for i in range(0, len(self.keys), _CHUNK)
        ]

    def encode(self, graph: Any) -> dict[str, Any] | None:
        """The ``__networkx_diff__`` form of ``graph``, or None (send it whole: not a simple
        directed graph with string ids, a node order no diff states, unpicklable or
        hostile attributes -- the whole form then fails or succeeds as it always did)."""
        try:
            return self._encode(graph) if self.usable else None
        except Exception:  # noqa: BLE001 - hostile attributes: the whole form decides
            return None

    def _encode(self, graph: Any) -> dict[str, Any] | None:
        if not graph.is_directed() or graph.is_multigraph():
            return None
        nodes, adj = graph._node, graph._adj
        if list(nodes) != list(adj):
            return None
        dumps, loads = pickle.dumps, pickle.loads
        removed: list[Any] = []
        changed: list[Any] = []
        removed_links: list[list[Any]] = []
        changed_links: list[tuple[Any, Any]] = []
        added_links: list[tuple[Any, Any]] = []
        for keys, node_blob, adj_blob in self.chunks:
            if all(n in nodes for n in keys):
                if dumps([nodes[n] for n in keys], protocol=5) != node_blob:
                    for n, old in zip(keys, loads(node_blob), strict=True):  # noqa: S301
                        new = nodes[n]
                        if not (new == old and dumps(new, protocol=5) == dumps(old, protocol=5)):
                            changed.append(n)
                if dumps([adj[n] for n in keys], protocol=5) == adj_blob:
                    continue
            else:
                for n, old in zip(keys, loads(node_blob), strict=True):  # noqa: S301
                    if n not in nodes:
                        removed.append(n)
                    elif not (nodes[n] == old and dumps(nodes[n], protocol=5) == dumps(
                            old, protocol=5)):
                        changed.append(n)
            for u, old_nbrs in zip(keys, loads(adj_blob), strict=True):  # noqa: S301
                new_nbrs = adj.get(u)
                if new_nbrs is None:
                    removed_links += [[u, v] for v in old_nbrs]
                    continue
                kept = []
                for v, old in old_nbrs.items():
                    if v not in new_nbrs:
                        removed_links.append([u, v])
                        continue
                    kept.append(v)
                    new = new_nbrs[v]
                    if not (new == old and dumps(new, protocol=5) == dumps(old, protocol=5)):
                        changed_links.append((u, v))
                extra = [v for v in new_nbrs if v not in old_nbrs]
                if kept + extra != list(new_nbrs):
                    return None  # a link re-added after removal moved: no diff states that
                added_links += [(u, v) for v in extra]
        if not removed and len(nodes) == len(self.keys):
            added: list[Any] = []  # every argument node is there, so nothing else is
            if list(nodes) != self.keys:
                return None
        else:
            gone, base = set(removed), set(self.keys)
            added = [n for n in nodes if n not in base]
            if any(type(n) is not str for n in added):
                return None
            if [n for n in self.keys if n not in gone] + added != list(nodes):
                return None  # a node re-added after removal moved: no diff states that
        order = "source" if added_links else "append"
        added_links += [(u, v) for u in added for v in adj[u]]
        return {"__networkx_diff__": {
            "removed_nodes": removed,
            "nodes": [{**nodes[n], "id": n} for n in changed + added],
            "removed_links": removed_links,
            "links": [{**adj[u][v], "source": u, "target": v}
                      for u, v in changed_links + added_links],
            "link_order": order}}


#: Nodes per pickled chunk of :class:`_GraphDiffer` (a changed node costs unpickling its chunk).
_CHUNK = 64


#: Set by :func:`main` when the caller asked for graph diffs and the argument is a graph.
_DIFFER: list[_GraphDiffer] = []


def _json_default(value: Any) -> Any:
    """``json.dumps`` hook for the types JSON lacks (the result contract, docs/sandbox.md).

    A networkx graph becomes ``{"__networkx__": node_link_data(G, edges="links")}``; a set or
    frozenset becomes a sorted list when its items are sortable (else a list in iteration
    order). Any other type raises :class:`ResultEncodingError`. Tuples are lists and dict keys
    must be str/int/float/bool/None (``json`` itself enforces both); cycles raise
    ``ValueError`` and too deep nesting ``RecursionError`` inside ``json``.
    """
    nx = sys.modules.get("networkx")
    if nx is not None and isinstance(value, nx.Graph):
        return {"__networkx__": nx.node_link_data(value, edges="links")}
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    raise ResultEncodingError(f"a value of type {type(value).__name__} is not JSON-serialisable")


def _with_diffs(value: Any, differ: _GraphDiffer) -> Any:
    """``value`` with each graph that is a value of a plain top-level dict (``{"answer": G}``,
    ``{"updated_graph": G}``) in its diff form where it has one; a graph returned bare or
    nested deeper goes out whole."""
    nx = sys.modules.get("networkx")
    if nx is None:
        return value
    if type(value) is dict and any(isinstance(v, nx.Graph) for v in value.values()):
        return {k: (differ.encode(v) or v) if isinstance(v, nx.Graph) else v
                for k, v in value.items()}
    return value


def encode_result(value: Any, call_s: float) -> str:
    """Return the terminal ``result`` message for ``value`` as one JSON line (no newline).

    Raises :class:`ResultEncodingError`, ``TypeError`` (bad dict key), ``ValueError``
    (circular reference, int too large to print, NaN or an infinity: PostgreSQL's JSON refuses
    them) or ``RecursionError`` (nesting).
    """
    if _DIFFER:
        value = _with_diffs(value, _DIFFER[0])
    message = {"kind": "result", "value": value, "call_s": call_s}
    return json.dumps(message, separators=(",", ":"), default=_json_default, allow_nan=False)


def _apply_limits(limits: dict[str, Any]) -> None:
    """Apply the agent's POSIX resource limits to this process (inherited by its forks).

    RLIMIT_CPU counts from process start, so the budget is added to the CPU already used by
    interpreter start and unpickling; the hard limit is one second later (SIGKILL).
    """
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu_soft = int(used.ru_utime + used.ru_stime + float(limits["cpu_time_s"])) + 1
    settings = [
        (resource.RLIMIT_CPU, cpu_soft, cpu_soft + 1),
        (resource.RLIMIT_AS, int(limits["memory_bytes"]), int(limits["memory_bytes"])),
        (resource.RLIMIT_FSIZE, int(limits["scratch_bytes"]), int(limits["scratch_bytes"])),
        (resource.RLIMIT_NPROC, int(limits["max_processes"]), int(limits["max_processes"])),
        (resource.RLIMIT_NOFILE, 256, 256),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    for which, soft, hard in settings:
        resource.setrlimit(which, (soft, hard))


def _run_agent(payload: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run the agent code and its function; return the terminal message (never raises)."""
    reserve: bytearray | None = bytearray(1 << 20)  # freed on MemoryError to report it
    t_call = time.perf_counter()
    try:
        code = payload["code"]
        linecache.cache["<agent>"] = (len(code), None, code.splitlines(True), "<agent>")
        compiled = compile(code, "<agent>", "exec")
        exec(compiled, namespace)  # noqa: S102 - this *is* the sandbox
        function = namespace.get(payload["function"])
        if not callable(function):
            return {
                "kind": "error",
                "failure": "no_function",
                "error": f"the code does not define a function {payload['function']!r}",
            }
        value = function(payload["argument"])
        payload["call_s"] = time.perf_counter() - t_call
    except MemoryError:
        reserve = None
        return {"kind": "error", "failure": "memory", "error": "MemoryError: memory limit hit"}
    except BaseException as exc:  # noqa: BLE001 - every agent failure becomes a result
        reserve = None
        return {"kind": "error", "failure": "exception", "error": _agent_traceback(exc)}
    del reserve
    try:
        text = encode_result(value, payload["call_s"])
    except MemoryError:
        return {"kind": "error", "failure": "memory", "error": "MemoryError while encoding"}
    except (ResultEncodingError, ValueError, TypeError, RecursionError) as exc:
        return {"kind": "error", "failure": "bad_result", "error": f"{type(exc).__name__}: {exc}"}
    except BaseException as exc:  # noqa: BLE001 - hostile __eq__/__lt__ etc.
        return {"kind": "error", "failure": "bad_result", "error": _agent_traceback(exc)}
    if len(text) > int(payload["limits"]["result_bytes"]):
        return {
            "kind": "error",
            "failure": "result_too_large",
            "error": f"result is {len(text)} bytes, limit {payload['limits']['result_bytes']}",
        }
    return {"raw": text}


def main(argv: list[str]) -> int:
    """Entry point; ``argv[1]`` is the result fd number. Returns the exit status."""
    channel = int(argv[1])
    try:
        payload = pickle.loads(sys.stdin.buffer.read())  # noqa: S301 - written by the parent
        if payload.get("argument_digest") is not None:  # warm path: the zygote's shared copy
            payload["argument"] = _CACHED[payload["argument_digest"]]
        elif payload.get("argument_pickle") is not None:  # a shared argument, cold path
            payload["argument"] = pickle.loads(payload["argument_pickle"])  # noqa: S301
        namespace: dict[str, Any] = {"__name__": "__agent__", "__builtins__": builtins}
        exec(compile(payload["preamble"], "<preamble>", "exec"), namespace)  # noqa: S102
        nx = sys.modules.get("networkx")
        if payload.get("graph_diffs") and nx is not None and isinstance(
                payload["argument"], nx.Graph):
            _DIFFER.append(_GraphDiffer(payload["argument"]))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _apply_limits(payload["limits"])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as infrastructure
        _send(channel, {"kind": "setup_error", "error": _tail(traceback.format_exc())})
        del exc
        return 3
    _send(channel, {"kind": "ready", "t": time.monotonic()})  # before any agent code
    message = _run_agent(payload, namespace)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001, S110 - agent may have broken its own streams
        pass
    if "raw" in message:
        data = (message["raw"] + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(channel, view) :]
    else:
        _send(channel, message)
    return 0


# --- warm path: the zygote (docs/sandbox.md, "Warm path") ----------------------------------
#
# ``python ... sandbox_child.py --zygote <control_fd>`` runs this file as a long-lived zygote
# inside bubblewrap, as root with only the capabilities of ``_bwrap.ZYGOTE_CAPS``. It runs only
# trusted code: it imports the trusted modules once, holds at most one argument the caller
# marked as shared, and per call forks two processes:
#
#   P1 (pid 1 of a new pid namespace: the zygote unshares CLONE_NEWPID, forks, and restores its
#      own pid namespace for children with setns) takes the call's fds and says hello on the
#      status socket (the host learns its host pid from SCM_CREDENTIALS), unshares mount, IPC,
#      net and UTS namespaces, makes every mount private, mounts a fresh /proc (/proc/sys,
#      /proc/sysrq-trigger, /proc/irq, /proc/bus read-only after the SHM limits are written)
#      and a fresh devpts, brings lo up, forks A, reports A's exit status and exits (the
#      kernel then kills whatever is left in the namespace).
#   A  (pid 2) says hello too and closes the status socket; then it waits for the header line
#      on stdin, which the host writes only after it moved P1 and A into the call's cgroups.
#      Then A unshares the cgroup namespace, mounts the call's size-capped tmpfs /tmp, starts a
#      session, drops the capability bounding and ambient sets, takes the call's uid/gid with
#      no groups (losing every capability), clears the inheritable set, sets no_new_privs,
#      loads the seccomp filter, checks all of that in /proc/self/status and only then runs
#      :func:`main` above, which reads the rest of stdin.
#
# The host keeps one such pair forked ahead of time (a spare), so a call only pays for the
# header and what follows. Until its header arrives a spare has run trusted code only, holds
# nothing of any call and belongs to no call's cgroup.

#: The shared argument of the warm path: digest -> unpickled object (at most one entry).
_CACHED: dict[str, Any] = {}
_CLONE_NEWPID, _CLONE_NEWCGROUP = 0x20000000, 0x02000000
_CLONE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x40000000  # CLONE_NEWNET
)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_SECCOMP, _PR_CAPBSET_DROP = 1, 22, 24
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
#: The channel fd of a warm call (``sys.argv[1]`` of the agent's process, as in the cold path).
_WARM_CHANNEL_FD = 3
_WARM_STATUS_FD = 4
_libc_cache: list[Any] = []


def _libc() -> Any:
    import ctypes

    if not _libc_cache:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mount.argtypes = (
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p
        )  # fmt: skip
        lib.prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
        lib.unshare.argtypes = (ctypes.c_int,)
        lib.setns.argtypes = (ctypes.c_int, ctypes.c_int)
        _libc_cache.append(lib)
    return _libc_cache[0]


def _check(rc: int, what: str) -> None:
    import ctypes

    if rc != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc().mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc().prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _mount_call_filesystems(config: dict[str, Any]) -> None:
    """P1: private mounts, fresh /proc (sysctl parts read-only after the SHM limits), devpts."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for name, value in config["shm_limits"].items():
        with open(f"/proc/sys/kernel/{name}", "w") as handle:
            handle.write(str(value))
    for name in ("sys", "sysrq-trigger", "irq", "bus"):
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    pts_options = "newinstance,ptmxmode=0666,mode=620"
    _mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, pts_options)


def _mount_scratch(config: dict[str, Any], scratch_bytes: int) -> None:
    """A, once the call is known: its size-capped /tmp, with the read-only dirs that live
    under /tmp bound back on top (as bubblewrap's order of mounts does on the cold path)."""
    kept = [(os.open(d, os.O_PATH | os.O_DIRECTORY), d) for d in config["tmp_ro_dirs"]]
    scratch = "/tmp"  # noqa: S108 - the call's own tmpfs, mounted here
    _mount("tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={scratch_bytes},mode=1777")
    for fd, directory in kept:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", directory, None, _MS_BIND | _MS_REC)
        _mount(None, directory, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.close(fd)


def _read_header() -> dict[str, Any] | None:
    """A: the call's header line on stdin (``{"uid", "scratch_bytes"}``), or ``None`` at EOF
    (an unused spare). Read byte by byte so that the pickle after it stays in the pipe."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte or len(line) > 4096:
            return None
        line += byte
    header: dict[str, Any] = json.loads(line)
    return header


def _loopback_up() -> None:
    """Bring ``lo`` up in the call's network namespace, as bubblewrap does (netdevice(7))."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sh22x", b"lo", flags | 1))  # SIOCSIFFLAGS, UP


def _drop_privileges(uid: int, program: bytes | None) -> None:
    """A: bounding/ambient sets, uid/gid/groups, inheritable set, no_new_privs, seccomp."""
    import ctypes

    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last_cap = int(handle.read())
    for cap in range(last_cap + 1):
        _prctl(_PR_CAPBSET_DROP, cap)
    _check(_libc().prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient caps")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        )

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    _check(_libc().capset(ctypes.byref(header), data), "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if program is not None:

        class Fprog(ctypes.Structure):
            _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
        rc = _libc().prctl(_PR_SET_SECCOMP, 2, ctypes.addressof(fprog), 0, 0)  # MODE_FILTER
        _check(rc, "seccomp")
    status = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if int(status[key], 16) != 0:
            raise OSError(f"{key} is {status[key]} after dropping privileges")
    if status.get("NoNewPrivs") != "1" or os.getuid() != uid or os.getgid() != uid:
        raise OSError("identity not dropped")


def _agent_process(config: dict[str, Any], program: bytes | None) -> None:
    """A (pid 2 of the call): wait for the call, become the agent's unprivileged process in
    its cgroup namespace and scratch dir, and run :func:`main`."""
    import socket

    try:
        with socket.socket(fileno=_WARM_STATUS_FD) as status:
            status.sendall(b"a")  # the host moves this process into the cgroups as well
        header = _read_header()  # written by the host once both processes are in the cgroups
        if header is None:
            os._exit(0)
        _check(_libc().unshare(_CLONE_NEWCGROUP), "unshare cgroup")  # rooted at the call's
        _mount_scratch(config, int(header["scratch_bytes"]))
        os.setsid()
        os.chdir("/tmp")  # noqa: S108 - the call's private tmpfs
        _drop_privileges(int(header["uid"]), program)
    except BaseException:  # noqa: BLE001 - no agent code ran; the host sees no "ready"
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(125)
    sys.argv = [_HARNESS_FILE, str(_WARM_CHANNEL_FD)]
    os._exit(main(sys.argv))


def _call_init(fds: list[int], config: dict[str, Any], program: bytes | None) -> None:
    """P1 (pid 1 of the call): see the comment above; never returns."""
    import fcntl
    import signal
    import socket

    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(_WARM_STATUS_FD + 1, os.sysconf("SC_OPEN_MAX"))
        status = socket.socket(fileno=_WARM_STATUS_FD)
        status.sendall(b"h")  # the host reads this process's pid from SCM_CREDENTIALS
        _check(_libc().unshare(_CLONE_FLAGS), "unshare")
        _mount_call_filesystems(config)
        _loopback_up()
        agent = os.fork()
    except BaseException:  # noqa: BLE001 - no agent code ran; the host sees no "ready"
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(125)
    if agent == 0:
        _agent_process(config, program)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2, _WARM_CHANNEL_FD):
        os.dup2(null, fd)
    os.close(null)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            os._exit(125)
        if pid == agent:
            code = os.waitstatus_to_exitcode(wait_status)
            status.sendall(f"x{code if code >= 0 else 128 - code}".encode())
            os._exit(0)


def _spawn(
    fds: list[int], config: dict[str, Any], program: bytes | None, control: Any, own_pid_ns: int
) -> None:
    """In the zygote: fork P1 as pid 1 of a new pid namespace, then restore the zygote's own
    pid namespace for its later children (a failure there ends the zygote: it is restarted)."""
    _check(_libc().unshare(_CLONE_NEWPID), "unshare pid")
    try:
        pid = os.fork()
    except BaseException:
        _check(_libc().setns(own_pid_ns, _CLONE_NEWPID), "setns pid")
        raise
    if pid == 0:
        try:
            control.close()
            os.close(own_pid_ns)
            _call_init(fds, config, program)
        finally:
            os._exit(1)
    if _libc().setns(own_pid_ns, _CLONE_NEWPID) != 0:
        os._exit(2)


def zygote_main(control_fd: int) -> int:
    """The zygote's loop: one JSON request per SOCK_SEQPACKET message (fds attached).

    ``config`` (first message): ``imports``, ``tmp_ro_dirs``, ``shm_limits``, ``seccomp``
    (hex or null). Requests: ``{"op": "preload", "digest"}`` + a memfd holding the pickle;
    ``{"op": "spawn"}`` + stdin, stdout, stderr, channel, status fds (the call's uid and
    scratch size come later, as the header line on stdin).
    Exits when the host closes the socket.
    """
    import gc
    import importlib
    import signal
    import socket

    control = socket.socket(fileno=control_fd)
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    config = json.loads(control.recv(1 << 20))
    program = bytes.fromhex(config["seccomp"]) if config.get("seccomp") else None
    for name in config["imports"]:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    gc.collect()
    gc.freeze()
    control.send(b'{"kind":"zygote_ready"}')
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 16, 8)
        if not message:
            return 0
        try:
            request = json.loads(message)
            if request["op"] == "preload":
                size = os.fstat(fds[0]).st_size
                data = b"".join(
                    os.pread(fds[0], min(1 << 20, size - at), at) for at in range(0, size, 1 << 20)
                )
                _CACHED.clear()
                _CACHED[request["digest"]] = pickle.loads(data)  # noqa: S301 - from the host
                del data
                gc.collect()
                gc.freeze()
            elif request["op"] == "spawn" and len(fds) == 5:
                _spawn(fds, config, program, control, own_pid_ns)
        except Exception:  # noqa: BLE001 - a bad request never ends the zygote
            traceback.print_exc()
        finally:
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] == "--zygote":
        os._exit(zygote_main(int(sys.argv[2])))
    os._exit(main(sys.argv))
