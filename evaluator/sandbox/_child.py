"""Child-side harness of the agent-code sandbox (runs *inside* bubblewrap, see docs/sandbox.md).

This file is executed as a script by the sandboxed interpreter (``python -s -P -B
/opt/netarena/sandbox_child.py <result_fd>``: this file, bind-mounted there); it must import
nothing from this repository, because only this single file is bind-mounted into the sandbox.

Protocol (parent in :mod:`evaluator.sandbox._io`):

1. stdin carries one pickle written by the trusted parent: ``{"code", "function",
   "preamble", "argument", "limits"}``. It is read completely and stdin is closed.
2. The trusted preamble runs in a fresh namespace; resource limits are applied.
3. The harness writes ``{"kind": "ready"}`` + newline to the result fd, *before* any agent
   code runs. The parent starts the agent's wall clock and its ``exec_s`` measurement there.
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


def encode_result(value: Any, call_s: float) -> str:
    """Return the terminal ``result`` message for ``value`` as one JSON line (no newline).

    Raises :class:`ResultEncodingError`, ``TypeError`` (bad dict key), ``ValueError``
    (circular reference, int too large to print, NaN or an infinity: PostgreSQL's JSON refuses
    them) or ``RecursionError`` (nesting).
    """
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
        namespace: dict[str, Any] = {"__name__": "__agent__", "__builtins__": builtins}
        exec(compile(payload["preamble"], "<preamble>", "exec"), namespace)  # noqa: S102
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _apply_limits(payload["limits"])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as infrastructure
        _send(channel, {"kind": "setup_error", "error": _tail(traceback.format_exc())})
        del exc
        return 3
    _send(channel, {"kind": "ready"})
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


if __name__ == "__main__":
    os._exit(main(sys.argv))
