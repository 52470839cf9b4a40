"""One running routing network: a Mininet instance owned by one episode.

Lifecycle: :meth:`RouteNetwork.start` claims a unique name prefix (a lock file under
``/run/netarena-route``, held with ``flock`` for the network's lifetime), removes what a crashed
owner of a *stale* prefix left behind (only prefixes whose lock is no longer held: never another
live episode's), builds the Mininet network (iproute2 Linux bridges, no controller) and switches
IP forwarding on in ``r0``. :meth:`RouteNetwork.stop` stops Mininet, deletes any interface that
still carries the prefix, kills any leftover node shell and releases the prefix. There is no
global ``mn -c``.

The evaluator's own (trusted) commands run in a node's namespace with
``nsenter --net=/proc/<pid>/ns/net``; agent commands go through :mod:`apps.route.commands`.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import re
import secrets
import signal
import string
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluator.app import DependencyMissingError, EmulatorError

from apps.route.probe import CLONE_NEWNET, PROBE_TIMEOUT_S, PingallResult, _libc, pingall
from apps.route.sysctl import read_sysctls
from apps.route.topology import RouteTopology, build_mininet_topo

#: Directory of per-prefix lock files (tmpfs: a reboot clears it).
LOCK_DIR = Path(os.environ.get("NETARENA_ROUTE_LOCK_DIR", "/run/netarena-route"))
#: Prefixes look like ``n<3 base-36 chars>_`` (46,656 values, 5 characters).
PREFIX_RE = re.compile(r"^n[0-9a-z]{3}_$")
_ALPHABET = string.digits + string.ascii_lowercase
#: Longest wait for link state changes to take effect (Linux link-watch delay is <= 1 s).
SETTLE_S = 1.2
#: Default per-command timeout of evaluator-side commands (seconds).
EXEC_TIMEOUT_S = 10.0


def enter_netns(pid: int) -> None:
    """Move the calling thread (only it) into the network namespace of ``pid``.

    Raises:
        OSError: the namespace is gone or ``setns`` failed.
    """
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)


class NetnsCall:
    """``function()`` run in a helper thread moved into the network namespace of ``pid``
    (the rest of the process stays where it is); :meth:`result` waits for it."""

    def __init__(self, pid: int, function: Callable[[], object]) -> None:
        self._value: object = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                enter_netns(pid)
                self._value = function()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> object:
        """What the function returned. Raises what it (or entering the namespace) raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _random_prefix() -> str:
    return "n" + "".join(secrets.choice(_ALPHABET) for _ in range(3)) + "_"


def list_interfaces() -> list[str]:
    """Names of all interfaces in the root network namespace (``/sys/class/net``)."""
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


def node_shell_pids(prefix: str) -> list[int]:
    """Pids of Mininet node shells (``bash ... mininet:<prefix>...``) of ``prefix``."""
    marker = f"mininet:{prefix}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry))
    return pids


def remove_prefix_leftovers(prefix: str) -> dict[str, int]:
    """Delete root-namespace interfaces and kill node shells named with ``prefix``.

    Only call this for a prefix you hold the lock of (or whose owner is dead).
    Returns ``{"interfaces": n, "processes": m}`` removed.
    """
    if not PREFIX_RE.match(prefix):
        raise ValueError(f"not an episode prefix: {prefix!r}")
    killed = 0
    for pid in node_shell_pids(prefix):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    removed = 0
    for name in list_interfaces():
        if name.startswith(prefix):
            subprocess.run(["ip", "link", "del", "dev", name], capture_output=True, check=False)
            removed += 1
    return {"interfaces": removed, "processes": killed}


def cleanup_stale_prefixes() -> list[str]:
    """Clean up after episodes whose process died (their prefix lock is no longer held).

    Returns the prefixes cleaned. Live episodes hold their lock, so they are never touched.
    """
    cleaned: list[str] = []
    if not LOCK_DIR.is_dir():
        return cleaned
    for lock_path in LOCK_DIR.glob("n*_.lock"):
        prefix = lock_path.name[: -len(".lock")]
        if not PREFIX_RE.match(prefix):
            continue
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a live episode
        try:
            remove_prefix_leftovers(prefix)
            with contextlib.suppress(OSError):
                lock_path.unlink()
            cleaned.append(prefix)
        finally:
            os.close(fd)
    return cleaned


class PrefixClaim:
    """An exclusive claim on a name prefix, held by ``flock`` on ``LOCK_DIR/<prefix>.lock``."""

    def __init__(self, prefix: str, fd: int) -> None:
        self.prefix = prefix
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, attempts: int = 64) -> PrefixClaim:
        """Claim a fresh random prefix no live episode or interface uses.

        Raises:
            EmulatorError: no free prefix after ``attempts`` tries (should not happen).
        """
        LOCK_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        for _ in range(attempts):
            prefix = _random_prefix()
            path = LOCK_DIR / f"{prefix}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if any(name.startswith(prefix) for name in list_interfaces()):
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            os.write(fd, f"{os.getpid()}\n".encode())
            return cls(prefix, fd)
        raise EmulatorError("could not claim a free episode prefix")

    def forget(self) -> None:
        """Close this process's descriptor of the lock without removing the lock file (a
        forked child's copy: the parent still holds the lock)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def release(self) -> None:
        """Remove the lock file and release the lock (idempotent)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            (LOCK_DIR / f"{self.prefix}.lock").unlink()
        os.close(self._fd)
        self._fd = None


class RouteNetwork:
    """A started Mininet network for one episode.

    Attributes:
        topology: the prefixed :class:`RouteTopology`.
        pids: machine name -> pid of its Mininet shell (hosts then ``r0``).
        build_s / stop_s: seconds the last build / stop took.
    """

    def __init__(self, topology: RouteTopology) -> None:
        self._shape = topology
        self.topology = topology
        self.pids: dict[str, int] = {}
        self._net: Any = None
        self._claim: PrefixClaim | None = None
        self.build_s = 0.0
        self.stop_s = 0.0
        #: Machines something may have changed: every machine named to :meth:`exec` or
        #: :meth:`pid_of` (fault injection, distractors, agent commands) since the last clear.
        #: The pool restores and verifies these (:mod:`apps.route.pool`).
        self.touched: set[str] = set()

    # lifecycle ----------------------------------------------------------------------------
    def start(self) -> RouteNetwork:
        """Claim a prefix, build and start the network.

        Raises:
            DependencyMissingError: Mininet/mnexec/nsenter missing.
            EmulatorError: not root, or the network failed to come up.
        """
        if os.geteuid() != 0:
            raise EmulatorError("the route app needs root (network namespaces)")
        from apps.route.mn import mininet_api

        api = mininet_api()
        started = time.perf_counter()
        cleanup_stale_prefixes()
        self._claim = PrefixClaim.acquire()
        self.topology = self._shape.with_prefix(self._claim.prefix)
        try:
            topo = build_mininet_topo(self.topology)
            self._net = api["Mininet"](
                topo=topo,
                switch=api["IPRouteBridge"],
                controller=None,
                build=True,
                cleanup=False,
                waitConnected=False,
            )
            self._net.start()
            self.pids = {name: int(self._net[name].pid) for name in self.topology.machines()}
            self._configure_router()
        except DependencyMissingError:
            self.stop()
            raise
        except Exception as exc:
            self.stop()
            if isinstance(exc, EmulatorError):
                raise
            raise EmulatorError(f"Mininet failed to build the network: {exc}") from exc
        self.build_s = time.perf_counter() - started
        return self

    def _configure_router(self) -> None:
        """On every router: forwarding on, ICMP redirects off, the plan's static routes.

        Redirects off: with a misdirecting route (WR method 4) a router would otherwise teach
        hosts a redirect that outlives the repair in their route cache for minutes. Hosts get
        forwarding *off* explicitly: a new network namespace starts with the machine's own
        ``ip_forward``, which container hosts (podman, Docker, Kubernetes nodes) turn on, and
        a forwarding host would carry traffic around a wrong-gateway fault.
        """
        topo = self.topology
        for host in topo.hosts():
            status, output = self.exec(host, ["sysctl", "-w", "net.ipv4.ip_forward=0"])
            if status != 0:
                raise EmulatorError(f"cannot configure {host}: {output}")
        for router in topo.routers():
            keys = ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0"]
            keys += [
                f"net.ipv4.conf.{intf}.send_redirects=0" for intf, _ in topo.interfaces(router)
            ]
            status, output = self.exec(router, ["sysctl", "-w", *keys])
            if status != 0:
                raise EmulatorError(f"cannot configure {router}: {output}")
            for route in topo.static_routes(router):
                status, output = self.exec(router, ["ip", "route", "add", *route.split()])
                if status != 0:
                    raise EmulatorError(f"cannot add route {route} on {router}: {output}")

    def stop(self) -> None:
        """Stop Mininet and remove every trace of this network's prefix (idempotent)."""
        started = time.perf_counter()
        net, self._net = self._net, None
        if net is not None:
            with contextlib.suppress(Exception):
                net.stop()
        if self._claim is not None:
            remove_prefix_leftovers(self._claim.prefix)
            self._claim.release()
            self._claim = None
        self.pids = {}
        self.stop_s = time.perf_counter() - started

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._net is not None

    def __enter__(self) -> RouteNetwork:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # evaluator-side execution -------------------------------------------------------------
    def pid_of(self, machine: str) -> int:
        """Pid of ``machine``'s shell, for running something in its namespace; the machine is
        recorded in :attr:`touched`. Raises ``KeyError`` for a name not in this network."""
        pid = self.pids[machine]
        self.touched.add(machine)
        return pid

    def forget(self) -> None:
        """Drop this network without stopping it (a forked child's copy of its parent's
        network): close the inherited prefix-lock descriptor, so only the parent holds it."""
        self._net = None
        if self._claim is not None:
            self._claim.forget()
            self._claim = None
        self.pids = {}

    def exec(
        self, machine: str, argv: list[str], timeout_s: float = EXEC_TIMEOUT_S
    ) -> tuple[int, str]:
        """Run trusted ``argv`` in ``machine``'s network namespace; return (status, output).

        Only for the evaluator's own commands (fault injection, state fingerprints); agent
        commands go through the sandbox. The machine is recorded in :attr:`touched`. Raises
        ``KeyError`` for an unknown machine.
        """
        self.touched.add(machine)
        return self._exec(machine, argv, timeout_s)

    def _exec(
        self, machine: str, argv: list[str], timeout_s: float = EXEC_TIMEOUT_S
    ) -> tuple[int, str]:
        """:meth:`exec` for read-only commands of the evaluator (not recorded as touching)."""
        pid = self.pids[machine]
        try:
            proc = subprocess.run(
                ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return 124, f"timed out after {timeout_s} s"
        return proc.returncode, (proc.stdout + proc.stderr).strip()

    def pingall(self, *, timeout_s: float = PROBE_TIMEOUT_S, attempts: int = 2) -> PingallResult:
        """Probe every ordered pair of machines (hosts and r0). See :func:`probe.pingall`."""
        ips = {name: self.topology.probe_ip(name) for name in self.pids}
        return pingall(self.pids, ips, timeout_s=timeout_s, attempts=attempts)

    def links_pending(self, machine: str) -> bool:
        """True when an interface of ``machine`` or of this network's switches is up with
        carrier but not yet operational (see :meth:`wait_links_settled`)."""
        status, out = self._exec(machine, ["ip", "-o", "link", "show"])
        lines = out.splitlines() if status == 0 else []
        for name in list_interfaces():
            if name.startswith(self.topology.prefix):
                try:
                    flags = int(Path(f"/sys/class/net/{name}/flags").read_text(), 16)
                    carrier = Path(f"/sys/class/net/{name}/carrier").read_text().strip()
                    oper = Path(f"/sys/class/net/{name}/operstate").read_text().strip()
                except OSError:
                    continue
                if flags & 0x1 and carrier == "1" and oper not in ("up", "unknown"):
                    return True
        for line in lines:
            match = re.search(r"<([^>]*)>.*\bstate (\S+)", line)
            if match is None:
                continue
            flags_list = match.group(1).split(",")
            if "UP" in flags_list and "LOWER_UP" in flags_list:
                if match.group(2) not in ("UP", "UNKNOWN"):
                    return True
        return False

    def wait_links_settled(self, machine: str, timeout_s: float = SETTLE_S) -> float:
        """Wait until no interface of ``machine`` or of this network's switches is between
        states; return the seconds waited.

        The kernel applies carrier changes -- and attaches the queueing discipline of an
        interface that came up -- from its link-watch work, up to one second after the
        command returned; until then packets through that interface are dropped. An
        interface that is administratively up with carrier but whose operational state is
        not yet "up" is in that window.
        """
        started = time.perf_counter()
        while self.links_pending(machine):
            if time.perf_counter() - started >= timeout_s:
                break
            time.sleep(0.02)
        return time.perf_counter() - started

    def fingerprint(self, machine: str) -> str:
        """:meth:`fingerprint_parts` joined into one string."""
        return "\n---\n".join(self.fingerprint_parts(machine))

    def fingerprint_parts(self, machine: str) -> list[str]:
        """Text snapshot of ``machine``'s network configuration, used to tell whether a step
        changed state: one part per entry of :data:`FINGERPRINT_COMMANDS` (links, IPv4
        addresses, routes of every table, rules, qdiscs, iptables rules and non-default
        policies, forwarding; then IPv6 addresses, routes and rules, permanent, noarp and
        proxy neighbour entries, ip6tables), read by one trusted ``sh`` in the node's
        namespace, and every ``net.*`` sysctl, read meanwhile in-process. It covers every kind
        of state an allowed command can write (:data:`FINGERPRINT_READS`). Left out as noise:
        counters and lifetimes, what the kernel makes by itself (IPv6 link-local addresses
        and ``proto kernel`` routes, which follow links and addresses; multicast neighbour
        entries), neighbour entries traffic made, and IPv6 duplicate address detection flags.
        """
        sysctls = NetnsCall(self.pids[machine], read_sysctls)
        commands = [command for _label, command in FINGERPRINT_COMMANDS[:-1]]
        # no error text: stderr would land after the last part (and vary with the timing)
        script = "exec 2>/dev/null; " + "; echo @@; ".join(commands)
        _status, out = self._exec(machine, ["sh", "-c", script])
        parts = [part.strip() for part in (out + "\n").split("@@\n")]
        parts += [""] * (len(commands) - len(parts))
        parts = parts[: len(commands)]
        parts[1] = re.sub(r"\b(valid_lft|preferred_lft) \S+", "", parts[1])
        # chain policy lines carry packet counters (":FORWARD DROP [32:2688]") that grow with
        # every probe a DROP policy drops: keep the policy, not the counters
        parts[5] = _rules_and_policies(parts[5])
        parts[7] = "\n".join(_ipv6_config(parts[7].splitlines(), _eui64_link_locals(parts[0])))
        parts[8] = "\n".join(_neighbours_by_command(parts[8].splitlines()))
        parts[9] = _rules_and_policies(parts[9])
        try:
            values = sysctls.result()
        except OSError as exc:
            values = {"error": str(exc)}
        assert isinstance(values, dict)
        parts.append("\n".join(f"{path}:{values[path].strip()}" for path in sorted(values)))
        return parts


#: What :meth:`RouteNetwork.fingerprint_parts` reads, in order: (label, ``sh`` command). The
#: first seven keep their indexes (callers read 0, links, and 4, qdiscs); the sysctls are
#: read in-process (:func:`apps.route.sysctl.read_sysctls`), not by the command shown.
FINGERPRINT_COMMANDS = (
    ("links", "ip -d link show"),
    ("ipv4 addresses", "ip -4 addr show"),
    ("ipv4 routes", "ip -4 route show table all"),
    ("ipv4 rules", "ip -4 rule show"),
    ("qdiscs", "tc qdisc show"),
    ("iptables", "iptables-save"),
    ("forwarding", "cat /proc/sys/net/ipv4/ip_forward"),
    ("ipv6", "printf 'address show\\nroute show table all\\nrule show\\n' | ip -6 -o -batch -"),
    ("neighbours", "printf 'neigh show nud all\\nneigh show proxy\\n' | ip -batch -"),
    ("ip6tables", "ip6tables-save"),
    ("sysctls", "(in-process: read_sysctls)"),
)

#: Every kind of state an allowed command can write (``apps.route.allowlist.STATE_KINDS``) ->
#: the :data:`FINGERPRINT_COMMANDS` labels whose parts show a change of it.
#: ``tests/apps/route/test_state_coverage.py`` checks it against the allow-list.
FINGERPRINT_READS: dict[str, tuple[str, ...]] = {
    "link": ("links", "sysctls"),
    "address4": ("ipv4 addresses",),
    "address6": ("ipv6",),
    "route4": ("ipv4 routes",),
    "route6": ("ipv6",),
    "rule4": ("ipv4 rules",),
    "rule6": ("ipv6",),
    "neighbour4": ("neighbours",),
    "neighbour6": ("neighbours",),
    "proxy4": ("neighbours",),
    "proxy6": ("neighbours",),
    "qdisc": ("qdiscs",),
    "iptables": ("iptables",),
    "ip6tables": ("ip6tables",),
    # entries are made by traffic, not by a step; a step changes the rules that make and
    # mark them
    "conntrack": ("iptables", "ip6tables"),
    "sysctl": ("sysctls", "forwarding"),
}


def _eui64_link_locals(links: str) -> set[tuple[str, ipaddress.IPv6Address]]:
    """(interface, link-local address) the kernel makes from each Ethernet link's MAC
    (EUI-64, ``addrgenmode eui64``), from ``ip link show`` output."""
    made = set()
    for match in re.finditer(r"^\d+: ([^:@\s]+)[^\n]*\n\s+link/ether (\S+)", links, re.M):
        mac = bytes.fromhex(match.group(2).replace(":", ""))
        eui = bytes([mac[0] ^ 0x02, *mac[1:3], 0xFF, 0xFE, *mac[3:6]])
        made.add((match.group(1), ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui)))
    return made


def _ipv6_config(
    lines: list[str], kernel_link_locals: set[tuple[str, ipaddress.IPv6Address]]
) -> list[str]:
    """IPv6 addresses, routes and rules (``ip -6 -o`` lines) without what the kernel makes by
    itself and timing noise: the kernel's EUI-64 link-local addresses (made and dropped with
    the link; an IPv4 flush drops them too; ``kernel_link_locals``) and ``proto kernel``
    routes (they follow links and addresses) are left out, lifetimes and
    duplicate-address-detection flags stripped."""
    kept = []
    for line in lines:
        if " proto kernel " in line:
            continue
        local = re.match(r"^\d+: (\S+)\s+inet6 (fe80:[0-9a-f:]*)/64 ", line)
        if local and (local.group(1), ipaddress.IPv6Address(local.group(2))) in kernel_link_locals:
            continue
        line = re.sub(r"\b(valid_lft|preferred_lft) \S+", "", line)
        kept.append(re.sub(r"\b(tentative|dadfailed|optimistic) ", "", line).rstrip())
    return kept


def _neighbours_by_command(lines: list[str]) -> list[str]:
    """Neighbour entries a command makes: permanent, proxy, and noarp ones except those
    traffic makes (multicast destinations, loopback)."""
    kept = []
    for line in lines:
        line = line.rstrip()
        if line.endswith(("PERMANENT", " proxy")):
            kept.append(line)
        elif line.endswith("NOARP") and not re.match(
            r"^(ff[0-9a-f]{2}:|22[4-9]\.|23[0-9]\.)|.* dev lo ", line
        ):
            kept.append(line)
    return kept


def _rules_and_policies(saved: str) -> str:
    """iptables-save output reduced to its rules, user chains and non-default chain
    policies, without packet counters. A table with none of them is left out: it filters
    nothing, and iptables-nft makes one by the first write to it and cannot delete it (a
    reused network loses it: the pool deletes every table)."""
    return "\n".join(
        re.sub(r" \[\d+:\d+\]$", "", line)
        for line in saved.splitlines()
        if line.startswith("-A ") or (line.startswith(":") and not re.match(r"^:\S+ ACCEPT ", line))
    )
