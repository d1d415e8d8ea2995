"""Table maintenance driven by the table registry (`ctxdb.storage.tables.POLICIES`): OPTIMIZE
(bin-packing) with a bound on small files, VACUUM with each table's window, and the upkeep that
keeps state tables bounded.

Incremental landing, derivation and embedding append many small commits; compaction rewrites them
into files near the target size. Tombstoned files are removed later by the retention sweep's
VACUUM, so readers of recent versions are never broken. State tables (`index_state`, rewritten by
a MERGE on every sync; `derive_state`, one row per run; the failure and bookkeeping tables) are
never read through time travel: every sweep drops their superseded rows, compacts them, vacuums
them with the state history window, checkpoints their log and removes log entries older than that
window (`delta.logRetentionDuration`), so their files stay bounded however many runs wrote them.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable
from elasticsearch import Elasticsearch
from pyarrow import fs as pafs

from ctxdb.coordination.lease import optional_writer_lease_for
from ctxdb.lifecycle.purge import delete_where, vacuum
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import CHANGE_FEED, policy, tables_where

log = logging.getLogger(__name__)

LOG_RETENTION = "delta.logRetentionDuration"
MB = 1024 * 1024
SMALL_FILE_BYTES = 16 * MB
"""A file below this size is small (compaction rewrites small files together)."""
MAX_SMALL_FILES = 8
"""Small files a table may keep after compaction (checked)."""


@dataclass(frozen=True)
class FileStats:
    files: int
    small_files: int
    bytes: int


@dataclass(frozen=True)
class TableCompaction:
    """One table's file counts before and after OPTIMIZE and whether small files are bounded."""

    table: str
    files_before: int
    small_before: int
    files_after: int
    small_after: int
    files_added: int
    files_removed: int
    bytes: int
    bounded: bool

    def as_dict(self) -> dict[str, int | str | bool]:
        return asdict(self)


def file_stats(dt: DeltaTable, small_bytes: int) -> FileStats:
    """How many data files the current version has, and how many are smaller than `small_bytes`."""
    sizes = pa.table(dt.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    return FileStats(
        files=len(sizes), small_files=sum(s < small_bytes for s in sizes), bytes=sum(sizes)
    )


def compact_table(
    store: DeltaStore, table: str, *, target_bytes: int, small_bytes: int, max_small: int
) -> TableCompaction | None:
    """OPTIMIZE one table (None when it does not exist)."""
    dt = store.table(table)
    if dt is None:
        return None
    before = file_stats(dt, small_bytes)
    with store.guarded(table, "compact"):
        metrics = dt.optimize.compact(target_size=target_bytes)
    compacted = store.table(table)
    assert compacted is not None, "a table just compacted is there"
    after = file_stats(compacted, small_bytes)
    result = TableCompaction(
        table=table,
        files_before=before.files,
        small_before=before.small_files,
        files_after=after.files,
        small_after=after.small_files,
        files_added=int(metrics.get("numFilesAdded", 0)),
        files_removed=int(metrics.get("numFilesRemoved", 0)),
        bytes=after.bytes,
        bounded=after.small_files <= max_small,
    )
    log.info("compacted %s: %d -> %d files", table, before.files, after.files)
    return result


def compact_configured(store: DeltaStore, settings: Settings, table: str) -> TableCompaction | None:
    """`compact_table` with the configured target size."""
    return compact_table(
        store,
        table,
        target_bytes=settings.retention.compaction_target_mb * MB,
        small_bytes=SMALL_FILE_BYTES,
        max_small=MAX_SMALL_FILES,
    )


def compact_all(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    tables: tuple[str, ...] | None = None,
) -> list[TableCompaction]:
    """OPTIMIZE every existing table with the configured target and small-file bound, holding
    the writer lease while Elasticsearch answers (`LeaseHeld` while another writer runs).
    `tables`: default every table whose policy compacts it."""
    tables = tables_where(compact=True) if tables is None else tables
    with optional_writer_lease_for(es, settings, "compaction"):
        results = [compact_configured(store, settings, table) for table in tables]
    return [r for r in results if r is not None]


def unbounded(results: list[TableCompaction]) -> list[str]:
    """Tables that still hold more small files than the bound after compaction."""
    return [r.table for r in results if not r.bounded]


def vacuum_windows(settings: Settings, hours: int | None = None) -> dict[str, int]:
    """The VACUUM window of every table: `hours` (default the retention window) for content
    tables, the state history window for state tables."""
    window = settings.retention.vacuum_hours if hours is None else hours
    state = settings.retention.state_history_hours
    return {table: state if policy(table).state else window for table in tables_where()}


def vacuum_all(
    store: DeltaStore, settings: Settings, hours: int | None = None, dry_run: bool = False
) -> dict[str, int]:
    """VACUUM every existing table with its window (change-feed tables in full, so the deleted
    rows' pre-images go too); returns the files removed per table."""
    removed: dict[str, int] = {}
    for table, window in vacuum_windows(settings, hours).items():
        full = table in CHANGE_FEED
        removed.update(vacuum(store, (table,), window, dry_run=dry_run, full=full))
    return removed


def table_files(store: DeltaStore, table: str) -> int:
    """Every file under the table's folder: data, change data and log (0 when it is absent)."""
    filesystem, base = store.folder(table)
    if filesystem.get_file_info(base).type != pafs.FileType.Directory:
        return 0
    found = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    return sum(info.type == pafs.FileType.File for info in found)


def maintain_state(store: DeltaStore, settings: Settings) -> dict[str, int]:
    """Keep every state table bounded: drop superseded rows (`keep_latest`), OPTIMIZE, VACUUM
    with the state history window, checkpoint, and delete log entries older than that window.
    Returns each existing state table's file count afterwards."""
    hours = settings.retention.state_history_hours
    files: dict[str, int] = {}
    for table in tables_where(state=True):
        dt = store.table(table)
        if dt is None:
            continue
        keep = policy(table).keep_latest
        if keep is not None:
            drop_superseded(store, table, *keep)
        compact_configured(store, settings, table)
        set_log_retention(store, table, hours)
        vacuum(store, (table,), hours, dry_run=False)
        dt = store.table(table)
        assert dt is not None, "a table just compacted and vacuumed is there"
        with store.guarded(table, "checkpoint"):
            dt.create_checkpoint()
            dt.cleanup_metadata()
        files[table] = table_files(store, table)
    return files


def set_log_retention(store: DeltaStore, table: str, hours: int) -> None:
    """Set `delta.logRetentionDuration` of `table` to `hours` unless it already is."""
    dt = store.table(table)
    wanted = f"interval {hours} hours"
    if dt is None or dt.metadata().configuration.get(LOG_RETENTION) == wanted:
        return
    with store.guarded(table, "alter"):
        dt.alter.set_table_properties({LOG_RETENTION: wanted})


def drop_superseded(store: DeltaStore, table: str, key: str, order: str) -> int:
    """Delete the rows of `table` below the highest `order` of their `key`."""
    latest = store.scan(table).group_by(key).agg(pl.col(order).max()).collect().drop_nulls().rows()
    deleted = 0
    for value, top in latest:
        literal = str(value).replace("'", "''")
        deleted += delete_where(store, table, f"{key} = '{literal}' AND {order} < {int(top)}")
    return deleted
