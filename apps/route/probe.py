"""Fast parallel pingall: ICMP echo between every ordered pair of nodes.

Mininet's ``pingAll`` pings sequentially (one ``ping -c1`` process per pair, each waiting out its
timeout); with S x H = 16 hosts that is 272 processes. Here the evaluator opens one raw ICMP
socket inside each node's network namespace (``setns(2)`` in a short-lived helper thread: a
socket stays bound to the namespace it was created in), sends every echo request at once and
collects the replies with ``select`` until all pairs answered or the timeout passed. Pairs that
did not answer get one more attempt, so a single lost packet does not flip a pair.

Echo requests carry 56 bytes of payload like ``ping``'s default (84-byte IP packets), so an MTU
fault below 84 bytes is visible (paper C.2, disable_interface method 3).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from evaluator.app import EmulatorError

CLONE_NEWNET = 0x40000000
ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0
#: How long one probe attempt waits for echo replies (seconds). A veth/bridge round trip takes
#: well under a millisecond; the margin absorbs scheduling delays on a loaded 2-core machine.
PROBE_TIMEOUT_S = 0.2
#: Payload size of ``ping``'s default echo request (bytes).
PING_PAYLOAD_BYTES = 56

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo_request(ident: int, seq: int) -> bytes:
    payload = bytes(range(PING_PAYLOAD_BYTES))
    header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    csum = _checksum(header + payload)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, csum, ident, seq) + payload


def open_icmp_socket(pid: int) -> socket.socket:
    """Return a non-blocking raw ICMP socket living in the network namespace of ``pid``.

    Raises:
        EmulatorError: the namespace is gone or ``setns``/``socket`` failed (needs root).
    """
    result: dict[str, object] = {}

    def worker() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            result["error"] = exc
            return
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                result["error"] = OSError(err, os.strerror(err))
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            sock.setblocking(False)
            result["socket"] = sock
        except OSError as exc:
            result["error"] = exc
        finally:
            os.close(fd)

    thread = threading.Thread(target=worker, name=f"netns-{pid}")
    thread.start()
    thread.join()
    sock = result.get("socket")
    if not isinstance(sock, socket.socket):
        raise EmulatorError(
            f"cannot open an ICMP socket in the namespace of pid {pid}: {result.get('error')}"
        )
    return sock


@dataclass
class PingallResult:
    """Outcome of one pingall.

    Attributes:
        nodes: node names in display order.
        reachable: ordered pairs ``(src, dst)`` that answered.
        elapsed_s: wall time of the probe in seconds.
    """

    nodes: list[str]
    reachable: set[tuple[str, str]] = field(default_factory=set)
    elapsed_s: float = 0.0

    @property
    def sent(self) -> int:
        """Number of ordered pairs probed: n (n - 1)."""
        return len(self.nodes) * (len(self.nodes) - 1)

    @property
    def received(self) -> int:
        """Number of ordered pairs that answered."""
        return len(self.reachable)

    @property
    def lost(self) -> int:
        """Number of ordered pairs that did not answer."""
        return self.sent - self.received

    @property
    def loss_percent(self) -> float:
        """Dropped pairs in percent (0.0 when every pair answered)."""
        return 100.0 * self.lost / self.sent if self.sent else 0.0

    def render(self) -> str:
        """Mininet-style text: one ``src -> dst|X ...`` line per node and a results line.

        The percentage keeps one decimal (Mininet truncates to an integer, which would show a
        single lost pair out of hundreds as ``0%``).
        """
        lines = ["*** Ping: testing ping reachability"]
        for src in self.nodes:
            cells = [
                dst if (src, dst) in self.reachable else "X" for dst in self.nodes if dst != src
            ]
            lines.append(f"{src} -> {' '.join(cells)}")
        lines.append(
            f"*** Results: {self.loss_percent:.1f}% dropped ({self.received}/{self.sent} received)"
        )
        return "\n".join(lines)


def pingall(
    pids: dict[str, int],
    ips: dict[str, str],
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
    attempts: int = 2,
) -> PingallResult:
    """Ping every ordered pair of ``pids``' nodes concurrently and return who answered.

    Args:
        pids: node name -> pid of a process in the node's network namespace (display order).
        ips: node name -> address to ping that node at.
        timeout_s: how long one attempt waits for replies (seconds).
        attempts: attempts per pair; later attempts only re-probe pairs that did not answer.

    Raises:
        EmulatorError: a node's namespace cannot be entered.
    """
    started = time.perf_counter()
    names = list(pids)
    result = PingallResult(nodes=names)
    sockets: dict[str, socket.socket] = {}
    try:
        for name in names:
            sockets[name] = open_icmp_socket(pids[name])
        by_fd = {sock.fileno(): name for name, sock in sockets.items()}
        ip_to_name = {ips[name]: name for name in names}
        ident = secrets.randbelow(0xFFFF) + 1
        pending = {(src, dst) for src in names for dst in names if src != dst}
        seq_of = {pair: i for i, pair in enumerate(sorted(pending))}
        pair_of = {(src, seq): (src, dst) for (src, dst), seq in seq_of.items()}
        for attempt in range(max(1, attempts)):
            if not pending:
                break
            for src, dst in sorted(pending):
                packet = _echo_request(ident, (seq_of[(src, dst)] + attempt * 4099) & 0xFFFF)
                try:
                    sockets[src].sendto(packet, (ips[dst], 0))
                except OSError:
                    pass  # unreachable network / down interface: the pair stays pending
            deadline = time.perf_counter() + timeout_s
            while pending:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                ready, _, _ = select.select(list(by_fd), [], [], remaining)
                for fd in ready:
                    src = by_fd[fd]
                    while True:
                        try:
                            data, addr = sockets[src].recvfrom(4096)
                        except (BlockingIOError, InterruptedError):
                            break
                        except OSError:
                            break
                        header_len = (data[0] & 0x0F) * 4
                        if len(data) < header_len + 8:
                            continue
                        icmp_type, _code, _sum, rid, rseq = struct.unpack(
                            "!BBHHH", data[header_len : header_len + 8]
                        )
                        if icmp_type != ICMP_ECHO_REPLY or rid != ident:
                            continue
                        base_seq = (rseq - attempt * 4099) & 0xFFFF
                        pair = pair_of.get((src, base_seq))
                        if pair is None or ip_to_name.get(addr[0]) != pair[1]:
                            continue
                        if pair in pending:
                            pending.discard(pair)
                            result.reachable.add(pair)
    finally:
        for sock in sockets.values():
            sock.close()
    result.elapsed_s = time.perf_counter() - started
    return result
