"""CPU and wall seconds per stage of a landing and a derivation, for `bench_landing.py
--stages`: named functions of ctxdb are wrapped with timers (inclusive: a stage's time holds
the stages it calls), so a full build and a +1 % increment are compared stage by stage in one
run. The CPU is the process's (all its threads: polars' and delta-rs' pools, and landing's
commit thread, which overlaps the next wave's parse); derivation's worker processes are counted
once, in `record.derive_batch` of a one-process run or in the run's total."""

from __future__ import annotations

import functools
import importlib
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

STAGES = {
    "ctxdb.landing.run": ["list_files", "files_to_land", "prepare", "_commit"],
    "ctxdb.landing.waves": [
        "drop_known",
        "split_reused_ids",
        "_owners",
        "insert_quarantine",
        "_insert_events",
        "landed_files_frame",
    ],
    "ctxdb.landing.scan": ["parse_bytes"],
    "ctxdb.record.run": [
        "last_derived_version",
        "_touched",
        "purged_among",
        "_batches",
        "write_table",
        "record_failures",
        "clear_failures",
        "_advance_state",
        "late_landed",
    ],
    "ctxdb.record.batches": ["derive_batch"],
}
"""Per module, the functions timed (looked up where they are called from)."""

STORE_METHODS = ["_replace_once", "delete_keys", "insert_new", "table"]
"""`DeltaStore` methods timed: a derived table's upsert, a keyed delete, a keyed insert, and
opening a table (its log replay)."""

TIMES: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])


def _timer(label: str, real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def timed(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            entry = TIMES[label]
            entry[0] += time.process_time() - cpu
            entry[1] += time.perf_counter() - wall
            entry[2] += 1

    return timed


def install() -> None:
    """Wrap every stage in `STAGES` and `STORE_METHODS` with a timer (a name the code does not
    have, e.g. an older checkout's, is left out)."""
    from ctxdb.storage.delta import DeltaStore

    owners = [(importlib.import_module(name), functions) for name, functions in STAGES.items()]
    for owner, names in [*owners, (DeltaStore, STORE_METHODS)]:
        prefix = "delta" if owner is DeltaStore else owner.__name__.split(".")[-2]
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, _timer(f"{prefix}.{name}", getattr(owner, name)))


def taken() -> dict[str, dict[str, float]]:
    """The stages' seconds and calls since the last call (then reset)."""
    result = {
        label: {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "calls": int(calls)}
        for label, (cpu, wall, calls) in sorted(TIMES.items(), key=lambda item: -item[1][0])
    }
    TIMES.clear()
    return result


def compared(full: dict[str, dict[str, float]], increment: dict[str, dict[str, float]]) -> dict:
    """Per stage: CPU seconds of the full build and of the increment, and their ratio."""
    return {
        label: {
            "full_cpu_s": full.get(label, {}).get("cpu_s", 0.0),
            "increment_cpu_s": increment.get(label, {}).get("cpu_s", 0.0),
            "ratio": round(increment[label]["cpu_s"] / full[label]["cpu_s"], 4)
            if label in increment and full.get(label, {}).get("cpu_s")
            else None,
        }
        for label in dict.fromkeys([*full, *increment])
    }
