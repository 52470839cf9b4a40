"""Fixtures of the agent tests: throwaway apps in the registry, real local HTTP servers."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from evaluator.agents import LOOPBACK_NETWORKS
from evaluator.reference.server import RunningServer, serve_in_thread
from evaluator.testing import ToyApp, ToyCodeApp, registered_app

LOOPBACK = list(LOOPBACK_NETWORKS)


@pytest.fixture
def toy_apps() -> Iterator[None]:
    """Register ``toy`` and ``toycode`` (:mod:`evaluator.testing`) for the duration of a test."""
    with registered_app({"toy": ToyApp, "toycode": ToyCodeApp}):
        yield


@pytest.fixture
def serve() -> Iterator[Callable[[Any], RunningServer]]:
    """Start ASGI apps on free loopback ports; all are stopped after the test."""
    started: list[RunningServer] = []

    def start(asgi_app: Any) -> RunningServer:
        server = serve_in_thread(asgi_app)
        started.append(server)
        return server

    yield start
    for server in started:  # ask all to exit first: each takes a ~0.1 s loop tick to notice
        server.server.should_exit = True
    for server in started:
        server.stop()


class RawServer:
    """A TCP server that accepts connections and drops them without an HTTP answer.

    ``mode="close"`` closes politely (FIN), ``mode="reset"`` aborts (RST via SO_LINGER 0).
    ``accepted`` counts connections, i.e. the client's attempts.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accepted = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                conn.settimeout(1.0)
                conn.recv(65536)  # read the request, then drop the connection
            except OSError:
                pass
            if self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def raw_server() -> Iterator[Callable[[str], RawServer]]:
    """Factory of :class:`RawServer`; all are stopped after the test."""
    servers: list[RawServer] = []

    def start(mode: str) -> RawServer:
        server = RawServer(mode)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def free_port() -> int:
    """A loopback port with nothing listening (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
