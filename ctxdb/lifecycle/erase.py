"""Erasure: remove every trace of one user or one conversation, then verify nothing remains.

Covers the landing files the events came from, raw and quarantined events, every derived table,
embedding statuses, embedding-cache vectors no remaining row references, Elasticsearch rows and
turns (every index version) and conversation file storage.

Order: record the Elasticsearch ids and storage paths in `retention_pending`, tombstone the
conversations in `purged_conversations` (derivation never re-derives them), scrub the landing
files, DELETE from Delta, then delete from Elasticsearch and storage, VACUUM and verify. Every step
is idempotent, so a killed erasure is finished by re-running it (or by the next retention sweep
for the pending Elasticsearch and storage work). The tombstone keeps identifiers only, no content;
the report row written to `retention_report` holds counts only, never the erased identifier.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import polars as pl
from elasticsearch import ApiError, Elasticsearch, TransportError
from pyarrow import fs as pafs

from ctxdb.index.lease import optional_writer_lease_for
from ctxdb.index.mappings import ROWS, TURNS, turn_doc_id
from ctxdb.lifecycle.purge import (
    columns_of,
    count_docs,
    delete_docs,
    delete_keys,
    path_exists,
    scan_ids,
    vacuum,
)
from ctxdb.lifecycle.retention import (
    FILES,
    RetentionReport,
    finish_pending,
    new_run_id,
    record_pending,
    write_report,
)
from ctxdb.settings import Settings
from ctxdb.storage import tombstones
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.files import conversation_file_path
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    DERIVE_FAILURES,
    EMBEDDINGS,
    INDEX_FAILURES,
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

# Tables holding a user's or a conversation's content (or errors about it).
CONTENT_TABLES = (
    RAW_TURN_EVENTS,
    QUARANTINED_EVENTS,
    TURN_LOGS,
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    TURN_CATALOG,
    REPLAY_ARTIFACTS,
    DERIVE_FAILURES,
    INDEX_FAILURES,
)
ERASED_TABLES = (*CONTENT_TABLES, ROW_EMBEDDINGS, EMBEDDINGS, RETENTION_PENDING)
IDENTITY = ["tenant", "app", "user_id", "conversation_id"]
QUARANTINE_KEY = ["source_file", "line_number"]


@dataclass(frozen=True)
class Scope:
    """What to erase: everything whose `column` (user_id or conversation_id) equals `value`."""

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

    def es_query(self) -> dict:
        return {"term": {self.column: self.value}}

    def _pattern(self) -> str:
        return rf'"{self.column}"\s*:\s*"{re.escape(self.value)}"'

    def in_raw_line(self) -> pl.Expr:
        """Matches a quarantined raw line that names this user or conversation."""
        return pl.col("raw_line").str.contains(self._pattern())

    def in_line(self, line: str) -> bool:
        """True when a landing-file line is an event of this user or conversation."""
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            return event.get(self.column) == self.value
        return re.search(self._pattern(), line) is not None


@dataclass(kw_only=True)
class EraseReport(RetentionReport):
    """What an erasure found, removed and verified (`remaining` all zero when verified); its
    `retention_report` row is the one a sweep writes, with operation `erase`."""

    scope: Scope
    found: bool
    landing_lines_removed: int = 0
    remaining: dict[str, int] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.found and self.status == "ok" and not any(self.remaining.values())

    @property
    def message(self) -> str:
        what = f"{self.scope.label} {self.scope.value!r}"
        if not self.found:
            return f"No data found for {what}; nothing to erase."
        if self.verified:
            return (
                f"Erased {what}: {sum(self.deleted_rows.values())} Delta rows, "
                f"{sum(self.es_deleted.values())} Elasticsearch documents, "
                f"{self.files_removed} storage folders, {self.landing_lines_removed} landing "
                "lines; verified zero remaining."
            )
        left = {k: v for k, v in self.remaining.items() if v}
        detail = f"; {self.error}" if self.error else ""
        return f"Erasure of {what} incomplete ({self.status}): remaining {left}{detail}"


def erase(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope
) -> EraseReport:
    """Erase `scope` everywhere, verify, and append a counts-only report row (holding the writer
    lease while Elasticsearch answers)."""
    with optional_writer_lease_for(es, settings, "erase"):
        return _erase(store, es, settings, scope)


def _erase(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope
) -> EraseReport:
    clock = time.perf_counter()
    started_at = datetime.now(UTC)
    run_id = new_run_id("erase", started_at)
    identities = _identities(store, scope)
    rows = _matching(store, ROLE_ROWS, scope, identities, ["row_id", "text_hash"])
    es_ids, es_error = _es_ids(
        es, settings.elasticsearch.index_prefix, scope, rows, _turn_keys(store, scope)
    )
    paths = [p for p in storage_paths(identities, scope) if path_exists(settings.files, p)]
    sources = _source_files(store, scope, identities)
    counts = {table: _count(store, table, scope, identities) for table in CONTENT_TABLES}
    landing = sum(_landing_lines(settings, sources, scope).values())
    found = bool(sum(counts.values()) or any(es_ids.values()) or paths or landing)
    report = EraseReport(
        scope=scope,
        run_id=run_id,
        found=found,
        status="ok",
        dry_run=False,
        cutoff=started_at,
        started_at=started_at,
        finished_at=started_at,
        error=es_error,
    )
    if not found:
        log.info("erase: nothing found for the %s", scope.label)
        report.status = "not_found"
        return report

    record_pending(store, run_id, {**es_ids, FILES: paths})
    tombstone(store, identities, started_at)
    report.landing_lines_removed = scrub_landing(settings, sources, scope)
    report.deleted_rows = _delete_delta(store, scope, identities, rows)
    report.error = None  # the pending deletes' own error comes first
    finish_pending(store, es, settings, report)
    late, late_error = _erase_late_docs(es, settings, scope)
    report.es_deleted = {k: report.es_deleted.get(k, 0) + late.get(k, 0) for k in (ROWS, TURNS)}
    report.error = report.error or late_error or es_error
    vacuum(store, ERASED_TABLES, settings.retention.erase_vacuum_hours, dry_run=False)
    report.remaining = verify(store, es, settings, scope, identities, rows, paths, sources)
    if report.es_pending or report.remaining.get("es_unreachable"):
        report.status = "es_pending"
    elif any(report.remaining.values()):
        report.status = "incomplete"
    report.finished_at = started_at + timedelta(seconds=time.perf_counter() - clock)
    write_report(store, report, "erase")
    log.info("erase %s: %s", run_id, report.status)
    return report


def verify(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    scope: Scope,
    identities: pl.DataFrame,
    rows: pl.DataFrame,
    paths: list[str],
    sources: list[str],
) -> dict[str, int]:
    """Rows, documents, storage folders and landing lines of `scope` still present."""
    remaining = {table: _count(store, table, scope, identities) for table in CONTENT_TABLES}
    remaining.update(_count_leftovers(store, rows))
    remaining["files"] = sum(path_exists(settings.files, p) for p in paths)
    remaining["landing_lines"] = sum(_landing_lines(settings, sources, scope).values())
    if es is None:
        remaining["es_unreachable"] = 1
        return remaining
    try:
        for kind in (ROWS, TURNS):
            remaining[f"es_{kind}"] = count_docs(
                es, settings.elasticsearch.index_prefix, kind, scope.es_query()
            )
    except (TransportError, ApiError) as exc:
        log.warning("erase: cannot verify Elasticsearch: %s", exc)
        remaining["es_unreachable"] = 1
    return remaining


def storage_paths(identities: pl.DataFrame, scope: Scope) -> list[str]:
    """Conversation-storage folders of `scope`: the user's namespaces or the conversation's."""
    if scope.column == "user_id":
        combos = identities.select("tenant", "app", "user_id").unique().iter_rows()
        return sorted(f"{t}/{a}/{u}" for t, a, u in combos)
    return sorted(conversation_file_path(*row) for row in identities.select(IDENTITY).iter_rows())


def tombstone(store: DeltaStore, identities: pl.DataFrame, at: datetime) -> int:
    """Record the erased conversations so late or replayed events are never derived again."""
    return tombstones.record(store, identities["conversation_id"], at)


def scrub_landing(settings: Settings, sources: list[str], scope: Scope) -> int:
    """Rewrite landing files (plain or gzip) without the lines of `scope`; returns lines removed.

    The rewritten file has a new size and mtime, so landing reads it again: every line left is
    already landed and counted as a duplicate, and the erased lines are gone for good.
    """
    removed = 0
    for source in sources:
        filesystem, path = _landing_file(settings, source)
        lines = _read_lines(filesystem, path)
        kept = [line for line in lines if not (line.strip() and scope.in_line(line))]
        if len(kept) == len(lines):
            continue
        data = "".join(kept).encode("utf-8")
        with filesystem.open_output_stream(path, compression=None) as out:
            out.write(gzip.compress(data) if path.endswith(".gz") else data)
        removed += len(lines) - len(kept)
    return removed


def _landing_lines(settings: Settings, sources: list[str], scope: Scope) -> dict[str, int]:
    counts: dict[str, int] = {}
    for source in sources:
        lines = _read_lines(*_landing_file(settings, source))
        counts[source] = sum(1 for line in lines if line.strip() and scope.in_line(line))
    return counts


def _read_lines(filesystem: pafs.FileSystem, path: str) -> list[str]:
    """The lines of a landing file ([] when it is gone), gunzipped when named *.gz."""
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        return []
    with filesystem.open_input_stream(path, compression=None) as stream:
        data = stream.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def _landing_file(settings: Settings, source: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a landed file (`source_file` as landing recorded it)."""
    if "://" in source:
        return pafs.FileSystem.from_uri(source)
    root = settings.landing_uri
    if "://" not in root:
        local = Path(source) if Path(source).is_absolute() else Path(root).resolve() / source
        return pafs.LocalFileSystem(), str(local)
    filesystem, base = pafs.FileSystem.from_uri(root)
    base = base.rstrip("/")
    return filesystem, source if source.startswith(base + "/") else f"{base}/{source}"


def _source_files(store: DeltaStore, scope: Scope, identities: pl.DataFrame) -> list[str]:
    frames = [
        _matching(store, table, scope, identities, ["source_file"])
        for table in (RAW_TURN_EVENTS, QUARANTINED_EVENTS)
    ]
    return sorted(set(pl.concat(frames)["source_file"].to_list()))


def _identities(store: DeltaStore, scope: Scope) -> pl.DataFrame:
    """Every (tenant, app, user_id, conversation_id) of `scope` found in any content table."""
    frames = [
        store.scan(table).filter(pl.col(scope.column) == scope.value).select(IDENTITY).collect()
        for table in CONTENT_TABLES
        if set(IDENTITY) <= set(columns_of(store, table))
    ]
    if not frames:
        return pl.DataFrame(schema=dict.fromkeys(IDENTITY, pl.String))
    return pl.concat(frames).unique()


def _filter(
    store: DeltaStore, table: str, scope: Scope, identities: pl.DataFrame
) -> pl.Expr | None:
    """The predicate selecting `scope`'s rows of `table` (None when the table cannot hold any).

    Quarantined lines have no user column: they match by conversation id or by raw line text.
    """
    columns = columns_of(store, table)
    if table == QUARANTINED_EVENTS and "raw_line" in columns:
        conversations = identities["conversation_id"].unique().to_list()
        return scope.in_raw_line() | pl.col("conversation_id").is_in(conversations).fill_null(False)
    if scope.column in columns:
        return pl.col(scope.column) == scope.value
    return None


def _matching(
    store: DeltaStore, table: str, scope: Scope, identities: pl.DataFrame, columns: list[str]
) -> pl.DataFrame:
    predicate = _filter(store, table, scope, identities)
    if predicate is None or not set(columns) <= set(columns_of(store, table)):
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.String))
    return store.scan(table).filter(predicate).select(columns).collect()


def _count(store: DeltaStore, table: str, scope: Scope, identities: pl.DataFrame) -> int:
    predicate = _filter(store, table, scope, identities)
    if predicate is None:
        return 0
    return int(store.scan(table).filter(predicate).select(pl.len()).collect().item())


def _count_leftovers(store: DeltaStore, rows: pl.DataFrame) -> dict[str, int]:
    """Embedding statuses and cached vectors of the erased rows still present."""
    statuses = (
        store.scan(ROW_EMBEDDINGS)
        .filter(pl.col("row_id").is_in(rows["row_id"].implode()))
        .select(pl.len())
        .collect()
        .item()
        if store.exists(ROW_EMBEDDINGS)
        else 0
    )
    vectors = 0
    if store.exists(EMBEDDINGS):
        erased = pl.DataFrame({"text_hash": rows["text_hash"].unique()})
        if store.exists(ROLE_ROWS):
            still_used = store.scan(ROLE_ROWS).select("text_hash").unique().collect()
            erased = erased.join(still_used, on="text_hash", how="anti")
        vectors = (
            store.scan(EMBEDDINGS)
            .select("text_hash")
            .collect()
            .join(erased, on="text_hash", how="semi")
            .height
        )
    return {ROW_EMBEDDINGS: int(statuses), EMBEDDINGS: int(vectors)}


def _turn_keys(store: DeltaStore, scope: Scope) -> pl.DataFrame:
    frames = [
        store.scan(table)
        .filter(pl.col(scope.column) == scope.value)
        .select("conversation_id", "turn_id")
        .collect()
        for table in (TURN_LOGS, ROLE_ROWS, TURN_CATALOG, RAW_TURN_EVENTS)
        if {scope.column, "turn_id"} <= set(columns_of(store, table))
    ]
    if not frames:
        return pl.DataFrame(schema={"conversation_id": pl.String, "turn_id": pl.String})
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


def _delete_delta(
    store: DeltaStore, scope: Scope, identities: pl.DataFrame, rows: pl.DataFrame
) -> dict[str, int]:
    deleted: dict[str, int] = {}
    for table in CONTENT_TABLES:
        if table == QUARANTINED_EVENTS:
            keys = _matching(store, table, scope, identities, QUARANTINE_KEY)
            deleted[table] = delete_keys(store, table, keys)
        elif scope.column in columns_of(store, table):
            literal = "'" + scope.value.replace("'", "''") + "'"
            deleted[table] = store.delete(table, f"{scope.column} = {literal}")
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
        store.scan(EMBEDDINGS)
        .select("model_id", "text_hash")
        .collect()
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
            kind: scan_ids(es, settings.elasticsearch.index_prefix, kind, scope.es_query())
            for kind in (ROWS, TURNS)
        }
    except (TransportError, ApiError) as exc:
        return {}, f"{type(exc).__name__}: {exc}"
    if not any(ids.values()):
        return {}, None
    result = delete_docs(es, settings.elasticsearch.index_prefix, ids)
    return result.deleted, result.error
