"""`ctxdb sql`: SQL over every ctxdb Delta table with DuckDB (no network, no extension)."""

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
from ctxdb.storage.sql import SqlError, connect, run_query


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


def _emit(relation: duckdb.DuckDBPyRelation, fmt: Format, output: Path | None) -> None:
    frame = relation.pl()
    if fmt is Format.parquet:
        if output is None:
            raise typer.BadParameter("--format parquet needs --output FILE")
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


def _shell(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    """A minimal interactive loop: statements end with `;`, `.tables` lists, `.quit` leaves."""
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
                relation = run_query(con, statement)
            except SqlError as exc:
                typer.echo(f"error: {exc}", err=True)
                continue
            if relation is not None:
                _emit(relation, Format.table, None)


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
) -> None:
    """Run SQL over the Delta tables (each table is a view named like the table)."""
    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    try:
        con, snapshot = connect(store, table or None, as_of=_as_of(as_of))
    except SqlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for name, reason in snapshot.skipped.items():
        typer.echo(f"note: {name} is not readable at that point ({reason})", err=True)
    if query == "-":
        query = sys.stdin.read()
    if query is None:
        _shell(con, sorted(snapshot.versions))
        return
    try:
        relation = run_query(con, query)
    except SqlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if relation is not None:
        _emit(relation, fmt, output)
