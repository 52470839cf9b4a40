"""The agent's ``kubectl``: allow-listed, run as the real binary without a shell.

Each command runs with the episode's namespace-scoped kubeconfig (RBAC: its namespace only,
no ``exec``, no secrets, nothing cluster-scoped), a minimal environment (``PATH``, a private
``HOME`` for kubectl's discovery cache, ``KUBECONFIG``, ``LANG``), a wall-clock timeout and an
output cap. Refusals are decided before anything runs:

* subcommands: :data:`ALLOWED_SUBCOMMANDS` only (no ``exec``, ``proxy``, ``port-forward``,
  ``cp``, ``attach``, ``debug``, ``run``, ``edit``, ``plugin``, ``config``, ``diff``...);
  ``auth`` only as ``auth can-i``; no ``scale``, ``set`` or ``rollout`` (the workload is fixed);
* flags: :data:`ALLOWED_FLAGS` only -- so no ``--kubeconfig``, ``--server``, ``--token``,
  ``--as``, ``--context``, ``--user``, ``--cluster``, certificate or TLS overrides, no
  ``--raw``, ``--watch``, ``--kustomize``, ``--log-file``, ``-v``;
* ``-f``/``--filename`` only as ``-`` (standard input, from a here-document): a path or URL
  would read host files or make the evaluator fetch addresses;
* output formats that read files (``go-template-file=``, ``jsonpath-file=``,
  ``template-file=``) are refused;
* a here-document larger than :data:`MANIFEST_MAX_BYTES` or holding more objects than the
  namespace may hold NetworkPolicies (:data:`MANIFEST_MAX_OBJECTS`) is refused
  (:func:`check_manifest`): the API server would refuse most of them anyway (quota), and
  answering hundreds of refused writes costs the shared API server and enforcer time that
  other episodes wait for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from evaluator.app import DependencyMissingError

from apps.k8s.cluster.admission import MAX_POLICIES, refusal_in_output
from apps.k8s.prompt import OUTPUT_MARKER, REFUSED_BY_CLUSTER
from apps.k8s.replies import ParsedReply

MANIFEST_MAX_BYTES = 256 * 1024
"""Largest here-document run (the 13 healthy policies as JSON are about 15 KiB)."""
MANIFEST_MAX_OBJECTS = MAX_POLICIES
"""Most objects one here-document may hold: the number of NetworkPolicies an episode
namespace may hold (:data:`apps.k8s.cluster.admission.MAX_POLICIES`)."""
COMMAND_TIMEOUT_S = 10.0
"""Wall-clock limit of one kubectl command (the reference harness uses 10 s, research D.5)."""
OUTPUT_CAP_BYTES = 64 * 1024
"""Bytes of stdout+stderr kept for the observation (the 13 policies as JSON are ~15 KiB)."""
REQUEST_TIMEOUT = "8s"
"""kubectl's own per-request timeout (below :data:`COMMAND_TIMEOUT_S`)."""

ALLOWED_SUBCOMMANDS: frozenset[str] = frozenset({
    "get", "describe", "explain", "api-resources", "api-versions", "version", "events",
    "apply", "create", "replace", "patch", "delete", "label", "annotate", "auth",
})  # fmt: skip

#: Flags (long and short spellings) an agent may pass; values are validated separately.
ALLOWED_FLAGS: frozenset[str] = frozenset({
    "-n", "--namespace", "-o", "--output", "-l", "--selector", "--field-selector",
    "-f", "--filename", "-p", "--patch", "--type", "--show-labels", "-L", "--label-columns",
    "--sort-by", "--no-headers", "--show-kind", "--show-managed-fields", "--template",
    "--allow-missing-template-keys", "--chunk-size", "--ignore-not-found", "--all",
    "-A", "--all-namespaces", "--dry-run", "--validate", "--overwrite", "--force",
    "--grace-period", "--now", "--wait", "--cascade", "--record", "--save-config",
    "--server-side", "--force-conflicts", "--field-manager", "--prune",
    "--resource-version", "--recursive", "--subresource",
    "--list", "--api-group", "--namespaced", "--verbs", "--sort", "--short", "--client",
    "--timeout", "--local",
    "--show-events", "--output-version", "--show-all", "--include-uninitialized",
    "--all-containers", "-c",
})  # fmt: skip

#: Flags refused with a specific reason (credential and endpoint overrides, file access).
FORBIDDEN_FLAGS: dict[str, str] = {
    "--kubeconfig": "credentials are fixed by the evaluator",
    "--server": "the API server is fixed by the evaluator",
    "-s": "the API server is fixed by the evaluator",
    "--token": "credentials are fixed by the evaluator",
    "--as": "impersonation is not allowed",
    "--as-group": "impersonation is not allowed",
    "--as-uid": "impersonation is not allowed",
    "--user": "credentials are fixed by the evaluator",
    "--username": "credentials are fixed by the evaluator",
    "--password": "credentials are fixed by the evaluator",
    "--context": "the context is fixed by the evaluator",
    "--cluster": "the cluster is fixed by the evaluator",
    "--client-certificate": "credentials are fixed by the evaluator",
    "--client-key": "credentials are fixed by the evaluator",
    "--certificate-authority": "TLS settings are fixed by the evaluator",
    "--insecure-skip-tls-verify": "TLS settings are fixed by the evaluator",
    "--tls-server-name": "TLS settings are fixed by the evaluator",
    "--request-timeout": "the request timeout is fixed by the evaluator",
    "--cache-dir": "kubectl's cache directory is fixed by the evaluator",
    "--raw": "raw API paths are not allowed",
    "-w": "watching never ends; run get again instead",
    "--watch": "watching never ends; run get again instead",
    "--watch-only": "watching never ends; run get again instead",
    "-k": "kustomize directories are host files",
    "--kustomize": "kustomize directories are host files",
    "--log-file": "kubectl may not write host files",
    "--log-dir": "kubectl may not write host files",
    "--profile-output": "kubectl may not write host files",
    "--profile": "kubectl may not write host files",
    "-v": "verbose logs are not available",
    "--v": "verbose logs are not available",
    "--edit": "interactive editing is not available; use patch or apply",
    "-i": "interactive sessions are not available",
    "--stdin": "interactive sessions are not available",
    "-t": "interactive sessions are not available",
    "--tty": "interactive sessions are not available",
}

_SUBCOMMAND_REASONS = {
    "exec": "exec is not available (no shell in pods); the connectivity report is measured "
    "for you after every step",
    "proxy": "proxy is not allowed",
    "port-forward": "port-forward is not allowed",
    "cp": "cp is not allowed",
    "attach": "attach is not available",
    "debug": "debug is not available",
    "run": "run is not allowed: the workload is fixed",
    "edit": "edit is interactive; use patch, apply -f - or replace -f -",
    "config": "the kubeconfig is fixed by the evaluator",
    "plugin": "plugins are not allowed",
    "logs": "pod logs are not available",
    "scale": "the workload is fixed; only NetworkPolicies may change",
    "set": "the workload is fixed; only NetworkPolicies may change",
    "rollout": "the workload is fixed; only NetworkPolicies may change",
    "diff": "diff runs a host program; use get -o yaml",
    "kustomize": "kustomize reads host files",
    "cluster-info": "cluster-wide information is not available",
    "top": "metrics are not available",
}

_FILE_OUTPUTS = (
    "go-template-file", "jsonpath-file", "template-file", "templatefile", "custom-columns-file",
)
_SUBCOMMAND_LIMITS = {"auth": {"can-i"}}


@dataclass(frozen=True)
class KubectlResult:
    """Outcome of one run: exit status (None when killed), capped output, timing."""

    status: int | None
    output: str
    timed_out: bool
    elapsed_s: float


def _flag_name(arg: str) -> str:
    if arg.startswith("--"):
        return arg.split("=", 1)[0]
    # short flags: "-n", "-nfoo", "-n=foo", "-ojson"
    return arg[:2]


def _value(args: list[str], i: int) -> tuple[str | None, int]:
    """Value of the flag at ``args[i]`` (inline ``--f=v``/``-fv`` or the next argument)."""
    arg = args[i]
    if arg.startswith("--") and "=" in arg:
        return arg.split("=", 1)[1], i + 1
    if not arg.startswith("--") and len(arg) > 2:
        value = arg[2:]
        return (value[1:] if value.startswith("=") else value), i + 1
    if i + 1 < len(args):
        return args[i + 1], i + 2
    return None, i + 1


_BOOLEAN_FLAGS = frozenset({
    "--show-labels", "--no-headers", "--show-kind", "--show-managed-fields", "--all", "-A",
    "--all-namespaces", "--ignore-not-found", "--overwrite", "--force", "--now", "--record",
    "--save-config", "--server-side", "--force-conflicts", "--recursive", "--list",
    "--namespaced", "--short", "--client", "--local", "--show-events", "--show-all",
    "--include-uninitialized", "--allow-missing-template-keys", "--all-containers",
})  # fmt: skip


def check_command(argv: tuple[str, ...] | list[str], has_stdin: bool) -> str | None:
    """Return why ``argv`` is refused, or None when it may run.

    ``argv[0]`` must be ``kubectl``; ``has_stdin`` tells whether a here-document came with it
    (``-f -`` needs one).
    """
    if not argv or argv[0] != "kubectl":
        return "only kubectl commands are run here"
    args = list(argv[1:])
    positionals: list[str] = []
    problems: list[str] = []
    i = 0
    saw_stdin_file = False
    while i < len(args):
        arg = args[i]
        if arg == "--":
            problems.append("'--' is not allowed")
            break
        if not arg.startswith("-") or arg == "-":
            positionals.append(arg)
            i += 1
            continue
        name = _flag_name(arg)
        if name in FORBIDDEN_FLAGS:
            problems.append(f"flag {name} refused: {FORBIDDEN_FLAGS[name]}")
        elif name not in ALLOWED_FLAGS:
            problems.append(f"flag {name} is not allowed here")
        if name in _BOOLEAN_FLAGS or (name.startswith("--") and "=" in arg):
            value = arg.split("=", 1)[1] if "=" in arg else None
            i += 1
        else:
            value, i = _value(args, i)
        if name in ("-f", "--filename") and value != "-":
            problems.append("-f only reads standard input here (-f - with a here-document); "
                            "paths and URLs are refused")
        elif name in ("-f", "--filename"):
            saw_stdin_file = True
        if name in ("-o", "--output") and value is not None:
            if any(value.startswith(p) for p in _FILE_OUTPUTS):
                problems.append(f"output format {value.split('=', 1)[0]} reads host files")
        if name == "--prune":
            problems.append("--prune is not allowed")
    sub = positionals[0] if positionals else None
    if sub in _SUBCOMMAND_REASONS:
        return f"kubectl {sub} refused: {_SUBCOMMAND_REASONS[sub]}"
    if problems:
        return problems[0]
    if sub is None:
        return "no kubectl subcommand given"
    if sub not in ALLOWED_SUBCOMMANDS:
        return f"kubectl {sub} is not available here"
    if sub in _SUBCOMMAND_LIMITS:
        if len(positionals) < 2 or positionals[1] not in _SUBCOMMAND_LIMITS[sub]:
            allowed = ", ".join(sorted(_SUBCOMMAND_LIMITS[sub]))
            return f"kubectl {sub} is limited to: {allowed}"
    if saw_stdin_file and not has_stdin:
        return "-f - needs a manifest: put it in a here-document (kubectl apply -f - <<EOF)"
    if has_stdin and not saw_stdin_file:
        return "a here-document was given but the command does not read -f -"
    return None


def check_manifest(stdin: str) -> str | None:
    """Return why the here-document ``stdin`` is refused, or None when it may run.

    Refused: more than :data:`MANIFEST_MAX_BYTES` bytes, or more than
    :data:`MANIFEST_MAX_OBJECTS` objects (YAML documents, ``*List`` items counted one by one).
    A manifest that does not parse is left to kubectl, which reports the error itself.
    """
    size = len(stdin.encode())
    if size > MANIFEST_MAX_BYTES:
        return (f"the manifest has {size} bytes; at most {MANIFEST_MAX_BYTES} are accepted in "
                "one command")
    try:
        docs = list(yaml.load_all(stdin, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.YAMLError:
        return None
    count = 0
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") \
                and isinstance(doc.get("items"), list):
            count += len(doc["items"])
        elif doc is not None:
            count += 1
    if count > MANIFEST_MAX_OBJECTS:
        return (f"the manifest holds {count} objects; one command may write at most "
                f"{MANIFEST_MAX_OBJECTS} (the most NetworkPolicies this namespace may hold)")
    return None


def kubectl_binary() -> str | None:
    """Path of the real ``kubectl`` (``NETARENA_KUBECTL`` or PATH), or None."""
    explicit = os.environ.get("NETARENA_KUBECTL")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("kubectl")


def run_kubectl(
    argv: tuple[str, ...] | list[str],
    *,
    kubeconfig: Path,
    home: Path,
    stdin: str | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
    output_cap_bytes: int = OUTPUT_CAP_BYTES,
    binary: str | None = None,
) -> KubectlResult:
    """Run an already checked ``argv`` (see :func:`check_command`) as the real kubectl.

    Raises:
        FileNotFoundError: no kubectl binary (an infrastructure problem for the caller).
    """
    exe = binary or kubectl_binary()
    if exe is None:
        raise FileNotFoundError("kubectl not found (PATH or NETARENA_KUBECTL)")
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.pathsep.join(p for p in (str(Path(exe).parent), "/usr/bin", "/bin") if p),
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
        "LANG": "C.UTF-8",
    }
    full = [exe, f"--request-timeout={REQUEST_TIMEOUT}", *argv[1:]]
    start = time.monotonic()
    try:
        proc = subprocess.run(  # noqa: S603 - argv checked by check_command; no shell
            full, input=(stdin or "").encode(), capture_output=True, env=env, cwd=home,
            timeout=timeout_s, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return KubectlResult(None, _cap(out, output_cap_bytes), True, time.monotonic() - start)
    out = proc.stdout + (b"\n" if proc.stdout and proc.stderr else b"") + proc.stderr
    return KubectlResult(
        proc.returncode, _cap(out, output_cap_bytes), False, time.monotonic() - start
    )


@dataclass(frozen=True)
class AgentCommand:
    """What one parsed agent reply (not ``done``) did as a command.

    Attributes:
        text: the step's observation before the report, after ``Step n: ``.
        ran: kubectl ran, so the namespace may have changed.
        info: step info: ``error`` (``"refused"``: by the allow-list or by the cluster;
            ``"unparseable"``), ``argv``, ``status``, ``command_s``, ``refused_by``.
    """

    text: str
    ran: bool
    info: dict[str, Any] = field(default_factory=dict)


def run_reply(
    parsed: ParsedReply,
    *,
    kubeconfig: Path | None,
    home: Path | None,
    timeout_s: float = COMMAND_TIMEOUT_S,
    output_cap_bytes: int = OUTPUT_CAP_BYTES,
) -> AgentCommand:
    """Check ``parsed`` (:func:`check_command`, :func:`check_manifest`) and, if allowed, run it
    as the real kubectl. An unparseable or refused reply is not run; a write that the episode
    namespace's admission rule or quota refused (:func:`apps.k8s.cluster.admission.
    refusal_in_output`) ran and counts as refused. Never raises for agent reasons.
    ``kubeconfig`` and ``home`` (the agent's credentials and private HOME) must be set once a
    command is to run.

    Raises:
        DependencyMissingError: no kubectl binary.
    """
    refusal = parsed.error
    info: dict[str, Any] = {}
    if refusal is None:
        assert parsed.argv is not None
        refusal = check_command(parsed.argv, parsed.stdin is not None)
        if refusal is None and parsed.stdin is not None:
            refusal = check_manifest(parsed.stdin)
        if refusal is not None:
            info["error"] = "refused"
    else:
        info["error"] = "unparseable"
    if refusal is not None:
        return AgentCommand(f"not run: {refusal}", ran=False, info=info)
    assert parsed.argv is not None and kubeconfig is not None and home is not None
    try:
        result = run_kubectl(
            parsed.argv, kubeconfig=kubeconfig, home=home, stdin=parsed.stdin,
            timeout_s=timeout_s, output_cap_bytes=output_cap_bytes,
        )
    except FileNotFoundError as exc:
        raise DependencyMissingError(str(exc)) from exc
    status = "killed (timeout)" if result.timed_out else str(result.status)
    info.update({"argv": list(parsed.argv), "status": result.status,
                 "command_s": round(result.elapsed_s, 4)})
    refused_by_cluster = refusal_in_output(result.output or "")
    refused_line = ""
    if refused_by_cluster is not None:
        # the admission rule or the quota of the episode namespace refused (part of) the
        # write: the agent's command, the agent's refused step (writes it made before
        # the refusal stay)
        info["error"] = "refused"
        info["refused_by"] = "cluster"
        refused_line = f"{REFUSED_BY_CLUSTER}{refused_by_cluster}\n"
    text = (
        f"{parsed.text}\nExit status: {status}\n{refused_line}"
        f"{OUTPUT_MARKER}{result.output or '(no output)'}"
    )
    return AgentCommand(text, ran=True, info=info)


def _cap(data: bytes, cap: int) -> str:
    text = data[:cap].decode("utf-8", errors="replace")
    if len(data) > cap:
        text += f"\n[output truncated: {len(data)} bytes, first {cap} shown]"
    return text.rstrip("\n")
