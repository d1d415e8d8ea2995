"""Frozen server stand-ins: a real TCP listener on loopback that accepts every connection and
never answers (what a client sees of a SIGSTOPped Elasticsearch node or a hung S3 endpoint), and
counts the connections it accepted; and a proxy to a real node that freezes at the first bulk
request. Only tests about that component failing use them."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class FrozenListener:
    """The listener's URL and the connections it accepted (held open, never answered)."""

    url: str
    accepted: list[socket.socket] = field(default_factory=list)

    @property
    def connections(self) -> int:
        return len(self.accepted)


@contextmanager
def frozen_listener() -> Iterator[FrozenListener]:
    """A listener on a free loopback port, accepting (and counting) until the block ends."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    frozen = FrozenListener(f"http://127.0.0.1:{server.getsockname()[1]}")
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            frozen.accepted.append(conn)

    thread = threading.Thread(target=accept, name="frozen-listener", daemon=True)
    thread.start()
    try:
        yield frozen
    finally:
        stop.set()
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join()
        for conn in frozen.accepted:
            conn.close()


class FreezingProxy:
    """A fake standing in for a node that freezes mid-bulk: a TCP proxy to the real session node
    that forwards every request until the first `/_bulk` one, then answers nothing more (that
    request, every request on an open connection, every new connection: accepted, never read),
    as a SIGSTOPped JVM whose kernel still accepts connections. `frozen_at` is when it froze."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen_at: float | None = None
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.held.append(client)
            if self.frozen_at is None:
                upstream = socket.create_connection(self.upstream)
                self.held.append(upstream)
                for args in ((client, upstream, True), (upstream, client, False)):
                    threading.Thread(target=self._pipe, args=args, daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, request: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if request and self.frozen_at is None and b"/_bulk" in data:
                    self.frozen_at = time.monotonic()
                if self.frozen_at is not None:
                    continue
                sink.sendall(data)

    def close(self) -> None:
        self.server.close()
        for held in self.held:
            held.close()
