"""Erasure: remove every trace of one user or one conversation of one tenant, then verify that
nothing remains, in the current tables and in every older version of them.

Covers the landing files the events came from, raw and quarantined events, every derived table
(and the failure tables naming it), embedding statuses, embedding-cache vectors no remaining row
references, Elasticsearch rows and turns (every index version) and conversation file storage.

The scope is the full identity (`ctxdb.lifecycle.scope`): a user id found in several tenants is
refused unless the tenant is named. Order, every step idempotent:

1. plan: the identities, role rows (ids and text hashes), the vectors only those rows use, the
   landing files, Elasticsearch ids and storage paths of the scope; record the plan in
   `lifecycle_journal` (one commit) and the Elasticsearch ids and paths in `retention_pending`;
2. tombstone the conversations in `purged_conversations` (derivation never re-derives them),
   rewrite the landing files, DELETE from Delta (each commit tagged with the run id), delete from
   Elasticsearch and storage;
3. VACUUM, then delete every file no current row lives in that still holds an erased row (older
   versions, change data): no table version can return the erased rows;
4. verify, report (deleted counts read from the tables' history, so a resumed run counts what an
   interrupted attempt removed), close the journal.

A killed erasure is finished by running it again: the open journal entry is found by its scope,
and the plan is read from it rather than from the tables the first attempt already emptied. The
tombstone keeps hashes only; the report row holds counts only, never the erased identifier.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from elasticsearch import ApiError, Elasticsearch, TransportError

from ctxdb.coordination.lease import optional_writer_lease_for
from ctxdb.index.bulk import bulk_options
from ctxdb.index.client import failing_fast
from ctxdb.index.mappings import ROWS, TURNS, turn_doc_id
from ctxdb.lifecycle import history, journal, landing_lines
from ctxdb.lifecycle.journal import JournalRun
from ctxdb.lifecycle.purge import (
    columns_of,
    count_docs,
    delete_docs,
    delete_keys,
    delete_where,
    deleted_by,
    existing_paths,
    scan_ids,
    scan_sources,
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
from ctxdb.lifecycle.scope import OWNER, AmbiguousScope, Scope, resolve
from ctxdb.pack.snapshot import remove_user, user_snapshots
from ctxdb.settings import Settings
from ctxdb.storage import tombstones
from ctxdb.storage.conversation_files import conversation_file_path
from ctxdb.storage.delta import DeltaStore
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

__all__ = ["AmbiguousScope", "EraseReport", "Scope", "erase"]

log = logging.getLogger(__name__)

OPERATION = "erase"
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
DELETED_TABLES = (*CONTENT_TABLES, ROW_EMBEDDINGS, EMBEDDINGS)
ERASED_TABLES = (*DELETED_TABLES, RETENTION_PENDING)
QUARANTINE_KEY = ["source_file", "line_number"]
HISTORY = "history_files"
PACKS = "pack_snapshots"
ES_UNREACHABLE = "es_unreachable"


@dataclass
class Plan:
    """What one erasure removes, as recorded in the journal before anything is removed."""

    run_id: str
    scope: Scope
    started_at: datetime
    versions: dict[str, int | None]
    identities: pl.DataFrame  # OWNER columns
    rows: pl.DataFrame  # row_id, text_hash
    vectors: list[str]  # text hashes only this scope's rows use
    sources: list[str]  # landing files
    pending: dict[str, list[str]]  # Elasticsearch ids (rows, turns) and storage paths (files)
    planned: dict[str, int] = field(default_factory=dict)  # landing lines, storage folders
    resumed: bool = False

    @property
    def conversations(self) -> list[str]:
        return self.identities["conversation_id"].unique().to_list()

    def header(self) -> dict:
        return {
            "scope": self.scope.as_json(),
            "started_at": self.started_at.isoformat(),
            "versions": self.versions,
            "planned": self.planned,
        }

    def entries(self) -> pl.DataFrame:
        """The journal entries (kind, key, value) of this plan."""
        parts = [
            self.rows.select(kind=pl.lit("row"), key="row_id", value="text_hash"),
            pl.DataFrame({"kind": "vector", "key": self.vectors, "value": None}),
            pl.DataFrame(
                {
                    "kind": "identity",
                    "key": [json.dumps(row) for row in self.identities.select(OWNER).rows()],
                    "value": None,
                }
            ),
            pl.DataFrame({"kind": "source", "key": self.sources, "value": None}),
        ]
        parts += [
            pl.DataFrame({"kind": "pending", "key": ids, "value": kind})
            for kind, ids in self.pending.items()
        ]
        schema = journal.ENTRY_SCHEMA
        return pl.concat([part.cast(schema) for part in parts if part.height]).select(*schema)

    @classmethod
    def from_journal(cls, store: DeltaStore, run: JournalRun) -> Plan:
        """The plan an earlier attempt recorded."""

        def kind(name: str) -> pl.DataFrame:
            return journal.entries(store, run.run_id, name)

        identities = [json.loads(key) for key in kind("identity")["key"]]
        pending = kind("pending")
        return cls(
            run_id=run.run_id,
            scope=Scope.from_json(run.header["scope"]),
            started_at=run.started_at,
            versions=run.versions,
            identities=pl.DataFrame(identities, schema=OWNER, orient="row"),
            rows=kind("row").select(row_id="key", text_hash="value"),
            vectors=kind("vector")["key"].to_list(),
            sources=sorted(kind("source")["key"].to_list()),
            pending={
                k: pending.filter(pl.col("value") == k)["key"].to_list()
                for k in (ROWS, TURNS, FILES)
            },
            planned=run.header.get("planned", {}),
            resumed=True,
        )


@dataclass(kw_only=True)
class EraseReport(RetentionReport):
    """What an erasure found, removed and verified (`remaining` all zero when verified: in the
    current tables and in every older version); its `retention_report` row is the one a sweep
    writes, with operation `erase`. A dry run fills `found_counts` and changes nothing."""

    scope: Scope
    found: bool
    resumed: bool = False
    landing_lines_removed: int = 0
    found_counts: dict[str, int] = field(default_factory=dict)
    remaining: dict[str, int] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.found and self.status == "ok" and not any(self.remaining.values())

    @property
    def message(self) -> str:
        what = self.scope.describe()
        if self.dry_run:
            return _dry_run_message(what, self.found_counts)
        if not self.found:
            return f"No data found for {what}; nothing to erase."
        resumed = " (resumed)" if self.resumed else ""
        if self.verified:
            old = sum(self.vacuumed_files.values())
            return (
                f"Erased {what}{resumed}: {sum(self.deleted_rows.values())} Delta rows, "
                f"{sum(self.es_deleted.values())} Elasticsearch documents, "
                f"{self.files_removed} storage folders, {self.landing_lines_removed} landing "
                f"lines; verified zero remaining, and no table version holds them ({old} old "
                "files deleted)."
            )
        left = {k: v for k, v in self.remaining.items() if v}
        detail = f"; {self.error}" if self.error else ""
        return f"Erasure of {what}{resumed} incomplete ({self.status}): remaining {left}{detail}"


def erase(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    scope: Scope,
    *,
    dry_run: bool = False,
) -> EraseReport:
    """Erase `scope` everywhere, verify, and append a counts-only report row (holding the writer
    lease while Elasticsearch answers). A dry run reports what would go, per store, and changes
    nothing. AmbiguousScope when the id exists in several tenants and none was named.

    Elasticsearch is asked through `failing_fast(es)`: after its first connection failure or
    timeout the run asks it nothing more and leaves its deletes pending for the next sweep."""
    es = failing_fast(es)
    if dry_run:
        return _erase(store, es, settings, scope, dry_run=True)
    with optional_writer_lease_for(es, settings, "erase"):
        return _erase(store, es, settings, scope, dry_run=False)


def _erase(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope, dry_run: bool
) -> EraseReport:
    clock = time.perf_counter()
    started_at = datetime.now(UTC)
    plan, es_error = _plan(store, es, settings, scope, started_at)
    found = survey(store, es, settings, plan)
    report = EraseReport.begun(
        plan.run_id,
        started_at,
        started_at,
        dry_run,
        es_error,
        scope=plan.scope,
        found=plan.resumed or any(v for k, v in found.items() if k != ES_UNREACHABLE),
        resumed=plan.resumed,
        found_counts=found,
    )
    if dry_run:
        report.status = "dry_run"
        return report
    if not report.found:
        log.info("erase: nothing found for the %s", plan.scope.label)
        report.status = "not_found"
        return report
    if not plan.resumed:
        plan.planned = {"landing_lines": found["landing_lines"], "files": found["files"]}
        journal.start(store, JournalRun(plan.run_id, OPERATION, plan.header()), plan.entries())
    _remove(store, es, settings, plan, report)
    report.remaining = verify(store, es, settings, plan)
    if report.es_pending or report.remaining.get(ES_UNREACHABLE):
        report.status = "es_pending"
    elif any(report.remaining.values()):
        report.status = "incomplete"
    report.deleted_rows = deleted_by(store, DELETED_TABLES, plan.run_id, plan.versions)
    report.finished_at = started_at + timedelta(seconds=time.perf_counter() - clock)
    write_report(store, report, OPERATION)
    if not any(v for k, v in report.remaining.items() if not k.startswith("es_")):
        journal.close(store, plan.run_id)
    log.info("erase %s: %s", plan.run_id, report.status)
    return report


def _remove(
    store: DeltaStore,
    es: Elasticsearch | None,
    settings: Settings,
    plan: Plan,
    report: EraseReport,
) -> None:
    """Every removal step of `plan`, in order (each idempotent); fills `report`."""
    record_pending(store, plan.run_id, plan.pending)
    tombstones.record(store, plan.identities["conversation_id"], plan.started_at)
    removed_lines = landing_lines.scrub(settings, plan.sources, plan.scope)
    _delete_delta(store, plan)
    _remove_snapshots(settings, plan)  # a pack snapshot of the user may tell erased turns
    es_error, report.error = report.error, None  # the pending deletes' own error comes first
    finish_pending(store, es, settings, report)
    late, late_error = _erase_late_docs(es, settings, plan.scope)
    report.es_deleted = {k: report.es_deleted.get(k, 0) + late.get(k, 0) for k in (ROWS, TURNS)}
    report.error = report.error or late_error or es_error
    vacuumed = vacuum(store, ERASED_TABLES, settings.retention.erase_vacuum_hours, dry_run=False)
    scrubbed = {
        table: history.scrub(store, table, predicate)
        for table, predicate in _history_predicates(store, plan).items()
    }
    report.vacuumed_files = {t: vacuumed.get(t, 0) + scrubbed.get(t, 0) for t in vacuumed}
    left = landing_lines.count(settings, plan.sources, plan.scope)
    planned_lines = plan.planned.get("landing_lines", 0)
    report.landing_lines_removed = max(removed_lines, planned_lines - sum(left.values()))
    report.files_removed = max(report.files_removed, plan.planned.get("files", 0))
    _remove_snapshots(settings, plan)  # again: one written from a read before the deletes


def _plan(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope, at: datetime
) -> tuple[Plan, str | None]:
    """The open plan of this scope (a killed earlier attempt), or a new one; AmbiguousScope
    when the scope matches several tenants."""
    unfinished = [
        run
        for run in journal.open_runs(store, OPERATION)
        if scope.narrows(Scope.from_json(run.header["scope"]))
    ]
    if len(unfinished) > 1:
        owners = pl.DataFrame(
            [Scope.from_json(r.header["scope"]).as_json() for r in unfinished]
        ).select("tenant", app=pl.col("app").fill_null("*"))
        raise AmbiguousScope(scope, owners)
    if unfinished:
        log.info("erase: resuming %s", unfinished[0].run_id)
        return Plan.from_journal(store, unfinished[0]), None
    owners, es_error = _owners(store, es, settings, scope)
    scope = _with_owner(store, resolve(scope, owners))
    identities = owners.filter(scope.expr()) if scope.tenant else owners.clear()
    rows = _scan(store, ROLE_ROWS, scope.expr(), ["row_id", "text_hash"])
    plan = Plan(
        run_id=new_run_id(OPERATION, at),
        scope=scope,
        started_at=at,
        versions=journal.table_versions(store, DELETED_TABLES),
        identities=identities,
        rows=rows,
        vectors=_vectors_only_of(store, scope, rows),
        sources=[],
        pending={},
    )
    plan.sources = _source_files(store, plan)
    ids, ids_error = _es_ids(store, es, settings.elasticsearch.index_prefix, plan)
    paths = existing_paths(settings.files, storage_paths(plan), settings.object_store_options)
    plan.pending = {**ids, FILES: paths}
    return plan, es_error or ids_error


def survey(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, plan: Plan
) -> dict[str, int]:
    """What of `plan` is present now, per store: rows per Delta table, embedding statuses and
    cached vectors, storage folders, landing lines and Elasticsearch documents."""
    counts = {table: _count(store, table, plan) for table in DELETED_TABLES}
    files = plan.pending.get(FILES, [])
    counts["files"] = len(existing_paths(settings.files, files, settings.object_store_options))
    counts["landing_lines"] = sum(landing_lines.count(settings, plan.sources, plan.scope).values())
    owners = _snapshot_owners(settings, plan)
    counts[PACKS] = sum(user_snapshots(packs, tenant, user) for packs, tenant, user in owners)
    if es is None:
        counts[ES_UNREACHABLE] = 1
        return counts
    try:
        for kind in (ROWS, TURNS):
            counts[f"es_{kind}"] = count_docs(
                es, settings.elasticsearch.index_prefix, kind, plan.scope.es_query()
            )
    except (TransportError, ApiError) as exc:
        log.warning("erase: cannot count in Elasticsearch: %s", exc)
        counts[ES_UNREACHABLE] = 1
    return counts


def verify(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, plan: Plan
) -> dict[str, int]:
    """Everything of `plan` still present, including files of older table versions holding an
    erased row (`history_files`)."""
    remaining = survey(store, es, settings, plan)
    remaining[HISTORY] = sum(
        len(history.holding(store, table, predicate))
        for table, predicate in _history_predicates(store, plan).items()
    )
    return remaining


def _snapshot_owners(settings: Settings, plan: Plan) -> list[tuple[Path, str | None, str]]:
    """Where each user of `plan` may have pack snapshots (none off a local folder): under the
    rows' tenant, and under no tenant (a principal without one, where tenants are optional)."""
    packs = settings.packs_path
    if packs is None:
        return []
    owners = plan.identities.select("tenant", "user_id").unique().sort("tenant", "user_id")
    users = sorted(set(plan.identities["user_id"]))
    return [(packs, tenant, user_id) for tenant, user_id in owners.iter_rows()] + [
        (packs, None, user_id) for user_id in users
    ]


def _remove_snapshots(settings: Settings, plan: Plan) -> None:
    for packs, tenant, user_id in _snapshot_owners(settings, plan):
        remove_user(packs, tenant, user_id)


def storage_paths(plan: Plan) -> list[str]:
    """Conversation-storage folders of the plan: the user's namespaces or the conversation's."""
    if plan.scope.column == "user_id":
        combos = plan.identities.select("tenant", "app", "user_id").unique().iter_rows()
        return sorted(f"{t}/{a}/{u}" for t, a, u in combos)
    rows = plan.identities.select(OWNER).unique().iter_rows()
    return sorted(conversation_file_path(t, a, u, c) for t, a, u, c in rows)


def _landed_owners(store: DeltaStore, scope: Scope) -> list[pl.DataFrame]:
    """The (tenant, app, user_id, conversation_id) of `scope`'s rows in the content tables."""
    return [
        store.scan(table).filter(scope.expr()).select(OWNER).collect()
        for table in CONTENT_TABLES
        if set(OWNER) <= set(columns_of(store, table))
    ]


def _with_owner(store: DeltaStore, scope: Scope) -> Scope:
    """A conversation scope with its owner named: the one user whose rows landed under that id
    in the scope's tenant. Another user's lines that name the same id (quarantined as not theirs)
    are then left to that user. Without exactly one landed owner the scope stays as it was."""
    if scope.column != "conversation_id" or scope.owner is not None or scope.tenant is None:
        return scope
    empty = pl.DataFrame(schema=dict.fromkeys(OWNER, pl.String))
    landed = pl.concat([empty, *(f.cast(pl.String) for f in _landed_owners(store, scope))])
    users = landed["user_id"].drop_nulls().unique().to_list()
    return scope.with_owner(users[0]) if len(users) == 1 else scope


def _owners(
    store: DeltaStore, es: Elasticsearch | None, settings: Settings, scope: Scope
) -> tuple[pl.DataFrame, str | None]:
    """Every (tenant, app, user_id, conversation_id) where `scope`'s value is found: in the
    content tables, in quarantined lines that name their tenant, and in Elasticsearch."""
    frames = _landed_owners(store, scope)
    if "raw_line" in columns_of(store, QUARANTINED_EVENTS):
        lines = (
            store.scan(QUARANTINED_EVENTS)
            .filter(scope.in_raw_line())
            .select("raw_line", "conversation_id")
            .collect()
        )
        owners = pl.DataFrame(
            [_line_owner(raw) for raw in lines["raw_line"]],
            schema=dict.fromkeys(("tenant", "app", "user_id"), pl.String),
            orient="row",
        )
        frames.append(
            owners.with_columns(conversation_id=lines["conversation_id"]).filter(
                pl.col("tenant").is_not_null()
            )
        )
    error = None
    if es is not None:
        try:
            for kind in (ROWS, TURNS):
                prefix = settings.elasticsearch.index_prefix
                frames.append(scan_sources(es, prefix, kind, scope.es_query(), OWNER))
        except (TransportError, ApiError) as exc:
            error = f"{type(exc).__name__}: {exc}"
    schema = pl.Schema(dict.fromkeys(OWNER, pl.String))
    found = [frame.cast(schema) for frame in frames]
    return pl.concat([pl.DataFrame(schema=schema), *found]).unique(), error


_OWNER_FIELD = {name: re.compile(rf'"{name}"\s*:\s*"((?:[^"\\]|\\.)*)"') for name in OWNER[:3]}


def _line_owner(raw: str | None) -> tuple[str | None, str | None, str | None]:
    """(tenant, app, user_id) a quarantined line names. Python's parser reads lines polars'
    JSON path cannot (integers beyond 64 bits, NaN); a line no parser takes is read by its
    `"field": "value"` pairs, so erasure still finds the owner of any line it will delete."""
    if raw is None:
        return None, None, None
    try:
        event = json.loads(raw)
    except ValueError:
        event = None
    if isinstance(event, dict):
        return tuple(  # type: ignore[return-value]
            value if isinstance(value := event.get(name), str) else None for name in OWNER[:3]
        )
    found = [pattern.search(raw) for pattern in _OWNER_FIELD.values()]
    return tuple(_unescaped(match.group(1)) if match else None for match in found)  # type: ignore[return-value]


def _unescaped(value: str) -> str:
    """A JSON string's content decoded, or as written when its escapes are not valid JSON."""
    try:
        return json.loads(f'"{value}"')
    except ValueError:
        return value


def _scan(store: DeltaStore, table: str, predicate: pl.Expr, columns: list[str]) -> pl.DataFrame:
    if not set(columns) | set(predicate.meta.root_names()) <= set(columns_of(store, table)):
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.String))
    return store.scan(table).filter(predicate).select(columns).collect()


def _predicate(store: DeltaStore, table: str, plan: Plan) -> pl.Expr | None:
    """The predicate selecting the plan's rows of `table` (None when the table cannot hold any).

    Quarantined lines have no owner columns: they match by conversation id or by the raw line
    naming the scope. A table without tenant or app columns matches by the conversations found.
    """
    columns = columns_of(store, table)
    if not columns:
        return None
    conversations = pl.col("conversation_id").is_in(plan.conversations)
    if table == QUARANTINED_EVENTS:
        return plan.scope.in_raw_line() | (conversations.fill_null(False) & plan.scope.in_context())
    if table == ROW_EMBEDDINGS:
        return pl.col("row_id").is_in(plan.rows["row_id"].to_list())
    if table == EMBEDDINGS:
        return pl.col("text_hash").is_in(plan.vectors)
    if table == RETENTION_PENDING:
        return pl.col("doc_id").is_in([i for ids in plan.pending.values() for i in ids])
    if plan.scope.covers(columns) and plan.scope.tenant is not None:
        return plan.scope.expr()
    if "conversation_id" in columns:
        return conversations
    return None


def _count(store: DeltaStore, table: str, plan: Plan) -> int:
    """Rows of the plan in `table` now (cached vectors: those no remaining row uses)."""
    predicate = _predicate(store, table, plan)
    if predicate is None:
        return 0
    if table == EMBEDDINGS:
        predicate &= ~pl.col("text_hash").is_in(_hashes_in_use(store, plan))
    return int(store.scan(table).filter(predicate).select(pl.len()).collect().item())


def _history_predicates(store: DeltaStore, plan: Plan) -> dict[str, pl.Expr]:
    predicates = {table: _predicate(store, table, plan) for table in ERASED_TABLES}
    return {table: p for table, p in predicates.items() if p is not None}


def _hashes_in_use(store: DeltaStore, plan: Plan) -> pl.Series:
    """Text hashes of the role rows outside the plan (their vectors stay)."""
    scope = _predicate(store, ROLE_ROWS, plan)
    if scope is None:
        return pl.Series("text_hash", [], dtype=pl.String)
    return store.scan(ROLE_ROWS).filter(~scope).select("text_hash").unique().collect()["text_hash"]


def _vectors_only_of(store: DeltaStore, scope: Scope, rows: pl.DataFrame) -> list[str]:
    """Text hashes of `rows` that no role row outside `scope` has."""
    if rows.is_empty():
        return []
    others = store.scan(ROLE_ROWS).filter(~scope.expr()).select("text_hash").unique().collect()
    return (
        rows.select("text_hash")
        .unique()
        .join(others, on="text_hash", how="anti")["text_hash"]
        .to_list()
    )


def _source_files(store: DeltaStore, plan: Plan) -> list[str]:
    frames = [
        _scan(store, table, predicate, ["source_file"])
        for table in (RAW_TURN_EVENTS, QUARANTINED_EVENTS)
        if (predicate := _predicate(store, table, plan)) is not None
    ]
    return sorted(
        set(
            pl.concat([pl.DataFrame(schema={"source_file": pl.String}), *frames])[
                "source_file"
            ].to_list()
        )
    )


def _turn_keys(store: DeltaStore, plan: Plan) -> pl.DataFrame:
    frames = [
        _scan(store, table, predicate, ["conversation_id", "turn_id"])
        for table in (TURN_LOGS, ROLE_ROWS, TURN_CATALOG, RAW_TURN_EVENTS)
        if (predicate := _predicate(store, table, plan)) is not None
    ]
    schema = {"conversation_id": pl.String, "turn_id": pl.String}
    return pl.concat([pl.DataFrame(schema=schema), *frames]).unique()


def _es_ids(
    store: DeltaStore, es: Elasticsearch | None, prefix: str, plan: Plan
) -> tuple[dict[str, list[str]], str | None]:
    """The plan's Elasticsearch ids: from its Delta rows and turns, plus a scan of every index
    version for documents of the scope."""
    ids = {
        ROWS: plan.rows["row_id"].to_list(),
        TURNS: [turn_doc_id(c, t) for c, t in _turn_keys(store, plan).iter_rows()],
    }
    if es is None:
        return ids, "no Elasticsearch client"
    try:
        for kind in (ROWS, TURNS):
            found = scan_ids(es, prefix, kind, plan.scope.es_query())
            ids[kind] = list(dict.fromkeys([*ids[kind], *found]))
    except (TransportError, ApiError) as exc:
        return ids, f"{type(exc).__name__}: {exc}"
    return ids, None


def _delete_delta(store: DeltaStore, plan: Plan) -> None:
    """DELETE the plan's rows from every table, each commit tagged with the run id."""
    for table in CONTENT_TABLES:
        predicate = _predicate(store, table, plan)
        if predicate is None:
            continue
        if table == QUARANTINED_EVENTS:
            keys = _scan(store, table, predicate, QUARANTINE_KEY)
            delete_keys(store, table, keys, plan.run_id)
        elif plan.scope.tenant is not None and plan.scope.covers(columns_of(store, table)):
            delete_where(store, table, plan.scope.sql(), plan.run_id)
        else:
            keys = pl.DataFrame(
                {"conversation_id": plan.conversations}, schema={"conversation_id": pl.String}
            )
            delete_keys(store, table, keys, plan.run_id)
    delete_keys(store, ROW_EMBEDDINGS, plan.rows.select("row_id"), plan.run_id)
    unused = pl.DataFrame({"text_hash": plan.vectors}, schema={"text_hash": pl.String})
    unused = unused.filter(~pl.col("text_hash").is_in(_hashes_in_use(store, plan)))
    delete_keys(store, EMBEDDINGS, unused, plan.run_id)


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
    result = delete_docs(
        es, settings.elasticsearch.index_prefix, ids, bulk_options(settings.elasticsearch)
    )
    return result.deleted, result.error


def _dry_run_message(what: str, counts: dict[str, int]) -> str:
    delta = ", ".join(f"{t} {counts[t]}" for t in DELETED_TABLES if counts.get(t))
    es = (
        "unreachable"
        if counts.get(ES_UNREACHABLE)
        else f"rows {counts.get('es_rows', 0)}, turns {counts.get('es_turns', 0)}"
    )
    return "\n".join(
        [
            f"Dry run: erasing {what} would remove",
            f"  delta: {delta or 'nothing'}",
            f"  elasticsearch: {es}",
            f"  file storage: {counts.get('files', 0)} folder(s)",
            f"  landing files: {counts.get('landing_lines', 0)} line(s)",
            "Nothing was changed.",
        ]
    )
