"""The ``net.*`` sysctls of a route machine's network namespace (the calling thread's:
``/proc/sys/net`` shows the reader's namespace), read and written in-process: the step
fingerprint reads them (:meth:`apps.route.network.RouteNetwork.fingerprint_parts`), the pool's
snapshot records them and its restore writes back those that differ (:mod:`apps.route.pool`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable

#: ``net.*`` sysctls that change by themselves (traffic counters), left out of comparisons.
#: Not ``stable_secret``: it is unreadable until written and cannot be unset after, so a
#: readable one is state (a reused network's verification fails on it and rebuilds).
VOLATILE_SYSCTLS = re.compile(r"nf_conntrack_count:")


def read_sysctls() -> dict[str, str]:
    """Every readable ``net.*`` sysctl of the calling thread's network namespace, by path
    under ``/proc/sys/net`` (``/proc/sys/net`` shows the reader's namespace); the volatile
    ones (:data:`VOLATILE_SYSCTLS`) are left out, and so are those no read succeeds on (a
    write-only ``route/flush``, a ``stable_secret`` never written)."""
    values: dict[str, str] = {}
    stack = ["/proc/sys/net"]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
                continue
            if VOLATILE_SYSCTLS.search(entry.name + ":"):
                continue
            try:
                with open(entry.path, "rb", buffering=0) as handle:
                    values[entry.path] = handle.read().decode(errors="replace")
            except OSError:
                continue
    return values


def _sysctl_order(path: str) -> int:
    # ip_forward rewrites every interface's forwarding; all/ and default/ are inherited
    if path.endswith("/ipv4/ip_forward"):
        return 0
    if "/conf/all/" in path or "/conf/default/" in path:
        return 1
    return 2


def read_sysctl_paths(paths: Iterable[str]) -> dict[str, str]:
    """The values of ``paths`` (sysctl files) in the calling thread's namespace; unreadable
    or missing paths are left out."""
    values: dict[str, str] = {}
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            values[path] = os.read(fd, 65536).decode(errors="replace")
        except OSError:
            continue
        finally:
            os.close(fd)
    return values


def restore_sysctls(want: dict[str, str]) -> tuple[list[str], bool]:
    """Write back every sysctl of the calling thread's namespace that differs from ``want``,
    then read them again.

    Every readable ``net.*`` sysctl is read (:func:`read_sysctls`), not only the snapshot's
    paths: a path readable now that the snapshot could not read is state no write can take
    back -- an IPv6 ``stable_secret`` is unreadable until written and cannot be unset after
    (the allow-list refuses writing it; this catches it however it was written) -- and is
    reported, so the network is rebuilt. (A path of an interface the snapshot lacks would be
    one too, but the restore deleted such interfaces before this runs.)

    Returns (the paths that still differ or should not be readable -- empty: verified,
    whether anything was written).
    """
    have = read_sysctls()
    unexpected = [f"{path} is readable (written: it cannot be unset)" for path in sorted(have)
                  if path not in want]  # fmt: skip
    wrong = [path for path, value in want.items() if have.get(path) != value]
    if not wrong:
        return unexpected, False
    for path in sorted(wrong, key=_sysctl_order):
        with contextlib.suppress(OSError):
            with open(path, "wb", buffering=0) as handle:
                handle.write(want[path].encode())
    have = read_sysctl_paths(want)
    return [path for path, value in want.items() if have.get(path) != value] + unexpected, True

