"""The lifecycle journal: what a retention sweep or an erasure set out to do, recorded before it
removes anything, so that a run killed part-way is resumed from the record rather than from the
tables it already emptied.

A run appends its header (`kind = run`: start time, the table versions it started from, for an
erasure its scope) and every entry it will need again (an erasure's role rows, vectors,
identities, landing files, Elasticsearch ids) in one commit. Its Delta deletes carry the run id in
their commit metadata (`purge.RUN_ID_KEY`), so what the run removed, in this attempt and in any
interrupted one, is read back from the tables' history (`purge.deleted_by`). A finished run
deletes its entries and vacuums the journal at once, so no identifier it held stays behind.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from ctxdb.lifecycle.purge import delete_where, vacuum
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LIFECYCLE_JOURNAL, LIFECYCLE_JOURNAL_SCHEMA

log = logging.getLogger(__name__)

RUN = "run"
ENTRY_SCHEMA = pl.Schema({"kind": pl.String, "key": pl.String, "value": pl.String})


@dataclass(frozen=True)
class JournalRun:
    """One recorded run: its id, operation and header (`started_at`, `versions`, ...)."""

    run_id: str
    operation: str
    header: dict

    @property
    def started_at(self) -> datetime:
        return datetime.fromisoformat(self.header["started_at"])

    @property
    def versions(self) -> dict[str, int | None]:
        """The version of each table when the run started (None: the table did not exist)."""
        return self.header.get("versions", {})


def table_versions(store: DeltaStore, tables: tuple[str, ...]) -> dict[str, int | None]:
    return {table: store.version(table) for table in tables}


def open_runs(store: DeltaStore, operation: str) -> list[JournalRun]:
    """The runs of `operation` recorded and not finished, oldest first."""
    if not store.exists(LIFECYCLE_JOURNAL):
        return []
    headers = (
        store.scan(LIFECYCLE_JOURNAL)
        .filter((pl.col("operation") == operation) & (pl.col("kind") == RUN))
        .select("run_id", "value")
        .collect()
    )
    runs = [JournalRun(run_id, operation, json.loads(value)) for run_id, value in headers.rows()]
    return sorted(runs, key=lambda run: run.started_at)


def start(store: DeltaStore, run: JournalRun, entries: pl.DataFrame | None = None) -> None:
    """Record `run` and its `entries` (kind, key, value) in one commit."""
    header = pl.DataFrame(
        {"kind": [RUN], "key": [run.run_id], "value": [json.dumps(run.header, sort_keys=True)]},
        schema=ENTRY_SCHEMA,
    )
    rows = pl.concat([header, entries]) if entries is not None else header
    frame = rows.with_columns(
        run_id=pl.lit(run.run_id),
        operation=pl.lit(run.operation),
        recorded_at=pl.lit(datetime.now(UTC)).cast(pl.Datetime("us", "UTC")),
    )
    store.append(LIFECYCLE_JOURNAL, frame, schema=LIFECYCLE_JOURNAL_SCHEMA)


def entries(store: DeltaStore, run_id: str, kind: str) -> pl.DataFrame:
    """The (key, value) entries of one kind recorded for `run_id`."""
    if not store.exists(LIFECYCLE_JOURNAL):
        return pl.DataFrame(schema={"key": pl.String, "value": pl.String})
    return (
        store.scan(LIFECYCLE_JOURNAL)
        .filter((pl.col("run_id") == run_id) & (pl.col("kind") == kind))
        .select("key", "value")
        .collect()
    )


def close(store: DeltaStore, run_id: str) -> None:
    """Delete the run's entries and vacuum the journal at once (their files go too)."""
    literal = run_id.replace("'", "''")
    delete_where(store, LIFECYCLE_JOURNAL, f"run_id = '{literal}'")
    vacuum(store, (LIFECYCLE_JOURNAL,), 0, dry_run=False)
    log.info("journal: %s closed", run_id)
