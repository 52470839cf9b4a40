"""Real listeners for pods' containerPorts, all served by one thread of the node agent.

Each pod gets a TCP listening socket per TCP containerPort and a UDP socket per UDP
containerPort, created inside the pod's network namespace. TCP connections are accepted and
closed at once (a completed handshake is what the prober measures); UDP datagrams are echoed.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading

from apps.k8s.cluster.netns import socket_in_netns

log = logging.getLogger(__name__)


class ListenerSet:
    """Sockets of every pod, keyed by pod UID, multiplexed by one selector thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._by_pod: dict[str, list[socket.socket]] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="listeners", daemon=True)

    def start(self) -> None:
        """Start the serving thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close every socket."""
        self._stop.set()
        self._wake()
        self._thread.join(timeout=5)
        for uid in list(self._by_pod):
            self.remove(uid)

    def add(self, uid: str, netns: str, ports: list[tuple[str, int]]) -> None:
        """Open listeners for pod ``uid`` in ``netns``; ``ports`` is ``[(protocol, port)]``.

        Protocol is ``TCP`` or ``UDP`` (SCTP ports are skipped). Replaces existing listeners.

        Raises:
            OSError: if a socket cannot be created or bound.
        """
        self.remove(uid)
        socks: list[socket.socket] = []
        try:
            for proto, port in sorted(set(ports)):
                if proto == "TCP":
                    s = socket_in_netns(netns, socket.AF_INET, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("0.0.0.0", port))  # noqa: S104 - inside the pod's own namespace
                    s.listen(512)
                elif proto == "UDP":
                    s = socket_in_netns(netns, socket.AF_INET, socket.SOCK_DGRAM)
                    s.bind(("0.0.0.0", port))  # noqa: S104 - inside the pod's own namespace
                else:
                    continue
                s.setblocking(False)
                socks.append(s)
        except OSError:
            for s in socks:
                s.close()
            raise
        with self._lock:
            self._by_pod[uid] = socks
            for s in socks:
                self._selector.register(s, selectors.EVENT_READ, s.type)
        self._wake()

    def remove(self, uid: str) -> None:
        """Close the listeners of pod ``uid`` (no-op if unknown)."""
        with self._lock:
            socks = self._by_pod.pop(uid, [])
            for s in socks:
                try:
                    self._selector.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()

    def has(self, uid: str) -> bool:
        """True if pod ``uid`` has listeners."""
        with self._lock:
            return uid in self._by_pod

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            events = self._selector.select(timeout=1.0)
            with self._lock:
                for key, _ in events:
                    sock = key.fileobj
                    if not isinstance(sock, socket.socket) or sock.fileno() < 0:
                        continue
                    try:
                        if key.data == "wake":
                            sock.recv(4096)
                        elif key.data == socket.SOCK_STREAM:
                            conn, _ = sock.accept()
                            conn.close()
                        else:
                            data, peer = sock.recvfrom(2048)
                            sock.sendto(data, peer)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as exc:
                        log.debug("listener error: %s", exc)
