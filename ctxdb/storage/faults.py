"""Crash points for the fault-injection tests: SIGKILL this process right after a named commit.

With `CTXDB_FAULT_KILL_AFTER=<point>[#<n>]` in the environment, the n-th (default: first) time
the process passes `<point>` it kills itself with SIGKILL: no `finally`, no lease release, no
flush, as a crash or the OOM killer would stop it. Points: `delta:<table>` after each Delta
commit to that table (every `DeltaStore` write), `es:bulk` after each bulk request Elasticsearch
answered, `es:alias_swap` after a reindex's alias swap, `capture:cancelled` after a recorder's
crash recovery appended its cancel events and `capture:sealed` after it sealed a part file. Unset
(always, outside tests/test_faults.py and tests/test_capture_recorder.py), `reached` returns at
once: the variable is read on the first pass only, as the tests set it before the process starts.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from functools import cache

ENV = "CTXDB_FAULT_KILL_AFTER"
_passed: Counter[str] = Counter()


@cache
def _kill_point() -> tuple[str, int] | None:
    """The point and pass count `ENV` names (read once per process); None when unset."""
    target = os.environ.get(ENV)
    if not target:
        return None
    name, _, nth = target.partition("#")
    return name, int(nth or 1)


def reached(point: str) -> None:
    """Mark that the process just passed `point` (and die there when told to)."""
    kill = _kill_point()
    if kill is None or kill[0] != point:
        return
    _passed[point] += 1
    if _passed[point] == kill[1]:
        os.kill(os.getpid(), signal.SIGKILL)
