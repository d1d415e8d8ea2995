"""SQL over ctxdb's Delta tables with DuckDB, offline and read-only.

Each table is registered as a DuckDB view over the Arrow dataset of one Delta snapshot (the latest,
or the one current at `as_of`), so DuckDB needs no `delta` extension (which it would download at
first use) and reads only the files of that snapshot, with filter and projection pushdown. The
dataset declares its string and binary columns as Arrow view types: the Parquet files polars writes
store them so, and Arrow cannot prune a file whose column type differs from the filter's literal
(an `IN` list or an `OR` of equalities failed with "no kernel matching (string, string_view)"). Once
the tables are registered the connection is locked down with DuckDB's own settings: no file access
(except directories the caller opens), no network, no extension install or load, and no setting
can be changed back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyarrow.dataset import Dataset
from pyarrow.fs import FileType

from ctxdb.storage import tables
from ctxdb.storage.delta import DeltaStore

DEFAULT_TIMEOUT_S = 300.0
"""`ctxdb sql --timeout`: seconds a query may run before it is stopped (0: no limit)."""

LOCKDOWN = (
    "set enable_progress_bar = false",
    "set enable_external_access = false",
    "set autoinstall_known_extensions = false",
    "set autoload_known_extensions = false",
    "set lock_configuration = true",
)
"""DuckDB settings applied after the tables are registered, in this order (the lock comes last).
The progress bar is off: DuckDB draws it on stdout, inside the query's output."""

REFUSED_HINT = "ctxdb sql reads only its tables; --allow-local-files DIR opens a local directory"


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
    root = local_root(store)
    if root is None:
        return [name for name in known_table_names() if store.exists(name)]
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())


def _view_type(dtype: pa.DataType) -> pa.DataType:
    """`dtype` with every string and binary inside it as the Arrow view type."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return pa.string_view()
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return pa.binary_view()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field.with_type(_view_type(dtype.value_type))
        return pa.list_(item) if pa.types.is_list(dtype) else pa.large_list(item)
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(_view_type(f.type)) for f in dtype.fields])
    return dtype


def view_schema(schema: pa.Schema) -> pa.Schema:
    """The dataset schema DuckDB scans: strings and binaries as view types (see the module doc)."""
    return pa.schema([f.with_type(_view_type(f.type)) for f in schema], metadata=schema.metadata)


def _point(as_of: int | datetime) -> str:
    return f"version {as_of}" if isinstance(as_of, int) else as_of.isoformat()


def _unreadable(dt: DeltaTable, as_of: int | datetime) -> str:
    """Why `dt` (loaded at its latest version) has no snapshot at `as_of`, for an analyst."""
    latest = dt.version()
    if isinstance(as_of, int) and as_of > latest:
        return f"its latest version is {latest}"
    if isinstance(as_of, int):
        return f"version {as_of} is no longer in its log"
    return "it has no version from that time"


def _open(store: DeltaStore, name: str, as_of: int | datetime | None) -> DeltaTable:
    """The table at `as_of` (latest if None); SqlError with an analyst's reason when none."""
    dt = DeltaTable(store.uri(name), storage_options=store.storage_options or None)
    if as_of is None:
        return dt
    created = dt.metadata().created_time
    if isinstance(as_of, datetime) and created and as_of.timestamp() * 1000 < created:
        raise SqlError("it did not exist yet at that time")
    try:
        dt.load_as_version(as_of)
    except (DeltaError, ValueError):
        raise SqlError(_unreadable(dt, as_of)) from None
    return dt


def _missing_files(dataset: Dataset) -> int:
    """How many of the snapshot's data files are gone (removed by a VACUUM since)."""
    infos = dataset.filesystem.get_file_info(dataset.files)
    return sum(info.type == FileType.NotFound for info in infos)


def local_root(store: DeltaStore) -> Path | None:
    """The store's root as a resolved local path; None on an object store. URI schemes are
    case-insensitive (RFC 3986), so `FILE://` is the local root as much as `file://`."""
    scheme, sep, rest = store.root.partition("://")
    if not sep:
        return Path(store.root).resolve()
    return Path(rest).resolve() if scheme.lower() == "file" else None


def local_dirs(store: DeltaStore, dirs: Sequence[Path]) -> list[Path]:
    """`dirs` resolved, each an existing directory that neither holds nor lies in the Delta root
    (SqlError otherwise), so opening them never lets a query write into a table."""
    root = local_root(store)
    resolved = []
    for raw in dirs:
        path = raw.expanduser().resolve()
        if not path.is_dir():
            raise SqlError(f"--allow-local-files {raw}: not a directory")
        if root is not None and (path == root or path in root.parents or root in path.parents):
            raise SqlError(
                f"--allow-local-files {raw}: overlaps the Delta root {root}; "
                "name a directory outside it"
            )
        resolved.append(path)
    return resolved


def lock_down(con: duckdb.DuckDBPyConnection, allowed: Sequence[Path] = ()) -> None:
    """No file access but under `allowed`, no network, no extension install or load, settings
    locked. Apply after the tables are registered (delta-rs reads them, not DuckDB)."""
    quoted = ", ".join("'" + str(path).replace("'", "''") + "/'" for path in allowed)
    con.execute(f"set allowed_directories = [{quoted}]")
    for statement in LOCKDOWN:
        con.execute(statement)


def connect(
    store: DeltaStore,
    names: list[str] | None = None,
    as_of: int | datetime | None = None,
    allowed: Sequence[Path] = (),
) -> tuple[duckdb.DuckDBPyConnection, Snapshot]:
    """An in-memory, locked-down DuckDB connection with one view per table (all present tables by
    default); queries may read and write files only under `allowed` (see `local_dirs`).

    With `as_of` (a version number or a time), each table is read as of that point; a table with
    no snapshot then, or whose files were vacuumed since (retention, erasure), is skipped with a
    one-line reason for an analyst.
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
            dataset = dt.to_pyarrow_dataset(schema=view_schema(pa.schema(dt.schema().to_arrow())))
            missing = _missing_files(dataset) if as_of is not None else 0
        except SqlError as exc:
            skipped[name] = str(exc)
            continue
        except (DeltaError, TableNotFoundError, OSError, ValueError) as exc:
            skipped[name] = f"cannot open it: {str(exc).splitlines()[0][:200]}"
            continue
        if missing:
            skipped[name] = (
                f"{missing} of its files at that point were removed since by VACUUM "
                "(retention or erasure)"
            )
            continue
        con.register(name, dataset)
        versions[name] = dt.version()
    lock_down(con, allowed)
    return con, Snapshot(versions, skipped)


def _tables_read(con: duckdb.DuckDBPyConnection, query: str) -> set[str] | None:
    """The lower-cased table names `query` reads; None when DuckDB cannot tell (a syntax error)."""
    try:
        statements = con.extract_statements(query)
        return {t.lower() for s in statements for t in con.get_table_names(s.query)}
    except duckdb.Error:
        return None


def skipped_notes(
    con: duckdb.DuckDBPyConnection, snapshot: Snapshot, as_of: int | datetime, query: str | None
) -> list[str]:
    """One line per skipped table that `query` reads (every skipped table when there is no query
    or its tables cannot be told, as in the shell)."""
    read = None if query is None else _tables_read(con, query)
    names = [name for name in snapshot.skipped if read is None or name.lower() in read]
    return [
        f"{name} cannot be read as of {_point(as_of)}: {snapshot.skipped[name]}"
        for name in sorted(names)
    ]


def _one_line(exc: duckdb.Error) -> str:
    line = str(exc).splitlines()[0]
    return f"{line} ({REFUSED_HINT})" if isinstance(exc, duckdb.PermissionException) else line


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _intervals_as_text(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """INTERVAL columns as DuckDB's text (polars reads no Arrow interval); others unchanged."""
    types = [str(t) for t in relation.types]
    if "INTERVAL" not in types:
        return relation
    columns = [
        f"{_quoted(c)}::varchar as {_quoted(c)}" if t == "INTERVAL" else _quoted(c)
        for c, t in zip(relation.columns, types, strict=True)
    ]
    return relation.project(", ".join(columns))


def run_query(
    con: duckdb.DuckDBPyConnection, query: str, timeout: float = DEFAULT_TIMEOUT_S
) -> pl.DataFrame | None:
    """Run SQL (several statements run in order) and return the last one's rows, None when it
    returns none. It is interrupted after `timeout` seconds (0: no limit); a DuckDB error or a
    timeout becomes a one-line SqlError."""
    timer = threading.Timer(timeout, con.interrupt) if timeout > 0 else None
    if timer is not None:
        timer.start()
    try:
        relation = con.sql(query)
        return None if relation is None else _intervals_as_text(relation).pl()
    except pl.exceptions.PolarsError as exc:
        raise SqlError(f"cannot read the result: {str(exc).splitlines()[0]}") from None
    except duckdb.Error as exc:
        if timer is not None and timer.finished.is_set():
            raise SqlError(
                f"the query ran longer than --timeout {timeout:g} s and was stopped"
            ) from None
        raise SqlError(_one_line(exc)) from None
    finally:
        if timer is not None:
            timer.cancel()
