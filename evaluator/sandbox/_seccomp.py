"""The sandbox's seccomp filter, compiled with libseccomp through ctypes (docs/sandbox.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache

#: Namespace flags of clone(2)/unshare(2) the agent may not use (linux/sched.h). Without
#: capabilities only CLONE_NEWUSER would succeed, and a user namespace would give the agent
#: capabilities over fresh mounts (an unbounded tmpfs, for one); all are listed for clarity.
_NAMESPACE_FLAGS = (
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
#: System calls refused with EPERM: namespaces and mounts, kernel keyrings, eBPF, perf,
#: userfaultfd, io_uring, ptrace and cross-process memory access, kernel modules and
#: other administration calls (most need capabilities anyway; they are a large attack surface).
_DENIED_SYSCALLS = (
    "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
    "syslog", "quotactl", "personality", "lookup_dcookie", "vhangup",
)  # fmt: skip
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp`` of libseccomp (seccomp_rule_add_array(3))."""

    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


@lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """Compile the sandbox's seccomp filter with libseccomp; ``None`` if libseccomp is absent.

    Default action: allow. Denied: :data:`_DENIED_SYSCALLS` (EPERM), ``clone``/``unshare``
    with any of :data:`_NAMESPACE_FLAGS` (EPERM) and ``clone3`` (ENOSYS, whose flags live in
    memory a filter cannot read; glibc then falls back to ``clone``). Foreign architectures
    (e.g. 32-bit calls on x86_64) are killed by libseccomp's default bad-arch action. Returns
    the classic-BPF program that bwrap's ``--seccomp FD`` loads.
    """
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
        ctypes.POINTER(_ScmpArgCmp),
    )  # fmt: skip
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:

        def rule(action: int, syscall: str, *compare: _ScmpArgCmp) -> None:
            number = lib.seccomp_syscall_resolve_name(syscall.encode())
            if number < 0:
                return  # unknown on this architecture/libseccomp version
            array = (_ScmpArgCmp * max(len(compare), 1))(*compare)
            if lib.seccomp_rule_add_array(ctx, action, number, len(compare), array) != 0:
                raise OSError(f"seccomp_rule_add_array failed for {syscall}")

        for syscall in _DENIED_SYSCALLS:
            rule(_scmp_errno(1), syscall)  # EPERM
        rule(_scmp_errno(38), "clone3")  # ENOSYS
        for syscall in ("clone", "unshare"):
            for flag in _NAMESPACE_FLAGS:
                rule(_scmp_errno(1), syscall, _ScmpArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        read_fd, write_fd = os.pipe()
        try:
            if lib.seccomp_export_bpf(ctx, write_fd) != 0:
                return None
            os.close(write_fd)
            write_fd = -1
            chunks = []
            while chunk := os.read(read_fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
    except OSError:
        return None
    finally:
        lib.seccomp_release(ctx)


def filled_pipe(data: bytes) -> int:
    """Return the read end of a pipe already holding ``data`` (< 64 KiB) and closed for writing.

    bwrap reads the compiled filter from such a descriptor (``--seccomp FD``).
    """
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd
