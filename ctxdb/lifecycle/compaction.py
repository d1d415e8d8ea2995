"""Compaction: OPTIMIZE (bin-packing) of every ctxdb Delta table and a bound on small files.

Incremental landing, derivation and embedding append many small commits; compaction rewrites them
into files near the target size. Tombstoned files are removed later by the retention sweep's
VACUUM, so readers of recent versions are never broken.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import pyarrow as pa
from deltalake import DeltaTable
from elasticsearch import Elasticsearch

from ctxdb.index.lease import optional_writer_lease_for
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    DERIVE_STATE,
    EMBEDDINGS,
    INDEX_STATE,
    LANDED_FILES,
    PURGED_CONVERSATIONS,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_CATALOG,
    TURN_LOGS,
)

log = logging.getLogger(__name__)

ALL_TABLES = (
    RAW_TURN_EVENTS,
    QUARANTINED_EVENTS,
    LANDED_FILES,
    TURN_LOGS,
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    TURN_CATALOG,
    REPLAY_ARTIFACTS,
    EMBEDDINGS,
    ROW_EMBEDDINGS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    INDEX_STATE,
    DERIVE_STATE,
    PURGED_CONVERSATIONS,
)
MB = 1024 * 1024


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
    after = file_stats(store.table(table), small_bytes)
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


def compact_all(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    tables: tuple[str, ...] = ALL_TABLES,
) -> list[TableCompaction]:
    """OPTIMIZE every existing table with the configured target and small-file bound, holding
    the writer lease while Elasticsearch answers (`LeaseHeld` while another writer runs)."""
    with optional_writer_lease_for(es, settings, "compaction"):
        results = [
            compact_table(
                store,
                table,
                target_bytes=settings.retention.compaction_target_mb * MB,
                small_bytes=settings.retention.compaction_small_file_mb * MB,
                max_small=settings.retention.compaction_max_small_files,
            )
            for table in tables
        ]
    return [r for r in results if r is not None]


def unbounded(results: list[TableCompaction]) -> list[str]:
    """Tables that still hold more small files than the bound after compaction."""
    return [r.table for r in results if not r.bounded]
