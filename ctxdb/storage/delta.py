"""Thin, typed access to ctxdb's Delta tables (local paths and object-store URIs alike)."""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.table import TableMerger

from ctxdb.settings import Settings
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.errors import StorageError, object_store_cause, os_errno
from ctxdb.storage.faults import reached
from ctxdb.storage.object_store import absolute, filesystem
from ctxdb.storage.tables import table_properties

log = logging.getLogger(__name__)
T = TypeVar("T")

COMMIT_ATTEMPTS = 10
"""How often a MERGE or DELETE runs before a commit conflict is raised. Writers of disjoint rows
(the shards of the embedding and index stages) conflict under delta-rs' serializable check when
one commits first; the loser reruns its whole statement on the new snapshot."""


def rerun_on_conflict(table: str, statement: Callable[[], T]) -> T:
    """Run `statement` (which must open the table afresh), rerunning it after a random backoff
    while a concurrent writer's commit makes it fail (`CommitFailedError`)."""
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return statement()
        except CommitFailedError as exc:
            if attempt == COMMIT_ATTEMPTS:
                raise
            log.info("%s: a concurrent commit won (%s); rerun %d", table, exc, attempt)
            time.sleep(random.uniform(0.0, min(2.0, 0.05 * 2**attempt)))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class DeltaStore:
    """A root URI under which every ctxdb table lives as `<root>/<table>`."""

    root: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> DeltaStore:
        """The store at the configured Delta root, with its object-store options."""
        return cls(settings.delta_uri, settings.object_store_options)

    def uri(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"

    def folder(self, table: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem and absolute base path of `table`'s folder, reached with the store's
        storage options."""
        return filesystem(absolute(self.uri(table)), self.storage_options)

    @contextmanager
    def guarded(self, table: str, action: str = "write") -> Iterator[None]:
        """Raise an operating-system failure inside the block (disk full, read-only directory) or
        an object store's (a response broken off) as a one-line `StorageError` naming the table;
        other errors pass unchanged. A block that
        commits (any action but "open") is the commit point `delta:<table>` (see `faults`)."""
        try:
            yield
        except StorageError:
            raise
        except Exception as exc:
            code = os_errno(exc)
            cause = None if code is not None else object_store_cause(exc)
            if code is None and cause is None:
                raise
            log.debug("%s of %s failed: %s", action, table, exc)
            raise StorageError(table, self.uri(table), action, code or errno.EIO, cause) from None
        if action != "open":
            reached(f"delta:{table}")

    def table(self, table: str) -> DeltaTable | None:
        """The Delta table, or None when it has never been written."""
        with self.guarded(table, "open"):
            try:
                return DeltaTable(self.uri(table), storage_options=self.storage_options or None)
            except TableNotFoundError:
                return None

    def exists(self, table: str) -> bool:
        return self.table(table) is not None

    def version(self, table: str) -> int | None:
        dt = self.table(table)
        return None if dt is None else dt.version()

    def read(
        self,
        table: str,
        schema: pa.Schema | None = None,
        columns: Sequence[str] | None = None,
        version: int | None = None,
    ) -> pl.DataFrame:
        """Read a whole table (or an empty frame with `schema` when it does not exist yet)."""
        dt = self.table(table)
        if dt is None:
            empty = frame_of(schema.empty_table()) if schema is not None else pl.DataFrame()
            return empty.select(columns) if columns else empty
        if version is not None:
            dt.load_as_version(version)
        return frame_of(dt.to_pyarrow_table(columns=list(columns) if columns else None))

    def scan(self, table: str, version: int | None = None) -> pl.LazyFrame:
        """A lazy scan of the table, at `version` when given (else the latest)."""
        return pl.scan_delta(
            self.uri(table), version=version, storage_options=self.storage_options or None
        )

    def append(self, table: str, data: pl.DataFrame, schema: pa.Schema | None = None) -> int:
        """Append rows in one atomic commit; returns the number of rows written."""
        if data.is_empty():
            return 0
        with self.guarded(table):
            write_deltalake(
                self.uri(table),
                _to_arrow(data, schema),
                mode="append",
                storage_options=self.storage_options or None,
                configuration=table_properties(table),
            )
        return data.height

    def overwrite(self, table: str, data: pl.DataFrame, schema: pa.Schema | None = None) -> None:
        with self.guarded(table):
            write_deltalake(
                self.uri(table),
                _to_arrow(data, schema),
                mode="overwrite",
                schema_mode="overwrite",
                storage_options=self.storage_options or None,
                configuration=table_properties(table),
            )

    def merge(
        self,
        table: str,
        source: pa.Table,
        keys: Sequence[str],
        *,
        update: bool = True,
        update_when: str | None = None,
        within: str | None = None,
        evolve: bool = False,
    ) -> dict[str, int]:
        """One MERGE commit on `keys`: source rows not in the table are inserted; matched rows are
        replaced when `update` (and `update_when` holds). `within`, a SQL predicate on the
        table's rows (alias `t`), joins the match condition: delta-rs then reads only the files
        whose statistics may hold such rows, where a MERGE on keys alone reads the whole table
        into memory (as does any MERGE deleting unmatched rows, whatever its predicates:
        delta-io/delta-rs#3476, so ctxdb has none). The first write creates the table empty, then
        merges (`create`); with `evolve`, columns of `source` the table lacks are added to it (for
        a writer that casts to its contract schema: a column added to the contract reaches tables
        written before it; without, a column the table lacks is not written). Returns the
        inserted, updated and deleted row counts. A commit
        conflict with a concurrent writer reruns the MERGE on the new snapshot
        (`rerun_on_conflict`)."""
        return rerun_on_conflict(
            table,
            lambda: self._merge_once(table, source, keys, update, update_when, within, evolve),
        )

    def _merge_once(
        self,
        table: str,
        source: pa.Table,
        keys: Sequence[str],
        update: bool,
        update_when: str | None,
        within: str | None,
        evolve: bool,
    ) -> dict[str, int]:
        dt = self.table(table)
        dt = self.create(table, source.schema) if dt is None else dt
        merger = _merger(dt, source, keys, within=within, evolve=evolve)
        if update:
            merger = merger.when_matched_update_all(predicate=update_when)
        merger = merger.when_not_matched_insert_all()
        with self.guarded(table):
            return _counts(merger.execute())

    def replace_groups(
        self,
        table: str,
        source: pa.Table,
        keys: Sequence[str],
        group: str,
        groups: Sequence[str],
        *,
        update_when: str | None = None,
        evolve: bool = False,
    ) -> dict[str, int]:
        """Make `source` the rows of `groups` (values of the string column `group`, covering
        every row of `source`): its rows are upserted on `keys` (matched rows replaced when
        `update_when` holds), then the groups' rows it lacks are deleted by key; returns the
        inserted, updated and deleted counts.

        The groups' stored keys are read first (one narrow column read, at the snapshot the
        write commits on): when none are stored, `source` is appended with no MERGE; otherwise
        the MERGE matches only within the stored groups (`sql_among`), so delta-rs reads the
        files holding them and not every file whose range spans new groups (a MERGE reads whole
        files, every column). Either write commits exactly as the next version or reruns, read
        again (`rerun_on_conflict`), so a row that a concurrent writer stored meanwhile is
        matched, never stored twice. `evolve` adds the source's columns the table lacks."""
        written, stored = rerun_on_conflict(
            table,
            lambda: self._replace_once(table, source, keys, group, groups, update_when, evolve),
        )
        stale = stored.join(
            frame_of(source.select(keys)), on=list(keys), how="anti", nulls_equal=True
        )
        within = sql_among(f"t.{group}", stale[group].unique().to_list()) if stale.height else None
        written["deleted"] = self.delete_keys(table, stale.select(keys), within=within)
        return written

    def _replace_once(
        self,
        table: str,
        source: pa.Table,
        keys: Sequence[str],
        group: str,
        groups: Sequence[str],
        update_when: str | None,
        evolve: bool,
    ) -> tuple[dict[str, int], pl.DataFrame]:
        """One attempt of `replace_groups`' upsert, committed as exactly the version after the
        snapshot it read; returns its counts and the groups' stored keys it read."""
        dt = self.table(table)
        dt = self.create(table, source.schema) if dt is None else dt
        stored = (  # the snapshot just opened: no second log replay
            pl.scan_delta(dt)
            .filter(among(pl.col(group), pl.Series(groups, dtype=pl.String)))
            .select(list(dict.fromkeys([*keys, group])))
            .collect()
        )
        if not source.num_rows:
            return _counts({}), stored
        once = CommitProperties(max_commit_retries=0)
        with self.guarded(table):
            if stored.is_empty():
                mode: Literal["merge"] | None = "merge" if evolve else None
                write_deltalake(dt, source, mode="append", schema_mode=mode, commit_properties=once)
                return {**_counts({}), "inserted": source.num_rows}, stored
            within = sql_among(f"t.{group}", stored[group].unique().to_list())
            merger = _merger(dt, source, keys, once, within=within, evolve=evolve)
            merger = merger.when_matched_update_all(predicate=update_when)
            return _counts(merger.when_not_matched_insert_all().execute()), stored

    def delete_keys(
        self,
        table: str,
        keys: pl.DataFrame,
        *,
        within: str | None = None,
        commit_properties: CommitProperties | None = None,
    ) -> int:
        """Delete the rows whose key columns match a row of `keys` in one MERGE commit; returns
        how many. The MERGE reads only the files whose statistics overlap the keys' span (a
        single string key: between its least and greatest value) and `within` (a SQL predicate
        on the table's rows, alias `t`, true of every row to delete, e.g. a time bound): a MERGE
        on keys alone reads the whole table into memory (10M raw events: +5.1 GB, against
        +0.4 GB with the retention sweep's time bound). Reruns on a commit conflict."""
        if keys.is_empty():
            return 0
        bounds = [within] if within else []
        values = keys.to_series().drop_nulls().to_list() if keys.width == 1 else []
        if values and keys.dtypes[0] == pl.String:
            bounds.append(sql_span(f"t.{keys.columns[0]}", values))
        source = keys.unique().to_arrow()

        def delete_once() -> int:
            dt = self.table(table)
            if dt is None:
                return 0
            on = " AND ".join(f"({bound})" for bound in bounds) or None
            merger = _merger(dt, source, keys.columns, commit_properties, within=on)
            with self.guarded(table, "delete from"):
                return _counts(merger.when_matched_delete().execute())["deleted"]

        return rerun_on_conflict(table, delete_once)

    def create(self, table: str, schema: pa.Schema) -> DeltaTable:
        """The table, created empty with `schema` when it does not exist yet. Writers create a
        table this way before their first MERGE: two first writes that each created the table
        with their rows would both succeed (delta-rs commits the second as an append), while two
        MERGEs into one table conflict and one reruns."""
        with self.guarded(table):
            return DeltaTable.create(
                self.uri(table),
                schema=pa.schema([_plain(f) for f in schema]),
                mode="ignore",
                storage_options=self.storage_options or None,
                configuration=table_properties(table),
            )

    def append_after(
        self, table: str, schema: pa.Schema, rows: Callable[[int], pl.DataFrame], after: int
    ) -> int | None:
        """Append `rows(after + 1)` as exactly version `after + 1` of the table and return that
        version; None, with nothing written, when the table has moved past `after` (another
        writer committed since). A writer that checked its rows against version `after` appends
        them this way without a MERGE: the check still holds at the commit, or nothing lands."""
        options = self.storage_options or None
        dt = DeltaTable(self.uri(table), version=after, storage_options=options)
        try:
            with self.guarded(table):
                write_deltalake(
                    dt,
                    _to_arrow(rows(after + 1), schema),
                    mode="append",
                    commit_properties=CommitProperties(max_commit_retries=0),
                )
        except CommitFailedError:
            return None
        return after + 1

    def insert_at_next_version(
        self,
        table: str,
        schema: pa.Schema,
        keys: Sequence[str],
        rows: Callable[[int], pl.DataFrame],
        before_commit: Callable[[], None] = lambda: None,
    ) -> tuple[int, int]:
        """MERGE-insert `rows(version)`, the rows for the table version this commit creates,
        whose `keys` are not in the table yet; returns the rows inserted and that version.

        The commit lands exactly as the version after the snapshot it read, or fails: a commit by
        anyone else in between reruns the whole statement on the new snapshot (no silent retry
        at a later version, so the rows always name the version they landed in). A key that a
        concurrent writer inserted first is skipped. `before_commit` runs before each attempt
        (the writer lease's fencing check)."""

        def attempt() -> tuple[int, int]:
            before_commit()
            dt = self.table(table)
            dt = self.create(table, schema) if dt is None else dt
            version = dt.version() + 1
            source = _to_arrow(rows(version), schema)
            merger = _merger(dt, source, keys, CommitProperties(max_commit_retries=0))
            with self.guarded(table):
                metrics = merger.when_not_matched_insert_all().execute()
            return _counts(metrics)["inserted"], version

        return rerun_on_conflict(table, attempt)

    def upsert(
        self,
        table: str,
        data: pl.DataFrame,
        keys: Sequence[str],
        schema: pa.Schema | None = None,
        evolve: bool = False,
    ) -> dict[str, int]:
        """MERGE rows on `keys`: matched rows are replaced, new rows inserted, in one commit
        (`evolve`: columns of `schema` the table lacks are added, as in `merge`)."""
        if data.is_empty():
            return {"inserted": 0, "updated": 0}
        counts = self.merge(table, _to_arrow(data, schema), keys, evolve=evolve)
        return {"inserted": counts["inserted"], "updated": counts["updated"]}

    def insert_new(
        self, table: str, data: pl.DataFrame, keys: Sequence[str], schema: pa.Schema | None = None
    ) -> int:
        """MERGE-insert rows whose `keys` are not present yet; existing rows are left untouched.
        A first key of strings narrows the MERGE to the files whose statistics may hold the
        rows' values of it (`sql_among`: a wave's source files, say), where the keys alone may
        make delta-rs read every file."""
        if data.is_empty():
            return 0
        first = data[keys[0]]
        values = first.drop_nulls().unique().to_list() if first.dtype == pl.String else []
        within = sql_among(f"t.{keys[0]}", values) if values else None
        return self.merge(table, _to_arrow(data, schema), keys, update=False, within=within)[
            "inserted"
        ]

    def delete(self, table: str, predicate: str) -> int:
        """DELETE rows matching a SQL predicate; returns the number of rows deleted (rerun on a
        commit conflict with a concurrent writer)."""
        return rerun_on_conflict(table, lambda: self._delete_once(table, predicate))

    def _delete_once(self, table: str, predicate: str) -> int:
        dt = self.table(table)
        if dt is None:
            return 0
        with self.guarded(table, "delete from"):
            return int(dt.delete(predicate).get("num_deleted_rows", 0))


def _merger(
    dt: DeltaTable,
    source: pa.Table,
    keys: Sequence[str],
    commit_properties: CommitProperties | None = None,
    within: str | None = None,
    evolve: bool = False,
) -> TableMerger:
    """A MERGE of `source` (alias `s`) into `dt` (alias `t`) matched on equal `keys` (and on
    `within`, a predicate on the table's rows); `evolve` adds the source's columns the table
    lacks (a column added to a contract schema reaches tables written before it)."""
    on = [f"t.{k} = s.{k}" for k in keys]
    return dt.merge(
        source,
        predicate=" AND ".join([f"({within})", *on] if within else on),
        source_alias="s",
        target_alias="t",
        merge_schema=evolve,
        commit_properties=commit_properties,
    )


def _counts(metrics: dict) -> dict[str, int]:
    return {
        "inserted": int(metrics.get("num_target_rows_inserted", 0)),
        "updated": int(metrics.get("num_target_rows_updated", 0)),
        "deleted": int(metrics.get("num_target_rows_deleted", 0)),
    }


def _plain(field: pa.Field) -> pa.Field:
    """`field` with string views as plain strings (the type Delta stores)."""
    return field.with_type(pa.string()) if pa.types.is_string_view(field.type) else field


def _to_arrow(data: pl.DataFrame, schema: pa.Schema | None) -> pa.Table:
    """Arrow view of a frame, without copying its strings: polars' string views go to delta-rs
    as they are (Delta stores them as `string`); only names, order, nullability and non-string
    types follow `schema`."""
    table = data.to_arrow(compat_level=pl.CompatLevel.newest())
    if schema is None:
        return table
    table = table.select(schema.names)
    return table.cast(
        pa.schema([_as_view(field, table.schema.field(field.name)) for field in schema])
    )


def _as_view(field: pa.Field, actual: pa.Field) -> pa.Field:
    if pa.types.is_string(field.type) and pa.types.is_string_view(actual.type):
        return field.with_type(pa.string_view())
    return field


def sql_in(column: str, values: Iterable[str]) -> str:
    """A SQL `column IN (...)` predicate with quoted string literals (for Delta delete/merge)."""
    quoted = ", ".join(_quoted(v) for v in values)
    return f"{column} IN ({quoted})"


def sql_span(column: str, values: Sequence[str]) -> str:
    """A SQL range predicate `column` between the least and greatest of `values` (non-empty):
    what delta-rs can test against file statistics, where an `IN` list is not."""
    return f"{column} >= {_quoted(min(values))} AND {column} <= {_quoted(max(values))}"


AMONG_VALUES = 100
"""Most values `sql_among` tests one by one; more are tested as their span."""


def sql_among(column: str, values: Sequence[str]) -> str:
    """A SQL predicate true where `column` is one of `values` (non-empty), in a form delta-rs
    tests against file statistics: up to `AMONG_VALUES` values an OR of equalities (each file is
    kept only when one of the values may be in it), beyond, their span (`sql_span`: values in a
    narrow range, such as a batch of ids in order, are best told by their range)."""
    if len(values) > AMONG_VALUES:
        return sql_span(column, values)
    return " OR ".join(f"{column} = {_quoted(v)}" for v in values)


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def among(key: pl.Expr, values: pl.Series) -> pl.Expr:
    """`key` is one of `values`, written so that a Delta scan skips the files whose statistics
    rule out the values' range: polars prunes files by a range test on a column, not by `is_in`
    over an imploded series (alone, that reads every file). Sorted or time-ordered values in
    narrow ranges skip the most."""
    low, high = pl.lit(values.min(), values.dtype), pl.lit(values.max(), values.dtype)
    return key.is_between(low, high) & key.is_in(values.implode())
