"""Erasure: remove every trace of one user or one conversation, then verify nothing remains.

Covers raw and quarantined events, every derived table, embedding statuses, embedding-cache
vectors no remaining row references, Elasticsearch rows and turns (every index version) and
conversation file storage. Work is recorded in `retention_pending` before Delta is touched, so a
killed erasure is finished by the next erasure or retention sweep. The report row written to
`retention_report` holds counts only, never the erased identifier.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

import polars as pl
from elasticsearch import ApiError, Elasticsearch, TransportError

from ctxdb.delta import DeltaStore
from ctxdb.es.mappings import ROWS, TURNS, turn_doc_id
from ctxdb.purge import (
    columns_of,
    count_docs,
    delete_docs,
    delete_keys,
    path_exists,
    scan_ids,
    vacuum,
)
from ctxdb.retention import (
    FILES,
    RetentionReport,
    finish_pending,
    new_run_id,
    record_pending,
    write_report,
)
from ctxdb.settings import Settings
from ctxdb.tables import (
    CONVERSATION_TIMELINES,
    EMBEDDINGS,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    RETENTION_PENDING,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_CATALOG,
    TURN_LOGS,
)

log = logging.getLogger(__name__)

# Tables holding a user's or a conversation's content, filtered by the identity column itself.
SCOPED_TABLES = (
    RAW_TURN_EVENTS,
    QUARANTINED_EVENTS,
    TURN_LOGS,
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    TURN_CATALOG,
    REPLAY_ARTIFACTS,
)
ERASED_TABLES = (*SCOPED_TABLES, ROW_EMBEDDINGS, EMBEDDINGS, RETENTION_PENDING)


@dataclass(frozen=True)
class Scope:
    """What to erase: every row whose `column` (user_id or conversation_id) equals `value`."""

    column: Literal["user_id", "conversation_id"]
    value: str

    def __post_init__(self) -> None:
        if self.column not in ("user_id", "conversation_id"):
            raise ValueError(f"cannot erase by {self.column!r}: use user_id or conversation_id")
        if not self.value or not self.value.strip():
            raise ValueError(f"an erasure needs a non-empty {self.column}")

    @property
    def label(self) -> str:
        return "user" if self.column == "user_id" else "conversation"

    def sql(self) -> str:
        return f"{self.column} = '" + self.value.replace("'", "''") + "'"

    def es_query(self) -> dict:
        return {"term": {self.column: self.value}}


@dataclass
class EraseReport:
    """What an erasure found, removed and verified (`remaining` all zero when verified)."""

    scope: Scope
    run_id: str
    found: bool
    status: str
    deleted_rows: dict[str, int] = field(default_factory=dict)
    es_deleted: dict[str, int] = field(default_factory=dict)
    files_removed: int = 0
    remaining: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    duration_s: float = 0.0

    @property
    def verified(self) -> bool:
        return self.found and not any(self.remaining.values()) and self.status == "ok"

    @property
    def message(self) -> str:
        if not self.found:
            return f"No data found for {self.scope.label} {self.scope.value!r}; nothing erased."
        if self.verified:
            total = sum(self.deleted_rows.values())
            return (
                f"Erased {self.scope.label} {self.scope.value!r}: {total} Delta rows, "
                f"{sum(self.es_deleted.values())} Elasticsearch documents, "
                f"{self.files_removed} storage paths; verified zero remaining."
            )
        left = {k: v for k, v in self.remaining.items() if v}
        return (
            f"Erasure of {self.scope.label} {self.scope.value!r} incomplete ({self.status}): "
            f"remaining {left}; {self.error or ''}".rstrip("; ")
        )


def erase(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope
) -> EraseReport:
    """Erase `scope` everywhere, verify, and append a counts-only report row."""
    clock = time.perf_counter()
    started_at = datetime.now(UTC)
    run_id = new_run_id("erase", started_at)
    rows = _scoped(store, ROLE_ROWS, scope, ["row_id", "text_hash"])
    turns = _turn_keys(store, scope)
    es_ids, es_error = _es_ids(es, settings.index_prefix, scope, rows, turns)
    paths = [p for p in storage_paths(store, scope) if path_exists(settings.files, p)]
    counts = {table: _count(store, table, scope) for table in SCOPED_TABLES}
    found = bool(sum(counts.values()) or any(es_ids.values()) or paths)
    report = EraseReport(scope=scope, run_id=run_id, found=found, status="ok", error=es_error)
    if not found:
        log.info("erase: nothing found for %s", scope.label)
        report.status = "not_found"
        return report

    record_pending(store, run_id, {**es_ids, FILES: paths})
    report.deleted_rows = _delete_delta(store, scope, rows)
    summary = RetentionReport(
        run_id=run_id, status="ok", dry_run=False, cutoff=started_at,
        started_at=started_at, finished_at=started_at,
    )
    finish_pending(store, es, settings, summary)
    late, late_error = _erase_late_docs(es, settings, scope)
    report.es_deleted = {k: summary.es_deleted.get(k, 0) + late.get(k, 0) for k in (ROWS, TURNS)}
    report.files_removed = summary.files_removed
    report.error = summary.error or late_error or es_error
    vacuum(store, ERASED_TABLES, settings.erase_vacuum_hours, dry_run=False)
    report.remaining = verify(store, es, settings, scope, paths)
    if summary.es_pending or report.remaining.get("es_unreachable"):
        report.status = "es_pending"
    elif any(report.remaining.values()):
        report.status = "incomplete"
    report.duration_s = time.perf_counter() - clock
    summary.status = report.status
    summary.deleted_rows = report.deleted_rows
    summary.es_deleted = report.es_deleted
    summary.finished_at = started_at + timedelta(seconds=report.duration_s)
    summary.error = report.error
    write_report(store, summary, "erase")
    log.info("erase %s: %s", run_id, report.status)
    return report


def verify(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    scope: Scope,
    paths: list[str],
) -> dict[str, int]:
    """Rows, documents and storage paths of `scope` still present (all zero once erased)."""
    remaining = {table: _count(store, table, scope) for table in SCOPED_TABLES}
    remaining["files"] = sum(path_exists(settings.files, p) for p in paths)
    if es is None:
        remaining["es_unreachable"] = 1
        return remaining
    try:
        for kind in (ROWS, TURNS):
            remaining[f"es_{kind}"] = count_docs(es, settings.index_prefix, kind, scope.es_query())
    except (TransportError, ApiError) as exc:
        log.warning("erase: cannot verify Elasticsearch: %s", exc)
        remaining["es_unreachable"] = 1
    return remaining


def storage_paths(store: DeltaStore, scope: Scope) -> list[str]:
    """Conversation-storage directories of `scope` (a user's namespace or conversation folders)."""
    identities = _identities(store, scope)
    if identities.is_empty():
        return []
    if scope.column == "user_id":
        combos = identities.select("tenant", "app", "user_id").unique().iter_rows()
        return sorted(f"{t}/{a}/{u}" for t, a, u in combos)
    return sorted(
        f"{t}/{a}/{u}/conv_{c}"
        for t, a, u, c in identities.unique().iter_rows()
    )


def _identities(store: DeltaStore, scope: Scope) -> pl.DataFrame:
    wanted = ["tenant", "app", "user_id", "conversation_id"]
    frames = [
        _scoped(store, table, scope, wanted)
        for table in SCOPED_TABLES
        if set(wanted) <= set(columns_of(store, table))
    ]
    if not frames:
        return pl.DataFrame(schema=dict.fromkeys(wanted, pl.String))
    return pl.concat(frames).unique()


def _scoped(store: DeltaStore, table: str, scope: Scope, columns: list[str]) -> pl.DataFrame:
    present = columns_of(store, table)
    if scope.column not in present or not set(columns) <= set(present):
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.String))
    return store.scan(table).filter(pl.col(scope.column) == scope.value).select(columns).collect()


def _count(store: DeltaStore, table: str, scope: Scope) -> int:
    if scope.column not in columns_of(store, table):
        return 0
    matching = store.scan(table).filter(pl.col(scope.column) == scope.value)
    return int(matching.select(pl.len()).collect().item())


def _turn_keys(store: DeltaStore, scope: Scope) -> pl.DataFrame:
    frames = [
        _scoped(store, table, scope, ["conversation_id", "turn_id"])
        for table in (TURN_LOGS, ROLE_ROWS, TURN_CATALOG, CONVERSATION_TIMELINES)
    ]
    return pl.concat(frames).unique()


def _es_ids(
    es: Elasticsearch | None, prefix: str, scope: Scope, rows: pl.DataFrame, turns: pl.DataFrame
) -> tuple[dict[str, list[str]], str | None]:
    ids = {
        ROWS: rows["row_id"].to_list(),
        TURNS: [turn_doc_id(c, t) for c, t in turns.iter_rows()],
    }
    if es is None:
        return ids, "no Elasticsearch client"
    try:
        for kind in (ROWS, TURNS):
            found = scan_ids(es, prefix, kind, scope.es_query())
            ids[kind] = list(dict.fromkeys([*ids[kind], *found]))
    except (TransportError, ApiError) as exc:
        return ids, f"{type(exc).__name__}: {exc}"
    return ids, None


def _delete_delta(store: DeltaStore, scope: Scope, rows: pl.DataFrame) -> dict[str, int]:
    deleted = {
        table: store.delete(table, scope.sql())
        for table in SCOPED_TABLES
        if scope.column in columns_of(store, table)
    }
    deleted[ROW_EMBEDDINGS] = delete_keys(store, ROW_EMBEDDINGS, rows.select("row_id"))
    deleted[EMBEDDINGS] = _drop_unreferenced_vectors(store, rows["text_hash"])
    return deleted


def _drop_unreferenced_vectors(store: DeltaStore, hashes: pl.Series) -> int:
    """Delete cached vectors of the erased texts unless a remaining row has the same text."""
    if hashes.is_empty() or not store.exists(EMBEDDINGS):
        return 0
    erased = pl.DataFrame({"text_hash": hashes.unique()})
    if store.exists(ROLE_ROWS):
        still_used = store.scan(ROLE_ROWS).select("text_hash").unique().collect()
        erased = erased.join(still_used, on="text_hash", how="anti")
    cached = (
        store.scan(EMBEDDINGS).select("model_id", "text_hash").collect()
        .join(erased, on="text_hash", how="semi")
    )
    return delete_keys(store, EMBEDDINGS, cached)


def _erase_late_docs(
    es: Elasticsearch | None, settings: Settings, scope: Scope
) -> tuple[dict[str, int], str | None]:
    """Delete documents of `scope` an indexer wrote while the erasure ran (a second pass)."""
    if es is None:
        return {}, None
    try:
        ids = {
            kind: scan_ids(es, settings.index_prefix, kind, scope.es_query())
            for kind in (ROWS, TURNS)
        }
    except (TransportError, ApiError) as exc:
        return {}, f"{type(exc).__name__}: {exc}"
    if not any(ids.values()):
        return {}, None
    result = delete_docs(es, settings.index_prefix, ids)
    return result.deleted, result.error
