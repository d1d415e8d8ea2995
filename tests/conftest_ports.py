"""Loopback ports for tests that need a free or a closed one."""

from __future__ import annotations

import random
from pathlib import Path

from ctxdb.node import embedded


def free_port_pair() -> int:
    """A port p with p and p + 100 both free on loopback, below the kernel's ephemeral range (so
    no outgoing connection takes it as its source port between this check and its use, and a
    connection to it cannot be connected to itself)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.Random().sample(range(20_000, max(low - 100, 20_100)), 50):
        if not embedded.port_busy(port) and not embedded.port_busy(port + 100):
            return port
    raise RuntimeError("no free port pair")
