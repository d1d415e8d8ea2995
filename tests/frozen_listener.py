"""A frozen server stand-in: a real TCP listener on loopback that accepts every connection and
never answers (what a client sees of a SIGSTOPped Elasticsearch node or a hung S3 endpoint), and
counts the connections it accepted. Only tests about that component failing use it."""

from __future__ import annotations

import socket
import threading
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
