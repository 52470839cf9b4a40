"""cgroups around one sandbox run: memory and process caps over all its processes.

POSIX rlimits are per process and do not count shared memory (``memfd_create`` + ``write``,
tmpfs files): only a memory cgroup caps what the whole sandbox holds (without
one, a 256 MiB sandbox held 1 GiB). Both hierarchies are supported:

* **cgroup v1** (``/sys/fs/cgroup/memory``, ``/sys/fs/cgroup/pids``): one group per controller
  under this process's own groups; ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes``
  when swap is accounted) and ``pids.max``.
* **cgroup v2** (``/sys/fs/cgroup/cgroup.controllers`` exists): one group per run inside a
  *delegated subtree* with the ``memory`` and ``pids`` controllers enabled; ``memory.max``,
  ``memory.swap.max = 0`` and ``pids.max``. The subtree is :data:`CGROUP_PARENT_ENV` when set
  (e.g. a systemd unit's ``Delegate=yes`` cgroup), else ``netarena-sandbox`` next to this
  process's own cgroup (v2 forbids processes in a group that hands controllers to children,
  so the subtree is never this process's own group), or under the root when this process
  sits in the root.

Limits: memory = ``memory_bytes + scratch_bytes`` (the tmpfs is charged to the group),
pids = ``max_processes + 3`` (bwrap, its pid 1 and the harness). When neither hierarchy can
be used, :meth:`Cgroup.create` raises :class:`CgroupUnavailableError` with the reason; the
runner then refuses to run agent code unless :data:`ALLOW_NO_CGROUP_ENV` is set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from evaluator.sandbox._types import SandboxLimits

#: Where the cgroup filesystem is mounted (v2: the unified hierarchy itself).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: This process's mounts (proc(5)), read for where a v1 hierarchy is mounted from.
MOUNTINFO = Path("/proc/self/mountinfo")
#: Environment variable naming the delegated v2 subtree to create per-run groups in (an
#: absolute path under :data:`CGROUP_ROOT`, or a cgroup path such as ``/netarena.slice``).
CGROUP_PARENT_ENV = "NETARENA_SANDBOX_CGROUP"
#: Environment variable that lets agent code run without any memory cgroup (``1``):
#: development machines only; the sandbox then cannot bound shared memory.
ALLOW_NO_CGROUP_ENV = "NETARENA_SANDBOX_ALLOW_NO_CGROUP"
#: Name prefix of every sandboxed run's group (``<prefix><worker pid>-<run id>``).
SANDBOX_GROUP_PREFIX = "netarena-sbx-"
#: Name of the default v2 subtree (next to this process's own cgroup).
V2_SUBTREE = "netarena-sandbox"


class CgroupUnavailableError(OSError):
    """No memory + pids cgroup can be made for a run on this host (the reason is the text)."""


def no_cgroup_allowed() -> bool:
    """True when :data:`ALLOW_NO_CGROUP_ENV` is ``1`` (development override)."""
    return os.environ.get(ALLOW_NO_CGROUP_ENV, "") == "1"


def _own_path(controller: str | None) -> str | None:
    """This process's cgroup path for a v1 ``controller`` (``None``: the v2 entry ``0::``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if controller is None and number == "0" and names == "":
            return path
        if controller is not None and controller in names.split(","):
            return path
    return None


def _v1_directory(controller: str, own: str) -> Path:
    """Where this process's cgroup ``own`` of the v1 ``controller`` is in the file system.

    On a host it is ``/sys/fs/cgroup/<controller>/<own>``. In a container (podman or Docker
    without a cgroup namespace) ``/proc/self/cgroup`` still gives the host's path, but the
    hierarchy is mounted from the container's own cgroup down: the mount's root (field 4 of
    ``/proc/self/mountinfo``, proc(5)) is then a prefix of ``own`` that the mount leaves out.
    """
    mount_point = CGROUP_ROOT / controller
    try:
        mounts = MOUNTINFO.read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        fields = line.split()
        if len(fields) > 4 and fields[4] == str(mount_point):
            mount_root = fields[3]
            if mount_root != "/" and (own == mount_root or own.startswith(mount_root + "/")):
                return mount_point / own[len(mount_root) :].lstrip("/")
    return mount_point / own.lstrip("/")


def _is_v2() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").is_file()


def _v2_subtree() -> Path:
    """Return the delegated v2 subtree (created and given memory + pids when needed).

    Raises:
        CgroupUnavailableError: no usable subtree.
    """
    configured = os.environ.get(CGROUP_PARENT_ENV, "")
    if configured:
        path = Path(configured)
        subtree = path if path.is_relative_to(CGROUP_ROOT) else CGROUP_ROOT / configured.lstrip("/")
    else:
        own = _own_path(None)
        if own is None:
            raise CgroupUnavailableError("this process has no cgroup v2 entry in /proc/self/cgroup")
        own_dir = CGROUP_ROOT / own.lstrip("/")
        parent = own_dir if own in ("", "/") else own_dir.parent
        subtree = parent / V2_SUBTREE
    try:
        subtree.mkdir(exist_ok=True)
        enabled = (subtree / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            available = (subtree / "cgroup.controllers").read_text().split()
            missing = {"memory", "pids"} - set(available)
            if missing:
                raise CgroupUnavailableError(
                    f"cgroup v2 subtree {subtree} lacks the {sorted(missing)} controller(s): "
                    f"enable them in its parent's cgroup.subtree_control or set {CGROUP_PARENT_ENV}"
                )
            (subtree / "cgroup.subtree_control").write_text("+memory +pids")
    except CgroupUnavailableError:
        raise
    except OSError as exc:
        raise CgroupUnavailableError(
            f"cannot use cgroup v2 subtree {subtree} ({exc}); "
            f"set {CGROUP_PARENT_ENV} to a delegated cgroup"
        ) from exc
    return subtree


class Cgroup:
    """The memory + pids group(s) of one run (see the module docstring).

    Attributes:
        version: 1 or 2.
        dirs: controller name -> group directory (v2: one directory under the key ``"v2"``).
    """

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, limits: SandboxLimits) -> Cgroup:
        """Create the run's group(s) named ``name`` with ``limits`` applied.

        Raises:
            CgroupUnavailableError: neither a v1 nor a v2 memory + pids group can be made.
        """
        memory = limits.memory_bytes + limits.scratch_bytes
        pids = limits.max_processes + 3
        if (CGROUP_ROOT / "memory" / "cgroup.procs").exists():
            return cls._create_v1(name, memory, pids)
        if _is_v2():
            return cls._create_v2(name, memory, pids)
        raise CgroupUnavailableError(
            f"no cgroup v1 memory hierarchy and no cgroup v2 at {CGROUP_ROOT}"
        )

    @classmethod
    def _create_v1(cls, name: str, memory: int, pids: int) -> Cgroup:
        dirs: dict[str, Path] = {}
        try:
            for controller in ("memory", "pids"):
                own = _own_path(controller)
                root = CGROUP_ROOT / controller
                if own is None or not (root / "cgroup.procs").exists():
                    raise OSError(f"no cgroup v1 {controller} hierarchy")
                directory = _v1_directory(controller, own) / name
                directory.mkdir()
                dirs[controller] = directory
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap accounting on some hosts
                (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory))
            (dirs["pids"] / "pids.max").write_text(str(pids))
        except OSError as exc:
            cls(1, dirs).destroy()
            raise CgroupUnavailableError(f"cgroup v1: {exc}") from exc
        return cls(1, dirs)

    @classmethod
    def _create_v2(cls, name: str, memory: int, pids: int) -> Cgroup:
        subtree = _v2_subtree()
        directory = subtree / name
        group = cls(2, {"v2": directory})
        try:
            directory.mkdir()
            (directory / "memory.max").write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap controller on some hosts
                (directory / "memory.swap.max").write_text("0")
            (directory / "pids.max").write_text(str(pids))
        except OSError as exc:
            group.destroy()
            raise CgroupUnavailableError(f"cgroup v2 group in {subtree}: {exc}") from exc
        return group

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to in order to join."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def task_ids(self) -> list[int]:
        """Host ids of every task (thread) in the run's group; ``[]`` when it cannot be read.

        v1 lists them in the memory group's ``tasks``, v2 in ``cgroup.threads``.
        """
        if self.version == 2:
            path = self.dirs["v2"] / "cgroup.threads"
        else:
            path = self.dirs["memory"] / "tasks"
        try:
            return [int(t) for t in path.read_text().split()]
        except (OSError, ValueError, KeyError):
            return []

    def sandbox_task_ids(self) -> list[int]:
        """Host ids of every task in *any* sandboxed run's group beside this one (this run's
        included): the groups named :data:`SANDBOX_GROUP_PREFIX` under the same parent, i.e.
        the agent code of every episode of every worker that shares this cgroup tree.

        The overload excuse subtracts them from the host's load: load made by sandboxed agent
        code (the agent's own other episodes above all) never excuses a timeout.
        """
        directory = self.dirs.get("v2") if self.version == 2 else self.dirs.get("memory")
        if directory is None:
            return []
        name = "cgroup.threads" if self.version == 2 else "tasks"
        found: list[int] = []
        for group in directory.parent.glob(f"{SANDBOX_GROUP_PREFIX}*"):
            try:
                found += [int(t) for t in (group / name).read_text().split()]
            except (OSError, ValueError):
                continue  # removed meanwhile
        return found

    def add(self, pid: int) -> None:
        """Move the host process ``pid`` (and its future children) into the group(s).

        Raises:
            OSError: the kernel refused (e.g. the process is gone).
        """
        for procs in self.procs_files():
            with open(procs, "w") as handle:
                handle.write(str(pid))

    def oom_killed(self) -> bool:
        """True when the memory group hit its limit and the kernel killed a process."""
        if self.version == 2:
            name, key = "memory.events", "oom_kill"
            directory = self.dirs.get("v2")
        else:
            name, key = "memory.oom_control", "oom_kill"
            directory = self.dirs.get("memory")
        if directory is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (directory / name).read_text().splitlines():
                field, _, count = line.partition(" ")
                if field == key and int(count) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        """SIGKILL every process in the group(s) (``cgroup.kill`` on v2 when available)."""
        for directory in self.dirs.values():
            if self.version == 2:
                with contextlib.suppress(OSError):
                    (directory / "cgroup.kill").write_text("1")
            for attempt in range(60):
                try:
                    pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(min(0.01, 0.0005 * 2**attempt))  # exiting processes go quickly

    def destroy(self) -> None:
        """Kill what is left and remove the group directories (missing ones are fine)."""
        self.kill_all()
        for directory in self.dirs.values():
            for _ in range(500):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)
