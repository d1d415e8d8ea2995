"""Retention: the TTL policy applied at derivation time and the sweep that physically purges, in
every store: Delta, Elasticsearch, conversation file storage and the landing files.

Sweep order (each step idempotent, so a run killed anywhere is finished by the next one):

1. find expired rows in Delta (`expires_at <= cutoff`; raw events by the later of `occurred_at`
   and `ingested_at` + their TTL (`ctxdb.record.expiry`);
   quarantine and failure rows by their `policy.clock` + the default TTL), the landing files
   holding expired lines, and expired stragglers in Elasticsearch;
2. record the run in `lifecycle_journal` (its header names the landing files; a killed run is
   resumed under the same run id) and the Elasticsearch ids and storage paths to remove in
   `retention_pending`;
3. empty the expired lines of those landing files, deleting (or archiving) files left with no
   line, and the landing files quarantined as unreadable past the default TTL
   (`landing_retention`);
4. DELETE the expired rows from Delta (role rows first, then TurnLogs, timelines, catalog, replay
   artifacts, raw events, quarantine and failure rows, then the embedding statuses of the
   expired rows, reading only the files `status_bound` leaves, and by key those of every other
   pending row id whose role row is gone, so the statuses of rows an interrupted attempt purged go
   too) and prune embedding-cache entries no row references; every delete commit carries the run
   id;
5. bulk-delete every pending Elasticsearch id (404 = already gone) and remove pending files;
   clear the pending entries that were confirmed; Elasticsearch failures stay pending;
6. VACUUM every table with its window (`compaction.vacuum_windows`), delete archive folders past
   `archive_days`, keep the state tables bounded (`compaction.maintain_state`), append a
   `retention_report` row whose deleted counts are read from the tables' history for the run id
   (an interrupted attempt's deletes included), and close the journal entry.

Landing files are rewritten before Delta is purged, so a landing run that re-reads a file finds
the expired lines gone rather than landing them again as new events; Delta is purged before
Elasticsearch so the indexer, which reads Delta, cannot re-index a row the sweep is removing (see
docs/operations.md for the full ordering argument).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import polars as pl
import pyarrow as pa
from deltalake import write_deltalake
from elasticsearch import ApiError, Elasticsearch, TransportError

from ctxdb.coordination.lease import optional_writer_lease_for
from ctxdb.index.bulk import bulk_options
from ctxdb.index.client import failing_fast
from ctxdb.index.mappings import ROWS, TURNS, turn_doc_id
from ctxdb.lifecycle import journal
from ctxdb.lifecycle.compaction import maintain_state, vacuum_all
from ctxdb.lifecycle.journal import JournalRun
from ctxdb.lifecycle.landing_retention import (
    LandingSweep,
    expire_archive,
    expire_quarantined_files,
    sweep_files,
)
from ctxdb.lifecycle.purge import (
    EsDeleteResult,
    columns_of,
    delete_docs,
    delete_keys,
    delete_where,
    deleted_by,
    part_count,
    present_among,
    remove_paths,
    scan_ids,
    sql_ts,
)
from ctxdb.record.expiry import retention_clock, ttl_days_expr
from ctxdb.settings import Settings
from ctxdb.storage.conversation_files import TURN_KEY, turn_file_paths
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    DEFAULT_TTL,
    EMBEDDINGS,
    EXPIRES_AT,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
    RETENTION_PENDING,
    RETENTION_PENDING_SCHEMA,
    RETENTION_REPORT,
    RETENTION_REPORT_SCHEMA,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_LOGS,
    expiring,
    policy,
    tables_where,
)

log = logging.getLogger(__name__)

# Tables whose rows carry their own `expires_at` and are swept by it (role rows first).
EXPIRING_TABLES = tuple(sorted(expiring(EXPIRES_AT), key=lambda table: table != ROLE_ROWS))
# Tables whose rows expire the default TTL after their `policy.clock` column.
DEFAULT_TTL_TABLES = expiring(DEFAULT_TTL)
# Tables the sweep deletes rows from (its report counts these).
PURGED_TABLES = tuple(table for table in tables_where() if policy(table).expires_by is not None)
FILES = "files"
LANDING = "landing"
OPERATION = "retention"


@dataclass
class Expired:
    """What a sweep found expired at `cutoff`."""

    cutoff: datetime
    counts: dict[str, int]
    row_ids: list[str]
    turns: pl.DataFrame  # TURN_KEY columns present in turn_logs
    raw_ids: pl.DataFrame | None = None  # event_id of expired raw events
    sources: list[str] = field(default_factory=list)  # landing files holding expired lines
    derived_until: datetime | None = None  # the latest `derived_at` of an expired role row

    def pending(self, stragglers: dict[str, list[str]]) -> dict[str, list[str]]:
        """The Elasticsearch ids and storage paths this sweep must remove."""
        turn_ids = [
            turn_doc_id(c, t)
            for c, t in self.turns.select("conversation_id", "turn_id").iter_rows()
        ]
        return {
            ROWS: [*self.row_ids, *stragglers.get(ROWS, [])],
            TURNS: [*turn_ids, *stragglers.get(TURNS, [])],
            FILES: turn_file_paths(self.turns),
        }


@dataclass
class RetentionReport:
    """One sweep's outcome (also appended to `retention_report`)."""

    run_id: str
    status: str
    dry_run: bool
    cutoff: datetime
    started_at: datetime
    finished_at: datetime
    deleted_rows: dict[str, int] = field(default_factory=dict)
    es_deleted: dict[str, int] = field(default_factory=dict)
    es_pending: int = 0
    files_removed: int = 0
    vacuumed_files: dict[str, int] = field(default_factory=dict)
    landing: dict[str, int] = field(default_factory=dict)
    state_files: dict[str, int] = field(default_factory=dict)
    oldest_remaining_ts: datetime | None = None
    error: str | None = None

    @classmethod
    def begun(
        cls,
        run_id: str,
        started_at: datetime,
        cutoff: datetime,
        dry_run: bool,
        error: str | None,
        **details: Any,
    ) -> Self:
        """The report of a run begun at `started_at`: status ok until its steps say otherwise
        (`details`: the fields of a subclass)."""
        return cls(
            run_id=run_id,
            status="ok",
            dry_run=dry_run,
            cutoff=cutoff,
            started_at=started_at,
            finished_at=started_at,
            error=error,
            **details,
        )

    @property
    def duration_s(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def rows_per_s(self) -> float:
        deleted = sum(self.deleted_rows.values())
        return deleted / self.duration_s if self.duration_s > 0 else 0.0

    def as_row(self, operation: str = "retention") -> dict:
        return {
            "run_id": self.run_id,
            "operation": operation,
            "status": self.status,
            "dry_run": self.dry_run,
            "cutoff": self.cutoff,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            "deleted_rows": json.dumps(self.deleted_rows, sort_keys=True),
            "es_deleted": json.dumps(self.es_deleted, sort_keys=True),
            "es_pending": self.es_pending,
            "files_removed": self.files_removed,
            "vacuumed_files": json.dumps(self.vacuumed_files, sort_keys=True),
            "landing": json.dumps(self.landing, sort_keys=True),
            "oldest_remaining_ts": self.oldest_remaining_ts,
            "rows_per_s": self.rows_per_s,
            "error": self.error,
        }

    def as_metadata(self) -> dict[str, str | int | float | bool | None]:
        row = {**self.as_row(), "state_files": json.dumps(self.state_files, sort_keys=True)}
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def find_expired(store: DeltaStore, cutoff: datetime, settings: Settings) -> Expired:
    """Expired rows per table, the expired role-row ids and the expired turns (from TurnLogs).

    Derived tables carry `expires_at`; raw events expire `occurred_at` + their tenant/app TTL,
    quarantined lines and failure rows their `policy.clock` + the default TTL. `sources` are
    the landing files of the expired raw events and quarantined lines.
    """
    counts: dict[str, int] = {}
    row_ids: list[str] = []
    derived_until: datetime | None = None
    turns = pl.DataFrame(schema={k: pl.String for k in TURN_KEY})
    for table in EXPIRING_TABLES:
        columns = columns_of(store, table)
        if "expires_at" not in columns:
            continue
        wanted = {
            ROLE_ROWS: ["row_id", "derived_at"],
            TURN_LOGS: [c for c in TURN_KEY if c in columns],
        }
        expired = (
            store.scan(table)
            .filter(pl.col("expires_at") <= cutoff)
            .select(wanted.get(table, []) or [pl.lit(1).alias("one")])
            .collect()
        )
        counts[table] = expired.height
        if table == ROLE_ROWS:
            row_ids = expired["row_id"].to_list()
            derived_until = expired.get_column("derived_at").max()  # type: ignore[assignment]
        elif table == TURN_LOGS:
            turns = expired.unique()
    raw = _expired_raw_events(store, cutoff, settings)
    sources = [] if raw is None else raw["source_file"].unique().to_list()
    if raw is not None:
        counts[RAW_TURN_EVENTS] = raw.height
    for table in DEFAULT_TTL_TABLES:
        clock = policy(table).clock
        if clock not in columns_of(store, table):
            continue
        found = (
            store.scan(table)
            .filter(pl.col(clock) <= quarantine_cutoff(cutoff, settings))
            .select("source_file" if table == QUARANTINED_EVENTS else pl.lit(1).alias("one"))
            .collect()
        )
        counts[table] = found.height
        if table == QUARANTINED_EVENTS:
            sources += found["source_file"].unique().to_list()
    return Expired(
        cutoff=cutoff,
        counts=counts,
        row_ids=row_ids,
        turns=turns,
        raw_ids=None if raw is None else raw.select("event_id"),
        sources=sorted(set(sources)),
        derived_until=derived_until,
    )


def quarantine_cutoff(cutoff: datetime, settings: Settings) -> datetime:
    return cutoff - timedelta(days=settings.retention.days)


def raw_bound(cutoff: datetime, settings: Settings) -> datetime:
    """The latest `occurred_at` a raw event expired at `cutoff` can have: the cutoff less the
    shortest raw-event TTL of any rule."""
    shortest = min(
        [settings.retention.days, *(r.days for r in settings.retention.rules if r.role is None)]
    )
    return cutoff - timedelta(days=shortest)


def _expired_raw_events(
    store: DeltaStore, cutoff: datetime, settings: Settings
) -> pl.DataFrame | None:
    columns = set(columns_of(store, RAW_TURN_EVENTS))
    if not {"event_id", "occurred_at", "ingested_at", "source_file"} <= columns:
        return None
    days = ttl_days_expr(settings.retention.rules, settings.retention.days, role_column=None)
    bound = raw_bound(cutoff, settings)
    # the bound is implied by the exact test; on the columns, it lets the scan skip files of
    # events too recent (or landed too recently) to have expired under any rule (and the delete's
    # MERGE, `purge_expired`)
    return (
        store.scan(RAW_TURN_EVENTS)
        .filter((pl.col("occurred_at") <= bound) & (pl.col("ingested_at") <= bound))
        .filter(retention_clock("occurred_at") + pl.duration(days=days) <= cutoff)
        .select("event_id", "source_file")
        .collect()
    )


def es_stragglers(es: Elasticsearch, prefix: str, cutoff: datetime) -> dict[str, list[str]]:
    """Documents already expired in Elasticsearch whatever Delta says (e.g. indexed mid-sweep)."""
    query = {"range": {"expires_at": {"lte": cutoff.isoformat()}}}
    return {kind: scan_ids(es, prefix, kind, query) for kind in (ROWS, TURNS)}


def record_pending(store: DeltaStore, run_id: str, pending: dict[str, list[str]]) -> int:
    """Append the work to `retention_pending` (MERGE-insert on kind+doc_id, so re-runs add none)."""
    now = datetime.now(UTC)
    frame = pl.DataFrame(
        [
            {"kind": kind, "doc_id": doc_id, "run_id": run_id, "recorded_at": now}
            for kind, ids in pending.items()
            for doc_id in ids
        ],
        schema={
            "kind": pl.String,
            "doc_id": pl.String,
            "run_id": pl.String,
            "recorded_at": pl.Datetime("us", "UTC"),
        },
    ).unique(subset=["kind", "doc_id"])
    return store.insert_new(
        RETENTION_PENDING, frame, keys=["kind", "doc_id"], schema=RETENTION_PENDING_SCHEMA
    )


def read_pending(store: DeltaStore) -> pl.DataFrame:
    return store.read(RETENTION_PENDING, RETENTION_PENDING_SCHEMA)


def purge_expired(
    store: DeltaStore,
    expired: Expired,
    started_at: datetime,
    settings: Settings,
    run_id: str | None = None,
) -> dict[str, int]:
    """DELETE the expired rows from every expiring table and their dependants (commits tagged
    with `run_id`); returns the rows this call deleted per table."""
    deleted: dict[str, int] = {}
    for table in EXPIRING_TABLES:
        if table in expired.counts:
            predicate = f"expires_at <= {sql_ts(expired.cutoff)}"
            deleted[table] = delete_where(store, table, predicate, run_id)
    deleted[ROW_EMBEDDINGS] = purge_statuses(store, expired, run_id)
    if expired.raw_ids is not None:
        within = f"t.occurred_at <= {sql_ts(raw_bound(expired.cutoff, settings))}"
        deleted[RAW_TURN_EVENTS] = delete_keys(
            store, RAW_TURN_EVENTS, expired.raw_ids, run_id, within
        )
    before = sql_ts(quarantine_cutoff(expired.cutoff, settings))
    for table in DEFAULT_TTL_TABLES:
        if table in expired.counts and table != QUARANTINED_FILES:
            predicate = f"{policy(table).clock} <= {before}"
            deleted[table] = delete_where(store, table, predicate, run_id)
    deleted[EMBEDDINGS] = prune_embedding_cache(store, started_at, run_id)
    return deleted


STATUS_SKEW = timedelta(hours=1)
"""How much later than the derivation of its row a status written from the row's earlier version
may be stamped: the clocks of the derivation and embedding hosts may differ, and the embedding
stage stamps its statuses shortly after reading the rows."""


def purge_statuses(store: DeltaStore, expired: Expired, run_id: str | None = None) -> int:
    """Delete the embedding statuses of the expired role rows, reading only the files
    `status_bound` leaves, then, by key alone, those of rows an interrupted sweep or an erasure
    purged (`purged_row_ids`; none in a sweep that finishes); returns the statuses deleted."""
    purged = pl.DataFrame({"row_id": expired.row_ids}, schema={"row_id": pl.String})
    within = status_bound(store, expired)
    deleted = delete_keys(store, ROW_EMBEDDINGS, purged, run_id, within)
    leftovers = purged_row_ids(store).join(purged, on="row_id", how="anti")
    return deleted + delete_keys(store, ROW_EMBEDDINGS, leftovers, run_id)


def status_bound(store: DeltaStore, expired: Expired) -> str | None:
    """A SQL predicate (alias `t`) true of every status of an expired role row: its stored
    expiry is at or before the cutoff; or null (written before the column existed); or it was
    written before the latest derivation of an expired row (plus `STATUS_SKEW`), since which that
    row's expiry may have moved. None when the table has no `expires_at` column yet."""
    if "expires_at" not in columns_of(store, ROW_EMBEDDINGS):
        return None
    bounds = [f"t.expires_at <= {sql_ts(expired.cutoff)}", "t.expires_at IS NULL"]
    if expired.derived_until is not None:
        bounds.append(f"t.updated_at <= {sql_ts(expired.derived_until + STATUS_SKEW)}")
    return " OR ".join(bounds)


def purged_row_ids(store: DeltaStore) -> pl.DataFrame:
    """Row ids waiting in `retention_pending` whose role row is gone from Delta: rows a sweep or
    an erasure (this one, or one that was interrupted) already purged."""
    pending = read_pending(store).filter(pl.col("kind") == ROWS)
    return drop_live_ids(store, pending).select(row_id="doc_id")


CACHE_PART_ROWS = 1_000_000
"""Rows of the larger of `embeddings` and `role_rows` compared per part by the cache prune: its
memory is bounded by a part of both tables, not by the tables."""


def prune_embedding_cache(store: DeltaStore, before: datetime, run_id: str | None = None) -> int:
    """Delete cached vectors no role row references any more (only entries older than `before`,
    so a vector the embedder just cached for a row being derived right now is kept).

    Entries and role-row hashes are compared part by part (a hash of `text_hash` modulo the
    parts), each part read by a streaming scan that keeps only its rows; the stale entries of
    every part go in one delete."""
    if not store.exists(EMBEDDINGS):
        return 0
    parts = part_count(store, (EMBEDDINGS, ROLE_ROWS), CACHE_PART_ROWS)
    stale = pl.concat([_stale_entries(store, before, part, parts) for part in range(parts)])
    return delete_keys(store, EMBEDDINGS, stale, run_id)


def _stale_entries(store: DeltaStore, before: datetime, part: int, parts: int) -> pl.DataFrame:
    """Cache entries of part `part` of `parts` older than `before` that no role row references."""
    in_part = pl.col("text_hash").hash() % parts == part
    referenced = (
        store.scan(ROLE_ROWS).select("text_hash").filter(in_part).unique().collect()
        if store.exists(ROLE_ROWS)
        else pl.DataFrame(schema={"text_hash": pl.String})
    )
    return (
        store.scan(EMBEDDINGS)
        .filter((pl.col("created_at") < before) & in_part)
        .select("model_id", "text_hash")
        .collect()
        .join(referenced, on="text_hash", how="anti")
    )


LIVE_KEYS = {
    ROWS: (ROLE_ROWS, "row_id", pl.col("row_id")),
    TURNS: (TURN_LOGS, "turn_id", pl.concat_str("conversation_id", pl.lit(":"), "turn_id")),
}
"""Per Elasticsearch kind: the Delta table of its live rows, a column it needs, the document id."""


def drop_live_ids(store: DeltaStore, pending: pl.DataFrame) -> pl.DataFrame:
    """Pending Elasticsearch ids whose row is still live in Delta are not deleted (re-derived).

    Only the pending ids are looked up (pushed into the scans, `present_among`), so memory is
    bounded by the pending ids, not by the live tables."""
    if pending.is_empty():
        return pending
    live = pl.concat([_live_ids(store, pending, kind) for kind in LIVE_KEYS])
    return pending.join(live, on=["kind", "doc_id"], how="anti")


def _live_ids(store: DeltaStore, pending: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The pending ids of `kind` whose row is live in Delta."""
    table, needed, key = LIVE_KEYS[kind]
    ids = pending.filter(pl.col("kind") == kind)["doc_id"]
    if ids.is_empty() or needed not in columns_of(store, table):
        ids = ids.clear()
    else:
        ids = present_among(store.scan(table), key, ids)
    return ids.rename("doc_id").to_frame().select(pl.lit(kind).alias("kind"), "doc_id")


def execute_pending(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, pending: pl.DataFrame
) -> tuple[EsDeleteResult, int, pl.DataFrame]:
    """Delete pending Elasticsearch ids and files; returns the result and the entries now done."""
    ids = {
        kind: pending.filter(pl.col("kind") == kind)["doc_id"].to_list() for kind in (ROWS, TURNS)
    }
    if es is None:
        result = EsDeleteResult(error="no Elasticsearch client", failed=ids)
    else:
        result = delete_docs(
            es, settings.elasticsearch.index_prefix, ids, bulk_options(settings.elasticsearch)
        )
    paths = pending.filter(pl.col("kind") == FILES)["doc_id"].to_list()
    files_removed = remove_paths(settings.files, paths, settings.object_store_options)
    failed = pl.DataFrame(
        [{"kind": kind, "doc_id": doc_id} for kind, ids in result.failed.items() for doc_id in ids],
        schema={"kind": pl.String, "doc_id": pl.String},
    )
    done = pending.select("kind", "doc_id").join(failed, on=["kind", "doc_id"], how="anti")
    return result, files_removed, done


def clear_pending(store: DeltaStore, done: pl.DataFrame) -> int:
    return delete_keys(store, RETENTION_PENDING, done.select("kind", "doc_id"))


def oldest_remaining(store: DeltaStore) -> datetime | None:
    if not store.exists(ROLE_ROWS):
        return None
    return store.scan(ROLE_ROWS).select(pl.col("ts").min()).collect().item()


def new_run_id(operation: str, started_at: datetime) -> str:
    return f"{operation}-{started_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def sweep(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    vacuum_hours: int | None = None,
) -> RetentionReport:
    """Run one retention sweep at `now` (default: the current time) and report it, holding the
    writer lease while Elasticsearch answers. Elasticsearch is asked through `failing_fast(es)`:
    after its first connection failure or timeout the sweep leaves its deletes pending."""
    es = failing_fast(es)
    with optional_writer_lease_for(es, settings, "retention"):
        return _sweep(store, es, settings, now=now, dry_run=dry_run, vacuum_hours=vacuum_hours)


def _sweep(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    *,
    now: datetime | None,
    dry_run: bool,
    vacuum_hours: int | None,
) -> RetentionReport:
    clock = time.perf_counter()
    started_at = datetime.now(UTC)
    cutoff = now or started_at
    interrupted = journal.open_runs(store, OPERATION)
    resumed = interrupted[0] if interrupted and not dry_run else None
    hours = settings.retention.vacuum_hours if vacuum_hours is None else vacuum_hours
    expired = find_expired(store, cutoff, settings)
    stragglers, es_error = _stragglers(es, settings.elasticsearch.index_prefix, cutoff)
    pending_now = expired.pending(stragglers)
    run_id = resumed.run_id if resumed else new_run_id(OPERATION, started_at)
    report = RetentionReport.begun(run_id, started_at, cutoff, dry_run, es_error)
    if dry_run:
        return _finish(store, _preview(store, settings, report, expired, pending_now, hours), clock)
    if resumed:
        log.info("retention: resuming %s", resumed.run_id)
    run = resumed or _journal_start(store, report, expired)
    record_pending(store, run.run_id, pending_now)
    _carry_out(store, es, settings, run, expired, report, hours)
    _finish(store, report, clock)
    for done in interrupted or [run]:
        journal.close(store, done.run_id)
    return report


def _preview(
    store: DeltaStore,
    settings: Settings,
    report: RetentionReport,
    expired: Expired,
    pending: dict[str, list[str]],
    hours: int,
) -> RetentionReport:
    """`report` as a dry run: what the sweep would delete, and nothing changed."""
    report.status = "dry_run"
    report.deleted_rows = dict(expired.counts)
    report.es_deleted = {kind: len(set(pending[kind])) for kind in (ROWS, TURNS)}
    report.vacuumed_files = vacuum_all(store, settings, hours, dry_run=True)
    report.landing = {"files_to_visit": len(expired.sources)}
    return report


def _journal_start(store: DeltaStore, report: RetentionReport, expired: Expired) -> JournalRun:
    """Open the journal run of a new sweep: its start, the purged tables' versions and the
    landing files to visit, so that a killed sweep is finished by the next."""
    header = {
        "started_at": report.started_at.isoformat(),
        "versions": journal.table_versions(store, PURGED_TABLES),
        "sources": expired.sources,
    }
    run = JournalRun(report.run_id, OPERATION, header)
    journal.start(store, run)
    return run


def _carry_out(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    run: JournalRun,
    expired: Expired,
    report: RetentionReport,
    hours: int,
) -> None:
    """Remove what expired from every store (landing files, Delta, Elasticsearch and storage
    folders, old table files, the archive) and fill `report` in."""
    landing = LandingSweep()
    sources = {*run.header.get("sources", []), *expired.sources}
    sweep_files(store, settings, sources, expired.cutoff, landing, run.run_id)
    expire_quarantined_files(store, settings, expired.cutoff, landing, run.run_id)
    purge_expired(store, expired, min(run.started_at, report.started_at), settings, run.run_id)
    finish_pending(store, es, settings, report)
    report.vacuumed_files = vacuum_all(store, settings, hours)
    report.oldest_remaining_ts = oldest_remaining(store)
    report.deleted_rows = deleted_by(store, PURGED_TABLES, run.run_id, run.versions)
    landing.archive_days_removed = expire_archive(settings, expired.cutoff)
    report.landing = landing.as_dict()
    report.state_files = maintain_state(store, settings)


def finish_pending(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, report: RetentionReport
) -> None:
    """Carry out every pending entry (this run's and any earlier run's) and clear what is done."""
    everything = read_pending(store)
    actionable = drop_live_ids(store, everything)
    result, report.files_removed, done = execute_pending(store, es, settings, actionable)
    live = everything.join(actionable, on=["kind", "doc_id"], how="anti").select("kind", "doc_id")
    clear_pending(store, pl.concat([done, live]))
    report.es_deleted = {
        kind: result.deleted.get(kind, 0) + result.missing.get(kind, 0) for kind in (ROWS, TURNS)
    }
    report.es_pending = read_pending(store).height
    report.error = result.error or report.error
    if report.es_pending:
        report.status = "es_pending"
        log.warning("%s: %d Elasticsearch ids left pending", report.run_id, report.es_pending)


def _stragglers(
    es: Elasticsearch | None, prefix: str, cutoff: datetime
) -> tuple[dict[str, list[str]], str | None]:
    if es is None:
        return {}, None
    try:
        return es_stragglers(es, prefix, cutoff), None
    except (TransportError, ApiError) as exc:
        log.warning("Elasticsearch unavailable for the straggler scan: %s", exc)
        return {}, f"{type(exc).__name__}: {exc}"


def _finish(store: DeltaStore, report: RetentionReport, clock: float) -> RetentionReport:
    report.finished_at = report.started_at + timedelta(seconds=time.perf_counter() - clock)
    write_report(store, report, "retention")
    log.info(
        "retention %s %s: deleted %s, es %s, pending %d",
        report.run_id,
        report.status,
        report.deleted_rows,
        report.es_deleted,
        report.es_pending,
    )
    return report


def write_report(store: DeltaStore, report: RetentionReport, operation: str) -> None:
    """Append the report row (merging in columns a table written by an older ctxdb lacks)."""
    row = pa.Table.from_pylist([report.as_row(operation)], schema=RETENTION_REPORT_SCHEMA)
    with store.guarded(RETENTION_REPORT):
        write_deltalake(
            store.uri(RETENTION_REPORT),
            row,
            mode="append",
            schema_mode="merge",
            storage_options=store.storage_options or None,
        )
