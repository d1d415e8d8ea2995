"""What changed in a Delta table between two versions, read without scanning the table, and
watermarks committed into a table's log.

Two sources of changes, the first that applies:

- **Change data feed.** Tables in `CHANGE_FEED` are created with `delta.enableChangeDataFeed`:
  each commit also records the rows it inserted, deleted and updated (pre- and post-images), so
  the changes between two versions are exactly those rows, however wide the rewrite was.
- **File diff.** A Delta commit replaces whole files: a row inserted, updated or deleted lives in
  a file the log added after the older version or removed before the newer one, and every
  untouched file is the same in both. The rows of the added and removed files hold every change;
  rows a rewrite copied unchanged appear on both sides and cancel. Used for tables created before
  the feed was turned on.

Either way `TableChanges.changed()` gives the net rows (new or changed; gone or changed), and
`TableChanges.current(keys)` the rows at the newer version sharing some key columns, reading the
key columns first and other columns only from files holding a match. Compaction changes no row.
When an older version or one of its files is gone (log cleanup, VACUUM), `ChangesUnavailable`
tells the caller to fall back to a full pass.

Watermarks are Delta `txn` actions (application id -> version) committed with an empty append:
they live in the table's own log, so a reader sees the table and its watermark at one version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import CHANGE_FEED_PROPERTY

_INSERTED = ("insert", "update_postimage")
_REMOVED = ("delete", "update_preimage")


class ChangesUnavailable(Exception):
    """The older version (or a file of it) can no longer be read: do a full pass instead."""


@dataclass(frozen=True)
class TableChanges:
    """Rows written (`added`) and rows replaced (`removed`) between two versions of a table, plus
    where the rest of the newer version lies: `rest_rows` (rows read anyway) and `rest_files`
    (files not read yet). `feed` tells whether they came from the change data feed."""

    added: pl.DataFrame
    removed: pl.DataFrame
    rest_rows: pl.DataFrame
    rest_files: pads.Dataset | None
    feed: bool = False

    def changed(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(rows new or changed at the newer version, rows gone or changed from the older one):
        rows written unchanged, or changed and changed back, are left out of both."""
        if self.added.is_empty() or self.removed.is_empty():
            return self.added, self.removed
        added, removed = self.added, self.removed.select(self.added.columns)
        new = added.filter(~_row_hashes(added).is_in(_row_hashes(removed).implode()))
        old = removed.filter(~_row_hashes(removed).is_in(_row_hashes(added).implode()))
        return new, old

    def current(self, keys: pl.DataFrame) -> pl.DataFrame:
        """Rows of the newer version whose `keys` columns match a row of `keys`."""
        columns = self.added.columns
        if keys.is_empty():
            return self.added.clear()
        found = [self.rest_rows.join(keys, on=keys.columns, how="semi")]
        if self.rest_files is not None:
            found.append(_lookup(self.rest_files, keys, columns))
        return pl.concat(found, how="vertical_relaxed")


def _lookup(dataset: pads.Dataset, keys: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """Rows of `dataset` matching `keys`: the key columns of each file first, every column only
    of the files holding a match."""
    schema = dataset.schema  # the table's types (files may hold string views)
    found = []
    for fragment in dataset.get_fragments():
        probe = pl.from_arrow(fragment.to_table(schema=schema, columns=keys.columns))
        if probe.join(keys, on=keys.columns, how="semi").is_empty():
            continue
        rows = pl.from_arrow(fragment.to_table(schema=schema, columns=columns))
        found.append(rows.join(keys, on=keys.columns, how="semi"))
    if not found:
        return pl.from_arrow(schema.empty_table()).select(columns)
    return pl.concat(found, how="vertical_relaxed")


def _row_hashes(frame: pl.DataFrame) -> pl.Series:
    return frame.hash_rows(seed=0)


def _open(store: DeltaStore, table: str, version: int) -> DeltaTable:
    try:
        return DeltaTable(
            store.uri(table), version=version, storage_options=store.storage_options or None
        )
    except Exception as exc:  # the log of `version` was cleaned up, or the table replaced
        raise ChangesUnavailable(f"{table} at version {version}: {exc}") from exc


def _subset(dataset: pads.FileSystemDataset, paths: set[str]) -> pads.FileSystemDataset:
    fragments = [f for f in dataset.get_fragments() if f.path in paths]
    return pads.FileSystemDataset(
        fragments, dataset.schema, dataset.format, filesystem=dataset.filesystem
    )


def _read(dataset: pads.FileSystemDataset, table: str, columns: list[str] | None) -> pl.DataFrame:
    try:
        return pl.from_arrow(dataset.to_table(columns=columns))
    except (FileNotFoundError, OSError) as exc:  # a removed file VACUUM already deleted
        raise ChangesUnavailable(f"{table}: {exc}") from exc


def _has_feed(dt: DeltaTable) -> bool:
    return dt.metadata().configuration.get(CHANGE_FEED_PROPERTY) == "true"


def table_changes(
    store: DeltaStore,
    table: str,
    since: int | None,
    until: int | None = None,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
) -> TableChanges:
    """The changes of `table` after version `since` up to `until` (default: the latest), as
    rows (`columns` of them, default: those of `schema`, else all); `since` None takes every
    row of `until` as added."""
    until = store.version(table) if until is None else until
    names = list(columns) if columns else (schema.names if schema is not None else None)
    if until is None:  # the table does not exist
        empty = pl.from_arrow(schema.empty_table()) if schema is not None else pl.DataFrame()
        empty = empty.select(names) if names else empty
        return TableChanges(empty, empty, empty, None)
    if since is not None and since > until:
        raise ChangesUnavailable(f"{table}: version {since} is newer than {until}")
    new = _open(store, table, until)
    dataset = new.to_pyarrow_dataset()
    if since is None:
        added = _read(dataset, table, names)
        return TableChanges(added, added.clear(), added, None)
    old = _open(store, table, since)
    if _has_feed(old) and _has_feed(new):
        return _feed_changes(new, dataset, table, since, until, names)
    new_paths = {f.path for f in dataset.get_fragments()}
    old_dataset = old.to_pyarrow_dataset()
    old_paths = {f.path for f in old_dataset.get_fragments()}
    added = _read(_subset(dataset, new_paths - old_paths), table, names)
    removed = _read(_subset(old_dataset, old_paths - new_paths), table, names)
    return TableChanges(added, removed, added, _subset(dataset, new_paths & old_paths))


def _feed_changes(
    dt: DeltaTable,
    dataset: pads.FileSystemDataset,
    table: str,
    since: int,
    until: int,
    names: list[str] | None,
) -> TableChanges:
    """Changes from the change data feed: inserts and post-images are added, deletes and
    pre-images removed; every file of `until` stays to look up."""
    names = names or dataset.schema.names
    if since == until:
        empty = pl.from_arrow(dataset.schema.empty_table()).select(names)
        return TableChanges(empty, empty, empty, dataset, feed=True)
    try:
        reader = dt.load_cdf(
            starting_version=since + 1, ending_version=until, columns=[*names, "_change_type"]
        )
        rows = pl.from_arrow(pa.table(reader))
    except Exception as exc:  # a change file VACUUM already deleted
        raise ChangesUnavailable(f"{table} change data feed: {exc}") from exc
    kind = pl.col("_change_type")
    added = rows.filter(kind.is_in(_INSERTED)).select(names)
    removed = rows.filter(kind.is_in(_REMOVED)).select(names)
    return TableChanges(added, removed, added.clear(), dataset, feed=True)


def row_count(store: DeltaStore, table: str) -> int:
    """Rows of `table` from its file statistics (no data read); 0 when it does not exist."""
    dt = store.table(table)
    return 0 if dt is None else dt.count()


def watermark(store: DeltaStore, table: str, app_id: str) -> int | None:
    """The version last committed for `app_id` in `table`'s log (None when never)."""
    dt = store.table(table)
    return None if dt is None else dt.transaction_version(app_id)


def set_watermarks(
    store: DeltaStore, table: str, marks: Mapping[str, int], schema: pa.Schema
) -> None:
    """Commit `marks` (application id -> version) to `table`'s log in one empty commit."""
    write_deltalake(
        store.uri(table),
        schema.empty_table(),
        mode="append",
        storage_options=store.storage_options or None,
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id, version) for app_id, version in marks.items()]
        ),
    )


def keys_frame(frames: Sequence[pl.DataFrame], columns: Sequence[str]) -> pl.DataFrame:
    """The distinct values of `columns` over `frames`."""
    parts = [f.select(columns) for f in frames if not f.is_empty()]
    if not parts:
        return frames[0].select(columns).clear() if frames else pl.DataFrame()
    return pl.concat(parts).unique()
