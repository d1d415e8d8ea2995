"""`ctxdb generate | land | derive | tables`: sample data and the turn record without Dagster."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from ctxdb.cli.app import app
from ctxdb.coordination.lease import delta_writer_lease_for
from ctxdb.index.client import make_client
from ctxdb.landing.run import land
from ctxdb.record.expiry import last_landed_version, late_landed
from ctxdb.record.run import derive
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import get_settings
from ctxdb.storage.changes import row_count
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import SCHEMAS, policy


def _parse_now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise typer.BadParameter("--now needs a zone, e.g. 2026-12-01T12:00:00+00:00")
    return parsed.astimezone(UTC)


@app.command()
def generate(
    out: Annotated[Path, typer.Option(help="Directory for the JSONL parts.")],
    users: Annotated[int, typer.Option(min=1)] = 5,
    conversations: Annotated[int, typer.Option(min=1)] = 20,
    seed: Annotated[int, typer.Option()] = 0,
    now: Annotated[
        str | None, typer.Option(help="ISO time the sample ends at (default now).")
    ] = None,
    files_root: Annotated[
        Path | None, typer.Option(help="Where hosted/attached file bytes go (default settings).")
    ] = None,
    per_file: Annotated[int, typer.Option(min=1, help="Lines per JSONL part.")] = 20_000,
    facts: Annotated[
        Path | None, typer.Option(help="Also write ground-truth facts (JSONL).")
    ] = None,
) -> None:
    """Write deterministic sample events for all four adapters (some lines deliberately bad)."""
    generated = generate_events(
        users=users, conversations=conversations, seed=seed, now=_parse_now(now)
    )
    root = files_root or Path(get_settings().files)
    parts = write_sample(generated, out, files_root=root, per_file=per_file)
    if facts is not None:
        facts.parent.mkdir(parents=True, exist_ok=True)
        facts.write_text(
            "".join(json.dumps(asdict(f), default=str) + "\n" for f in generated.facts)
        )
    typer.echo(
        f"wrote {len(generated.events)} events + {len(generated.malformed)} malformed lines in "
        f"{len(parts)} files to {out}; {len(generated.files)} files under {root}"
    )


@app.command("land")
def land_command(
    path: Annotated[str | None, typer.Option(help="Landing dir or URI (default settings).")] = None,
    full: Annotated[
        bool, typer.Option(help="Compare every file, also those older than the landing cursor.")
    ] = False,
) -> None:
    """Land pending JSONL files into raw_turn_events (bad lines into quarantined_events), under
    the writer lease. Files older than the landing cursor (the newest landed mtime less an hour)
    are taken as landed unless --full."""
    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    before = last_landed_version(store)
    with make_client(settings) as es:
        stats = land(
            store,
            path or settings.landing_uri,
            scanner=settings.landing.scanner,
            writer=delta_writer_lease_for(es, settings, "landing"),
            full=full,
        )
    typer.echo(json.dumps(asdict(stats), default=str))
    notice = late_landed(store, settings, before).notice("landed")
    if notice:
        typer.echo(notice, err=True)


@app.command("derive")
def derive_command(
    full: Annotated[bool, typer.Option(help="Recompute every conversation.")] = False,
) -> None:
    """Derive TurnLogs, timelines, role rows, catalog and replay artifacts incrementally, under
    the writer lease."""
    settings = get_settings()
    with make_client(settings) as es:
        stats = derive(
            DeltaStore.from_settings(settings),
            settings,
            full=full,
            writer=delta_writer_lease_for(es, settings, "derivation"),
        )
    typer.echo(json.dumps(asdict(stats), default=str))
    if stats.late_notice:
        typer.echo(stats.late_notice, err=True)


@app.command()
def tables() -> None:
    """Row count, Delta version and maintenance policy (writer, what the retention sweep removes
    by, state table or not) of every table in the registry."""
    store = DeltaStore.from_settings(get_settings())
    rows = [
        {
            "table": name,
            "rows": row_count(store, name),
            "version": store.version(name),
            "writer": policy(name).writer,
            "expires_by": policy(name).expires_by or "",
            "state": policy(name).state,
        }
        for name in SCHEMAS
    ]
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        typer.echo(pl.DataFrame(rows))
