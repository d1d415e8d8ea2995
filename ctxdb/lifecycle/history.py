"""Older table versions: rows a Delta DELETE removed stay readable through time travel (the files
the delete replaced) and, for tables with the change data feed, in `_change_data` files (the
deleted rows' pre-images), until those files are deleted. A lite VACUUM removes the replaced data
files once they are older than its window, never the change-data files.

`scrub` deletes every Parquet file of a table that the current version does not read and that
holds a row matching a predicate, so no version of the table can return such a row; `holding`
counts those files (the erasure's verification). Reading an older version afterwards fails with
a missing file; readers of the change feed (`ctxdb.storage.changes`) then fall back to a full
pass.
"""

from __future__ import annotations

import logging

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ctxdb.storage.arrow import frame_of
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"


def unread_files(store: DeltaStore, table: str) -> tuple[pafs.FileSystem, list[str]]:
    """The filesystem of `table` and its Parquet files (data and change data) that the current
    version does not read."""
    dt = store.table(table)
    if dt is None:
        return pafs.LocalFileSystem(), []
    filesystem, base = store.folder(table)
    base = base.rstrip("/")
    current = set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    found = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    paths = [
        info.path
        for info in found
        if info.type == pafs.FileType.File
        and info.path.endswith(".parquet")
        and not info.path[len(base) + 1 :].startswith(LOG_DIR + "/")
        and info.path[len(base) + 1 :] not in current
    ]
    return filesystem, sorted(paths)


def holds(filesystem: pafs.FileSystem, path: str, predicate: pl.Expr) -> bool:
    """True when the Parquet file at `path` has a row matching `predicate` (a file lacking a
    column the predicate reads cannot hold such a row)."""
    with filesystem.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        needed = predicate.meta.root_names()
        if not set(needed) <= set(parquet.schema_arrow.names):
            return False
        frame = frame_of(parquet.read(columns=needed))
    return bool(frame.select(predicate.any()).item()) if frame.height else False


def holding(store: DeltaStore, table: str, predicate: pl.Expr) -> list[str]:
    """Files of `table` the current version does not read that hold a row matching `predicate`."""
    filesystem, paths = unread_files(store, table)
    return [path for path in paths if holds(filesystem, path, predicate)]


def scrub(store: DeltaStore, table: str, predicate: pl.Expr) -> int:
    """Delete the files of `table` no current row lives in that hold a row matching `predicate`;
    returns how many were deleted."""
    filesystem, paths = unread_files(store, table)
    removed = 0
    for path in paths:
        if holds(filesystem, path, predicate):
            filesystem.delete_file(path)
            removed += 1
    if removed:
        log.info("%s: deleted %d old files holding erased rows", table, removed)
    return removed
