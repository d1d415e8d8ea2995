"""SQL over ctxdb's Delta tables with DuckDB, offline.

Each table is registered as a DuckDB view over the Arrow dataset of one Delta snapshot (the latest,
or the one current at `as_of`), so DuckDB needs no `delta` extension (which it would download at
first use) and reads only the files of that snapshot, with filter and projection pushdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from ctxdb.storage import tables
from ctxdb.storage.delta import DeltaStore


class SqlError(ValueError):
    """A query or snapshot that cannot be answered (one line, no traceback)."""


@dataclass(frozen=True)
class Snapshot:
    """The Delta versions a SQL session reads, and the tables it could not open."""

    versions: dict[str, int]
    skipped: dict[str, str] = field(default_factory=dict)


def known_table_names() -> list[str]:
    """Every table ctxdb writes (the catalog probed on object stores)."""
    return sorted(tables.SCHEMAS)


def table_names(store: DeltaStore) -> list[str]:
    """The ctxdb tables that exist under the store's root.

    A local root is listed (any directory holding a `_delta_log`); an object-store root is probed
    for the declared table names, since listing buckets needs credentials delta-rs already has.
    """
    root = Path(store.root)
    if "://" not in store.root or store.root.startswith("file://"):
        root = Path(store.root.removeprefix("file://"))
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())
    return [name for name in known_table_names() if store.exists(name)]


def _open(store: DeltaStore, name: str, as_of: int | datetime | None) -> DeltaTable:
    dt = DeltaTable(store.uri(name), storage_options=store.storage_options or None)
    if as_of is not None:
        dt.load_as_version(as_of)
    return dt


def connect(
    store: DeltaStore,
    names: list[str] | None = None,
    as_of: int | datetime | None = None,
) -> tuple[duckdb.DuckDBPyConnection, Snapshot]:
    """An in-memory DuckDB connection with one view per table (all present tables by default).

    With `as_of` (a version number or a time), each table is read as of that point; a table that
    did not exist then, or whose files were vacuumed since, is skipped with the reason.
    """
    present = table_names(store)
    wanted = present if names is None else names
    unknown = sorted(set(wanted) - set(present))
    if unknown:
        raise SqlError(f"no such table: {', '.join(unknown)} (tables: {', '.join(present)})")
    con = duckdb.connect()
    versions: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        try:
            dt = _open(store, name, as_of)
            dataset = dt.to_pyarrow_dataset()
        except (DeltaError, TableNotFoundError, OSError, ValueError) as exc:
            skipped[name] = str(exc).splitlines()[0][:200]
            continue
        con.register(name, dataset)
        versions[name] = dt.version()
    return con, Snapshot(versions, skipped)


def run_query(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    """Run one SQL statement; a DuckDB error becomes a one-line SqlError."""
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise SqlError(str(exc).splitlines()[0]) from None
