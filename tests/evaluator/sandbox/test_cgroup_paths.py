"""Where a v1 cgroup is found: on a host, and in a container whose cgroup mounts start at its
own group (podman and Docker without a cgroup namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.sandbox import _cgroup

CONTAINER = "/libpod_parent/libpod-a0daafa7"


@pytest.mark.parametrize(
    ("mount_root", "own", "found"),
    [
        ("/", "/process_api/8d00", "/sys/fs/cgroup/memory/process_api/8d00"),  # a host
        (CONTAINER, CONTAINER, "/sys/fs/cgroup/memory"),  # a container's own group
        (CONTAINER, CONTAINER + "/worker", "/sys/fs/cgroup/memory/worker"),
        ("/other", "/process_api/8d00", "/sys/fs/cgroup/memory/process_api/8d00"),
    ],
)
def test_the_v1_group_is_found_under_its_mount(
    tmp_path: Path, monkeypatch, mount_root: str, own: str, found: str
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"35 31 0:32 {mount_root} /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        f"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    )
    monkeypatch.setattr(_cgroup, "MOUNTINFO", mountinfo)
    assert _cgroup._v1_directory("memory", own) == Path(found)


def test_an_unreadable_mountinfo_falls_back_to_the_full_path(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_cgroup, "MOUNTINFO", tmp_path / "absent")
    assert _cgroup._v1_directory("pids", "/a/b") == Path("/sys/fs/cgroup/pids/a/b")
