"""Optional cgroups around one sandbox run: memory and process caps over all its processes."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from evaluator.sandbox._types import SandboxLimits


class Cgroup:
    """Optional cgroup v1 ``memory`` + ``pids`` groups around one run.

    Created under this process's own v1 groups when the host allows it (root, writable
    ``/sys/fs/cgroup/{memory,pids}``); otherwise :meth:`create` returns ``None`` and the run
    relies on rlimits alone. Limits: ``memory.limit_in_bytes`` = memory + scratch bytes (the
    tmpfs is charged to the group), ``pids.max`` = max_processes + 3 (bwrap, its pid-1 and the
    harness).
    """

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @staticmethod
    def _own_path(controller: str) -> str | None:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, _, rest = line.partition(":")
            names, _, path = rest.partition(":")
            if controller in names.split(","):
                return path
        return None

    @classmethod
    def create(cls, name: str, limits: SandboxLimits) -> Cgroup | None:
        dirs: dict[str, Path] = {}
        try:
            for controller in ("memory", "pids"):
                own = cls._own_path(controller)
                root = Path("/sys/fs/cgroup") / controller
                if own is None or not (root / "cgroup.procs").exists():
                    raise OSError(f"no cgroup v1 {controller} hierarchy")
                directory = root / own.lstrip("/") / name
                directory.mkdir()
                dirs[controller] = directory
            memory = limits.memory_bytes + limits.scratch_bytes
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap accounting on some hosts
                (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory))
            (dirs["pids"] / "pids.max").write_text(str(limits.max_processes + 3))
        except OSError:
            cls(dirs).destroy()
            return None
        return cls(dirs)

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def oom_killed(self) -> bool:
        """True when the memory group hit its limit and the kernel killed a process."""
        directory = self.dirs.get("memory")
        if directory is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (directory / "memory.oom_control").read_text().splitlines():
                key, _, count = line.partition(" ")
                if key == "oom_kill" and int(count) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        for directory in self.dirs.values():
            for _ in range(50):
                try:
                    pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def destroy(self) -> None:
        self.kill_all()
        for directory in self.dirs.values():
            for _ in range(100):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
