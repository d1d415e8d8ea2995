"""`ctxdb sql`: SQL over every ctxdb Delta table with DuckDB (read-only: no files, network or
extension; `--allow-local-files DIR` opens a directory; `--timeout` bounds each query)."""

from __future__ import annotations

import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import duckdb
import polars as pl
import typer

from ctxdb.cli.app import app
from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.sql import (
    DEFAULT_TIMEOUT_S,
    Snapshot,
    SqlError,
    connect,
    local_dirs,
    local_root,
    run_query,
    skipped_notes,
)


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def _as_of(value: str | None) -> int | datetime | None:
    """`--as-of`: a Delta version number or an ISO time with a zone."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter("--as-of takes a version number or an ISO time") from None
    if parsed.tzinfo is None:
        raise typer.BadParameter("--as-of needs a zone, e.g. 2026-12-01T12:00:00+00:00")
    return parsed


def _check_output(store: DeltaStore, output: Path | None) -> None:
    """`--output` may not land inside the Delta root (a stray file there misleads readers)."""
    root = local_root(store)
    if output is not None and root is not None and root in output.resolve().parents:
        raise SqlError(f"--output {output}: inside the Delta root {root}; write elsewhere")


def _emit(frame: pl.DataFrame, fmt: Format, output: Path | None) -> None:
    if fmt is Format.parquet and output is not None:
        frame.write_parquet(output)
        typer.echo(f"wrote {frame.height} rows to {output}", err=True)
        return
    if fmt is Format.csv:
        text = frame.write_csv()
    elif fmt is Format.json:
        text = frame.write_ndjson()
    else:
        with pl.Config(tbl_rows=200, tbl_cols=-1, fmt_str_lengths=80, tbl_width_chars=200):
            text = str(frame) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)


def _shell(con: duckdb.DuckDBPyConnection, tables: list[str], timeout: float) -> None:
    """A minimal interactive loop: statements end with `;`, `.tables` lists, `.quit` leaves; a
    failing or timed-out statement prints one error line and the loop goes on."""
    typer.echo(f"ctxdb sql ({len(tables)} tables; end statements with ';', .tables, .quit)")
    buffer: list[str] = []
    while True:
        try:
            line = input("sql> " if not buffer else "...> ")
        except EOFError:
            return
        if not buffer and line.strip() in {".quit", ".exit"}:
            return
        if not buffer and line.strip() == ".tables":
            typer.echo("\n".join(tables))
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            statement, buffer = "\n".join(buffer), []
            try:
                frame = run_query(con, statement, timeout)
            except SqlError as exc:
                typer.echo(f"error: {exc}", err=True)
                continue
            if frame is not None:
                _emit(frame, Format.table, None)


def _open(
    store: DeltaStore,
    tables: list[str] | None,
    as_of: str | None,
    allow_local_files: list[Path],
    output: Path | None,
) -> tuple[duckdb.DuckDBPyConnection, Snapshot, int | datetime | None]:
    """The locked-down connection over `tables` (default: all) as of `--as-of`, its snapshot
    and that point; a refused `--output` or directory is an `error:` line and exit status 2."""
    try:
        _check_output(store, output)
        allowed = local_dirs(store, allow_local_files)
        point = _as_of(as_of)
        con, snapshot = connect(store, tables or None, as_of=point, allowed=allowed)
    except SqlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return con, snapshot, point


def _write(frame: pl.DataFrame, fmt: Format, output: Path | None) -> None:
    """`_emit` the result; a write that fails is an `error:` line and exit status 2."""
    try:
        _emit(frame, fmt, output)
    except OSError as exc:
        typer.echo(f"error: --output {output}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    except pl.exceptions.PolarsError as exc:
        typer.echo(f"error: cannot write the result as {fmt}: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(2) from None


@app.command("sql")
def sql_command(
    query: Annotated[
        str | None, typer.Argument(help="SQL (`-` reads it from stdin); omit for a shell.")
    ] = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", "-t", help="Register only these tables.")
    ] = None,
    as_of: Annotated[
        str | None, typer.Option(help="Read every table as of a Delta version or ISO time.")
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here.")] = None,
    allow_local_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-local-files",
            metavar="DIR",
            help="Let queries read and write files under DIR (repeatable; not one holding or "
            "inside the Delta root). Never the network or extensions.",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(min=0, help="Stop a query running longer than this many seconds (0: none)."),
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Run SQL over the Delta tables (each table is a view named like the table), read-only."""
    if fmt is Format.parquet and output is None:
        raise typer.BadParameter("--format parquet needs --output FILE")
    store = DeltaStore.from_settings(get_settings())
    con, snapshot, point = _open(store, table, as_of, allow_local_files or [], output)
    if query == "-":
        query = sys.stdin.read()
    if point is not None:
        for note in skipped_notes(con, snapshot, point, query):
            typer.echo(f"note: {note}", err=True)
    if query is None:
        _shell(con, sorted(snapshot.versions), timeout)
        return
    try:
        frame = run_query(con, query, timeout)
    except SqlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if frame is not None:
        _write(frame, fmt, output)
