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

Failures. A read that fails (a throttled or unauthorized object-store call, a dropped
connection) is tried `READ_ATTEMPTS` times with a doubling backoff, then raised as
`ChangesUnreadable` with its cause: the run fails and the next one reads the same changes. Only
where the older version is really gone, its log entries cleaned up (log retention) or a file of it
vacuumed, does `ChangesUnavailable` tell the caller to fall back to a full pass (`gone_reason`
recognises those errors and nothing else).

Watermarks are Delta `txn` actions (application id -> version) committed with an empty append:
they live in the table's own log, so a reader sees the table and its watermark at one version.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from ctxdb.storage.arrow import frame_of
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import CHANGE_FEED_PROPERTY

log = logging.getLogger(__name__)
T = TypeVar("T")

_INSERTED = ("insert", "update_postimage")
_REMOVED = ("delete", "update_preimage")

READ_ATTEMPTS = 4
"""Tries of one read of the changes before its error is raised."""
READ_BACKOFF_S = 0.5
"""Wait before the second try, doubled before each further one (0.5, 1, 2 s)."""
_READ_ERRORS = (OSError, DeltaError, pa.ArrowException)
"""What a failed read raises (delta-rs, pyarrow and the object store); anything else is a bug
and passes unchanged."""
_FILE_GONE = re.compile(r"Object at location \S+ not found")
"""The object store's NotFound, as delta-rs reports it inside a change data feed read."""
_LOG_GONE = re.compile(r"No files in log segment|Invalid table version: \d+")
"""delta-rs opening a version, or starting a change data feed at one, older than the oldest
commit the log still holds."""


class ChangesUnavailable(Exception):
    """The older version is gone (its log entries cleaned up, or a file of it vacuumed): do a
    full pass instead."""


class ChangesUnreadable(OSError):
    """Reading the changes failed on every try: raised with its cause, never a full pass."""


def gone_reason(exc: BaseException) -> str | None:
    """Why the version being read is gone, when `exc` says it is; None for any other failure."""
    text = str(exc)
    if isinstance(exc, FileNotFoundError) or _FILE_GONE.search(text):
        return "a file was vacuumed"
    if isinstance(exc, TableNotFoundError) or _LOG_GONE.search(text):
        return "its log entries were cleaned up (log retention)"
    return None


def read_retried(table: str, what: str, read: Callable[[], T]) -> T:
    """`read()` (which reads `what` of `table`), tried again after a failure up to
    `READ_ATTEMPTS` times; `ChangesUnavailable` at once when the failure says `what` is gone,
    `ChangesUnreadable` when every try failed."""
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return read()
        except _READ_ERRORS as exc:
            cause = f"{type(exc).__name__}: {_first_line(exc)}"
            why = gone_reason(exc)
            if why is not None:
                raise ChangesUnavailable(
                    f"{table}: {what} cannot be read any more: {why} ({cause})"
                ) from exc
            if attempt == READ_ATTEMPTS:
                raise ChangesUnreadable(
                    f"cannot read {what} of table {table} ({READ_ATTEMPTS} attempts): {cause}"
                ) from exc
            log.warning(
                "reading %s of %s failed (%s); try %d of %d",
                what,
                table,
                cause,
                attempt + 1,
                READ_ATTEMPTS,
            )
            time.sleep(READ_BACKOFF_S * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


@dataclass(frozen=True)
class TableChanges:
    """Rows written (`added`) and rows replaced (`removed`) between two versions of a table, plus
    where the rest of the newer version lies: `rest_rows` (rows read anyway) and `rest_files`
    (files not read yet). `feed` tells whether they came from the change data feed; `table`
    names the table in errors."""

    added: pl.DataFrame
    removed: pl.DataFrame
    rest_rows: pl.DataFrame
    rest_files: pads.Dataset | None
    feed: bool = False
    table: str = ""

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
        """Rows of the newer version whose `keys` columns match a row of `keys` (its files read
        as `read_retried` reads)."""
        columns = self.added.columns
        if keys.is_empty():
            return self.added.clear()
        found = [self.rest_rows.join(keys, on=keys.columns, how="semi")]
        if (rest := self.rest_files) is not None:
            found.append(read_retried(self.table, "rows", lambda: _lookup(rest, keys, columns)))
        return pl.concat(found, how="vertical_relaxed")


def _lookup(dataset: pads.Dataset, keys: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """Rows of `dataset` matching `keys`: the key columns of each file first, every column only
    of the files holding a match."""
    schema = dataset.schema  # the table's types (files may hold string views)
    found = []
    for fragment in dataset.get_fragments():
        probe = frame_of(fragment.to_table(schema=schema, columns=keys.columns))
        if probe.join(keys, on=keys.columns, how="semi").is_empty():
            continue
        rows = frame_of(fragment.to_table(schema=schema, columns=columns))
        found.append(rows.join(keys, on=keys.columns, how="semi"))
    if not found:
        return frame_of(schema.empty_table()).select(columns)
    return pl.concat(found, how="vertical_relaxed")


def _row_hashes(frame: pl.DataFrame) -> pl.Series:
    return frame.hash_rows(seed=0)


def _open(store: DeltaStore, table: str, version: int) -> DeltaTable:
    return DeltaTable(
        store.uri(table), version=version, storage_options=store.storage_options or None
    )


def _subset(dataset: pads.FileSystemDataset, paths: set[str]) -> pads.FileSystemDataset:
    fragments = [f for f in dataset.get_fragments() if f.path in paths]
    return pads.FileSystemDataset(
        fragments, dataset.schema, dataset.format, filesystem=dataset.filesystem
    )


def _read(dataset: pads.FileSystemDataset, columns: list[str] | None) -> pl.DataFrame:
    return frame_of(dataset.to_table(columns=columns))


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
    row of `until` as added. Read as `read_retried` reads: `ChangesUnavailable` when `since`
    is gone (or newer than `until`: the table was replaced), `ChangesUnreadable` when the reads
    kept failing."""
    until = store.version(table) if until is None else until
    names = list(columns) if columns else (schema.names if schema is not None else None)
    if until is None:  # the table does not exist
        empty = frame_of(schema.empty_table()) if schema is not None else pl.DataFrame()
        empty = empty.select(names) if names else empty
        return TableChanges(empty, empty, empty, None, table=table)
    if since is not None and since > until:
        raise ChangesUnavailable(f"{table}: version {since} is newer than {until}")
    what = f"version {until}" if since is None else f"the changes after version {since}"
    return read_retried(table, what, lambda: _changes(store, table, since, until, names))


def comparable_columns(
    store: DeltaStore, table: str, since: int | None, until: int | None, names: Sequence[str]
) -> list[str]:
    """The `names` version `until` of `table` holds (a column the contract added later is absent
    from a table written before it); `ChangesUnavailable` when `since` lacks one of them, since
    rows written before the column existed cannot be compared with rows that have it (the
    caller passes over the whole table once). Read as `read_retried` reads."""

    def held(version: int | None) -> set[str]:
        if version is None:
            return set(names)
        return {f.name for f in _open(store, table, version).schema().fields}

    def compare() -> list[str]:
        now = held(until)
        kept = [n for n in names if n in now]
        before = held(since)
        if since is not None and (added := [n for n in kept if n not in before]):
            raise ChangesUnavailable(
                f"{table}: column(s) {', '.join(added)} added after version {since}"
            )
        return kept

    return read_retried(table, "the columns", compare)


def _changes(
    store: DeltaStore, table: str, since: int | None, until: int, names: list[str] | None
) -> TableChanges:
    new = _open(store, table, until)
    dataset = new.to_pyarrow_dataset()
    if since is None:
        added = _read(dataset, names)
        return TableChanges(added, added.clear(), added, None, table=table)
    old = _open(store, table, since)
    if _has_feed(old) and _has_feed(new):
        return _feed_changes(new, dataset, table, since, until, names)
    new_paths = {f.path for f in dataset.get_fragments()}
    old_dataset = old.to_pyarrow_dataset()
    old_paths = {f.path for f in old_dataset.get_fragments()}
    added = _read(_subset(dataset, new_paths - old_paths), names)
    removed = _read(_subset(old_dataset, old_paths - new_paths), names)
    rest = _subset(dataset, new_paths & old_paths)
    return TableChanges(added, removed, added, rest, table=table)


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
        empty = frame_of(dataset.schema.empty_table()).select(names)
        return TableChanges(empty, empty, empty, dataset, feed=True, table=table)
    reader = dt.load_cdf(
        starting_version=since + 1, ending_version=until, columns=[*names, "_change_type"]
    )
    rows = frame_of(pa.table(reader))
    kind = pl.col("_change_type")
    added = rows.filter(kind.is_in(_INSERTED)).select(names)
    removed = rows.filter(kind.is_in(_REMOVED)).select(names)
    return TableChanges(added, removed, added.clear(), dataset, feed=True, table=table)


def row_count(store: DeltaStore, table: str) -> int:
    """Rows of `table` from its files' statistics (the add actions' numRecords, no data read);
    0 when it does not exist. The one row count every stage reports: only when a file was
    written without the statistic (never by delta-rs) is the table scanned instead."""
    dt = store.table(table)
    if dt is None:
        return 0
    records = pl.DataFrame(dt.get_add_actions(flatten=True)).get_column("num_records")
    if records.null_count():
        return int(store.scan(table).select(pl.len()).collect().item())
    return int(records.sum())


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
