"""Derive batches of conversations, in this process or in a pool of worker processes.

Deriving a batch (read its events, build every turn, shape the five frames) is pure Python and
polars work over conversations no other batch touches, so batches derive side by side in worker
processes; the caller still writes their frames one batch at a time, in batch order, so the
tables and their commits are the same as with one process. Workers start with `spawn` (polars'
thread pool does not survive `fork`) and each reads its own batch at the pinned table version.
A pool that cannot start or breaks (a frozen or unguarded `__main__`, a killed worker) is logged
and the remaining batches derive in this process.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import polars as pl
import pyarrow as pa

from ctxdb.record import replay, role_rows, session_rows, timelines, turn_catalog, turn_logs
from ctxdb.record.derive_failures import failure_rows, isolate
from ctxdb.record.expiry import TURN_KEY, held_from_landing, landed_clock
from ctxdb.record.records import build_turns, closed_events
from ctxdb.record.turns import Turn
from ctxdb.settings import Settings
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    REPLAY_ARTIFACTS,
    ROLE_ROWS,
    TURN_CATALOG,
    TURN_LOGS,
)

log = logging.getLogger(__name__)


@dataclass
class Derived:
    """The derived frames of some conversations, keyed by table name."""

    tables: dict[str, pl.DataFrame]
    turns: int
    open_turns: int


def derive_tables(raw: pl.DataFrame, settings: Settings, now: datetime) -> Derived:
    """Every derived table for the conversations in `raw` (pure: frames in, frames out)."""
    events = closed_events(raw)
    turns = build_turns(events)
    titles = timelines.conversation_titles(raw, turns)
    landed = landed_clock(raw)

    def held(frame: pl.DataFrame, keys: Sequence[str] = TURN_KEY) -> pl.DataFrame:
        return held_from_landing(frame, landed, settings, keys=keys)

    tables = {
        TURN_LOGS: held(turn_logs.turn_logs_frame(turns, titles, settings, now)),
        CONVERSATION_TIMELINES: held(
            timelines.timelines_frame(raw, turns, titles, settings, now), ["conversation_id"]
        ),
        ROLE_ROWS: _role_rows(turns, titles, settings, now, landed),
        TURN_CATALOG: held(turn_catalog.turn_catalog_frame(turns, titles, settings, now)),
        REPLAY_ARTIFACTS: held(replay.replay_frame(events, turns, settings, now)),
    }
    all_turns = raw.select("conversation_id", "turn_id").n_unique() if raw.height else 0
    return Derived(tables=tables, turns=len(turns), open_turns=all_turns - len(turns))


def _role_rows(
    turns: Sequence[Turn],
    titles: dict[str, str],
    settings: Settings,
    now: datetime,
    landed: pl.DataFrame,
) -> pl.DataFrame:
    """The turns' role rows (kept from their landing: `held_from_landing`), and their
    conversations' session rows when configured."""
    rows = held_from_landing(
        role_rows.role_rows_frame(turns, settings, now), landed, settings, role_column="role"
    )
    return session_rows.with_session_rows(rows, titles) if settings.derive_session_rows else rows


def combine(parts: Sequence[Derived]) -> Derived:
    """The derived tables of several disjoint sets of conversations, as one."""
    if len(parts) == 1:
        return parts[0]
    return Derived(
        tables={name: pl.concat([p.tables[name] for p in parts]) for name in parts[0].tables},
        turns=sum(p.turns for p in parts),
        open_turns=sum(p.open_turns for p in parts),
    )


@dataclass(frozen=True)
class Batch:
    """One batch to derive: where its events are (table URI, pinned version) and which
    conversations it holds; everything a worker process needs, and picklable."""

    uri: str
    version: int
    storage_options: dict[str, str]
    conversations: list[str]

    def events(self) -> pl.DataFrame:
        """Every landed event of the batch's conversations at the pinned version. The
        conversations go into the scan as a literal list, which polars checks value by value
        against each file's conversation-id statistics: files holding none of them are skipped."""
        scan = pl.scan_delta(
            self.uri, version=self.version, storage_options=self.storage_options or None
        )
        return scan.filter(pl.col("conversation_id").is_in(self.conversations)).collect()


@dataclass
class Result:
    """A derived batch: its tables (Arrow, which crosses processes at a third of a polars frame's
    pickling cost), the conversations that derived and the `derive_failures` rows of those that
    raised."""

    tables: dict[str, pa.Table]
    turns: int
    open_turns: int
    done: list[str]
    failures: pl.DataFrame
    events: int


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector inside the block (restored after).

    Derivation allocates millions of small dicts and lists that form no reference cycles, and
    the collector's passes over them cost a quarter of its CPU time (measured: 4.0-4.5 s against
    3.1 s for a batch of 5,000 conversations); reference counting still frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def derive_batch(batch: Batch, settings: Settings, now: datetime) -> Result:
    """Derive one batch, a conversation that raises set aside (`ctxdb.record.derive_failures`)."""
    raw = batch.events()
    with paused_gc():
        parts, failures = isolate(raw, lambda events: derive_tables(events, settings, now))
    failed = {f.conversation_id for f in failures}
    derived = combine(parts or [derive_tables(raw.clear(), settings, now)])
    return Result(
        tables={name: data.to_arrow() for name, data in derived.tables.items()},
        turns=derived.turns,
        open_turns=derived.open_turns,
        done=[c for c in batch.conversations if c not in failed],
        failures=failure_rows(raw, failures, now),
        events=raw.height,
    )


def worker_count(setting: int, batches: int) -> int:
    """Processes to derive `batches` batches with: the setting (0: one per usable CPU core),
    never more than the batches; 1 (this process) for a single batch."""
    if multiprocessing.current_process().daemon:  # a daemon process may not start children
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(setting or cores or 1, batches))


def derived_batches(
    batches: Sequence[Batch], settings: Settings, now: datetime, processes: int
) -> Iterator[Result]:
    """Every batch derived, yielded in batch order; with `processes` > 1 at most that many derive
    at once ahead of the caller (which writes each as it comes), bounding the memory held."""
    if processes <= 1:
        for batch in batches:
            yield derive_batch(batch, settings, now)
        return
    done = 0
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(processes, mp_context=context)
    pending: deque[Future[Result]] = deque()
    try:
        for batch in batches:
            pending.append(pool.submit(derive_batch, batch, settings, now))
            if len(pending) > processes:
                yield pending.popleft().result()
                done += 1
        while pending:
            yield pending.popleft().result()
            done += 1
    except BrokenProcessPool as exc:
        log.warning(
            "derivation worker processes failed (%s); deriving the remaining %d batches here",
            exc,
            len(batches) - done,
        )
        for batch in batches[done:]:
            yield derive_batch(batch, settings, now)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
