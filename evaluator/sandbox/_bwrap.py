"""bubblewrap + setpriv command line of the sandbox: tools, bind set, per-run uid.

Every flag is explained in docs/sandbox.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evaluator.sandbox._types import SandboxLimits, SandboxUnavailableError

#: The harness file on the host, and where it is bind-mounted inside the sandbox.
HARNESS_PATH = Path(__file__).with_name("_child.py")
HARNESS_IN_SANDBOX = "/opt/netarena/sandbox_child.py"
#: The scratch dir: a fresh, size-capped tmpfs inside the sandbox (never the host's /tmp).
SCRATCH = "/tmp"  # noqa: S108
#: Per-run uids are drawn from [UID_BASE, UID_BASE + UID_SPAN): far above system, user and
#: the usual subordinate-uid ranges (100000-165535), below the 32-bit "nobody" sentinels.
UID_BASE = 1_500_000_000
UID_SPAN = 1_000_000
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Plan:
    """Host paths resolved once per process: tools and the directories to bind read-only."""

    bwrap: str
    setpriv: str
    python: str
    ro_dirs: tuple[str, ...]
    unshare: str = "/usr/bin/unshare"


@lru_cache(maxsize=1)
def plan() -> Plan:
    """Resolve the sandbox's tools and bind set. Raises :class:`SandboxUnavailableError`."""
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "the sandbox needs root to give each run its own unprivileged uid (setpriv)"
        )
    bwrap = shutil.which("bwrap")
    setpriv = shutil.which("setpriv")
    if bwrap is None:
        raise SandboxUnavailableError("bubblewrap (bwrap) is not installed (apt: bubblewrap)")
    if setpriv is None:
        raise SandboxUnavailableError("setpriv is not installed (apt: util-linux)")
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxUnavailableError("unshare is not installed (apt: util-linux)")
    if not HARNESS_PATH.is_file():
        raise SandboxUnavailableError(f"sandbox harness missing: {HARNESS_PATH}")
    candidates = {
        os.path.realpath(p)
        for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    }
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    # /usr is bound as a whole; drop paths inside it and paths nested in another candidate.
    kept = sorted(p for p in candidates if not (p == "/usr" or p.startswith("/usr/")))
    ro_dirs = tuple(
        p for p in kept if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in kept)
    )
    return Plan(
        bwrap=bwrap, setpriv=setpriv, python=sys.executable, ro_dirs=ro_dirs, unshare=unshare
    )


def allocate_uid() -> int:
    """Return a uid for one run: distinct for concurrent runs of this host with high
    probability (pid and a per-process counter), so RLIMIT_NPROC budgets do not mix."""
    return UID_BASE + (os.getpid() * 1024 + next(_uid_counter)) % UID_SPAN


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_command(
    plan: Plan, uid: int, limits: SandboxLimits, result_fd: int, seccomp_fd: int | None
) -> list[str]:
    """Build the bwrap + setpriv + python command line (see docs/sandbox.md for each flag)."""
    cmd = [
        plan.bwrap,
        # No --unshare-ipc: launcher_command made the IPC namespace (with low shm limits).
        "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
    ]  # fmt: skip
    cmd += _filesystem_args(plan, limits.scratch_bytes)
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += ["--cap-drop", "ALL"]
    cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    cmd += [
        plan.setpriv,
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
        "--",
        plan.python, "-s", "-P", "-B", HARNESS_IN_SANDBOX, str(result_fd),
    ]  # fmt: skip
    return cmd


#: Capabilities the warm path's zygote keeps (it runs trusted code only): new namespaces and
#: mounts per call (CAP_SYS_ADMIN), ``lo`` up in the call's new network namespace
#: (CAP_NET_ADMIN), the call's uid/gid (CAP_SETUID, CAP_SETGID) and dropping the bounding set
#: (CAP_SETPCAP). Agent code never runs with any of them.
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
#: Size of the zygote's own /tmp (it writes nothing; every call mounts its own /tmp).
ZYGOTE_SCRATCH_BYTES = 1024 * 1024


def zygote_command(plan: Plan, control_fd: int) -> list[str]:
    """Build the bwrap command of the warm path's zygote (docs/sandbox.md, "Warm path").

    The same filesystem, environment and namespaces as :func:`bwrap_command` (plus its own IPC
    namespace), run as root with only :data:`ZYGOTE_CAPS` and without seccomp: the zygote
    unshares and mounts for each call, and each call's agent process drops everything and
    loads the filter itself. No ``--die-with-parent`` (it would tie the zygote to the thread
    that started it); the zygote exits when its control socket closes.
    """
    cmd = [
        plan.bwrap,
        "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-ipc",
        "--unshare-cgroup-try", "--new-session",
    ]  # fmt: skip
    cmd += _filesystem_args(plan, ZYGOTE_SCRATCH_BYTES)
    cmd += ["--cap-drop", "ALL"]
    for cap in ZYGOTE_CAPS:
        cmd += ["--cap-add", cap]
    cmd += [plan.python, "-s", "-P", "-B", HARNESS_IN_SANDBOX, "--zygote", str(control_fd)]
    return cmd


def _filesystem_args(plan: Plan, scratch_bytes: int) -> list[str]:
    """Environment, hostname and filesystem flags shared by the cold sandbox and the zygote."""
    cmd = [
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", SCRATCH,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONHASHSEED", "0",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--proc", "/proc",
        "--dev", "/dev",
    ]  # fmt: skip
    # The scratch tmpfs is mounted before the read-only binds: a checkout (and its venv) that
    # lives under /tmp must stay visible above it.
    cmd += ["--perms", "1777", "--size", str(scratch_bytes), "--tmpfs", SCRATCH]
    made: set[str] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev", SCRATCH}
    for target in (*plan.ro_dirs, HARNESS_IN_SANDBOX):
        for parent in _parents(target):
            if parent not in made:
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
    for directory in plan.ro_dirs:
        cmd += ["--ro-bind", directory, directory]
    cmd += ["--ro-bind", str(HARNESS_PATH.resolve()), HARNESS_IN_SANDBOX]
    cmd += ["--chdir", SCRATCH]
    return cmd


#: System V shared-memory limits of the sandbox's IPC namespace (ipc_namespaces(7), proc(5)):
#: a segment of at most 1 MiB, 1 MiB in all (``shmall`` counts pages), 16 segments, and
#: segments removed when their last user exits. Shared memory is not covered by RLIMIT_AS
#: (SysV shm held 1 GiB in a 256 MiB sandbox).
SHM_LIMITS = {
    "shmmax": 1024 * 1024,
    "shmall": (1024 * 1024) // os.sysconf("SC_PAGE_SIZE"),
    "shmmni": 16,
    "shm_rmid_forced": 1,
}

#: Trusted launcher: join the cgroups (``$1`` = how many ``cgroup.procs`` files follow), then
#: exec the rest. Every later fork inherits the groups.
_JOIN_SCRIPT = (
    'n=$1; shift; i=0; while [ "$i" -lt "$n" ]; do echo $$ > "$1" || exit 125; shift; '
    'i=$((i + 1)); done; exec "$@"'
)


def launcher_command(plan: Plan, procs_files: list[str], bwrap: list[str]) -> list[str]:
    """Wrap the bwrap command: join the run's cgroups, enter a new IPC namespace with
    :data:`SHM_LIMITS` written to its ``/proc/sys/kernel`` files, then exec bwrap.

    Runs as root on the host side, before any agent code; a failed step exits non-zero and
    the sandbox never starts (reported as unavailable).
    """
    writes = " && ".join(
        f"echo {value} > /proc/sys/kernel/{name}" for name, value in SHM_LIMITS.items()
    )
    ipc_script = f'{writes} && exec "$@"'
    return [
        "/bin/sh", "-c", _JOIN_SCRIPT, "sh", str(len(procs_files)), *procs_files,
        plan.unshare, "--ipc", "--", "/bin/sh", "-c", ipc_script, "sh", *bwrap,
    ]  # fmt: skip
