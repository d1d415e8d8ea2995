"""Names and Arrow schemas of every Delta table ctxdb writes (documented in docs/tables.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

RAW_TURN_EVENTS = "raw_turn_events"
QUARANTINED_EVENTS = "quarantined_events"
LANDED_FILES = "landed_files"
TURN_LOGS = "turn_logs"
CONVERSATION_TIMELINES = "conversation_timelines"
ROLE_ROWS = "role_rows"
TURN_CATALOG = "turn_catalog"
REPLAY_ARTIFACTS = "replay_artifacts"
EMBEDDINGS = "embeddings"
ROW_EMBEDDINGS = "role_row_embeddings"
RETENTION_REPORT = "retention_report"

IDENTITY = [
    pa.field("tenant", pa.string(), nullable=False),
    pa.field("app", pa.string(), nullable=False),
    pa.field("agent", pa.string(), nullable=False),
    pa.field("user_id", pa.string(), nullable=False),
    pa.field("conversation_id", pa.string(), nullable=False),
]

# The searchable units: one row per folded user submission, final completion, and (ReAct) summary,
# anchors, notes and attachment text. This schema is the contract between derivation, embedding,
# indexing and search: add columns, never rename or drop them.
ROLE_ROWS_SCHEMA = pa.schema(
    [
        pa.field("row_id", pa.string(), nullable=False),
        *IDENTITY,
        pa.field("turn_id", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),  # user | assistant | artifact
        pa.field("target", pa.string(), nullable=False),  # user|assistant|summary|notes|attachment
        pa.field("tags", pa.list_(pa.string())),
        pa.field("event_type", pa.string()),
        pa.field("batch_id", pa.string()),
        pa.field("ts", TS, nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("anchors_text", pa.string(), nullable=False),
        pa.field("trigrams", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),  # sha256 of what the model reads
        pa.field("ref", pa.string(), nullable=False),  # conv: ref of the source block
        pa.field("path", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("visibility", pa.string(), nullable=False),  # public | internal
        pa.field("expires_at", TS, nullable=False),
        pa.field("derived_at", TS, nullable=False),
        # what the model reads before `text` (a user row: the question it answers); null or ""
        # when none, and in rows derived before the column existed
        pa.field("context", pa.string()),
        # the turn's project (TurnLog `project`); null when unknown or derived before it existed
        pa.field("project", pa.string()),
    ]
)

EMBEDDINGS_SCHEMA = pa.schema(
    [
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32()), nullable=False),
        pa.field("created_at", TS, nullable=False),
    ]
)

ROW_EMBEDDINGS_SCHEMA = pa.schema(
    [
        pa.field("row_id", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
        pa.field("embedding_status", pa.string(), nullable=False),  # ok | failed | pending
        pa.field("error", pa.string()),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("updated_at", TS, nullable=False),
        # the role row's `expires_at` when the status was written (null in statuses written
        # before the column existed): the retention sweep's delete reads only the files that
        # may hold expired statuses (`ctxdb.lifecycle.retention.status_bound`)
        pa.field("expires_at", TS),
    ]
)

RETENTION_PENDING = "retention_pending"

# Work the retention sweep or an erasure has committed to but not finished: Elasticsearch ids
# (kind rows|turns) and conversation-storage paths (kind files). Written before Delta is purged,
# cleared once the work is confirmed, so a killed or Elasticsearch-less run is finished next time.
RETENTION_PENDING_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("recorded_at", TS, nullable=False),
    ]
)

LIFECYCLE_JOURNAL = "lifecycle_journal"

# What a retention sweep or an erasure has set out to do, appended in one commit before it removes
# anything and deleted (and vacuumed) when it is done, so a killed run is resumed from it: a `run`
# row (its header: scope, start time, table versions) and, for an erasure, one row per role row
# (`row`: row_id, text_hash), cached vector (`vector`), identity (`identity`), landing file
# (`source`) and Elasticsearch id or storage path (`pending`) it will remove.
LIFECYCLE_JOURNAL_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),  # retention | erase
        pa.field("kind", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.string()),
        pa.field("recorded_at", TS, nullable=False),
    ]
)

# One row per retention sweep or erasure run. Counts are JSON objects keyed by table or index kind.
RETENTION_REPORT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),  # retention | erase
        pa.field("status", pa.string(), nullable=False),  # ok | es_pending | dry_run | failed
        pa.field("dry_run", pa.bool_(), nullable=False),
        pa.field("cutoff", TS),
        pa.field("started_at", TS, nullable=False),
        pa.field("finished_at", TS, nullable=False),
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("deleted_rows", pa.string(), nullable=False),  # {"role_rows": n, ...}
        pa.field("es_deleted", pa.string(), nullable=False),  # {"rows": n, "turns": n}
        pa.field("es_pending", pa.int64(), nullable=False),
        pa.field("files_removed", pa.int64(), nullable=False),
        pa.field("vacuumed_files", pa.string(), nullable=False),  # {"role_rows": n, ...}
        pa.field("oldest_remaining_ts", TS),
        pa.field("rows_per_s", pa.float64(), nullable=False),
        pa.field("error", pa.string()),
        pa.field("landing", pa.string()),  # {"lines_removed": n, "files_removed": n, ...}
    ]
)

INDEX_STATE = "index_state"

# One row per concrete Elasticsearch index: the Delta versions of its source tables it was last
# synced from (JSON {"role_rows": 12, ...}), so a run with no new versions does nothing.
INDEX_STATE_SCHEMA = pa.schema(
    [
        pa.field("index_name", pa.string(), nullable=False),
        pa.field("index_uuid", pa.string(), nullable=False),  # a recreated index starts over
        pa.field("kind", pa.string(), nullable=False),  # rows | turns
        pa.field("source_versions", pa.string(), nullable=False),
        pa.field("docs", pa.int64(), nullable=False),
        pa.field("updated_at", TS, nullable=False),
    ]
)

DERIVE_STATE = "derive_state"
PURGED_CONVERSATIONS = "purged_conversations"

# Landed events: the validated envelope, the payload (JSON) and where the line came from.
# `landed_version` numbers landing batches in increasing order (the table version + 1 when the
# batch started); derivation reads rows above the number it last derived.
RAW_EVENTS_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("occurred_at", TS, nullable=False),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("app", pa.string(), nullable=False),
        pa.field("agent", pa.string(), nullable=False),
        pa.field("adapter", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("conversation_id", pa.string(), nullable=False),
        pa.field("turn_id", pa.string(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),  # JSON object
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line_number", pa.int64(), nullable=False),  # 1-based
        pa.field("ingested_at", TS, nullable=False),
        pa.field("landed_version", pa.int64(), nullable=False),
    ]
)

# Lines that failed to parse or validate, with the reason (see docs/events.md for the codes).
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line_number", pa.int64(), nullable=False),
        pa.field("raw_line", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("event_id", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("quarantined_at", TS, nullable=False),
    ]
)

QUARANTINED_FILES = "quarantined_files"

# Landing files that could not be read as a whole (a truncated or corrupt gzip, an I/O error):
# one row per (file, size, mtime, reason). A `corrupt_gzip` file is not read again until its size
# or mtime changes; an `unreadable_file` is tried again by every run. Rows of a file are removed
# once it lands.
QUARANTINED_FILES_SCHEMA = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime", TS),
        pa.field("reason", pa.string(), nullable=False),  # corrupt_gzip | unreadable_file
        pa.field("detail", pa.string(), nullable=False),
        pa.field("head", pa.binary(), nullable=False),  # the first bytes (up to 64)
        pa.field("quarantined_at", TS, nullable=False),
    ]
)

# Every landing file already read (never re-read while its size and mtime are unchanged).
LANDED_FILES_SCHEMA = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime", TS),
        pa.field("lines", pa.int64(), nullable=False),
        pa.field("landed", pa.int64(), nullable=False),
        pa.field("duplicates", pa.int64(), nullable=False),
        pa.field("quarantined", pa.int64(), nullable=False),
        pa.field("landed_at", TS, nullable=False),
    ]
)

# One TurnLog per closed turn (payload = the TurnLog envelope JSON) plus compact accounting.
TURN_LOGS_SCHEMA = pa.schema(
    [
        *IDENTITY,
        pa.field("turn_id", pa.string(), nullable=False),
        pa.field("adapter", pa.string(), nullable=False),
        pa.field("recording_kind", pa.string(), nullable=False),  # minimal | rich
        pa.field("recording_state", pa.int32(), nullable=False),  # 1 | 2
        pa.field("started_at", TS, nullable=False),
        pa.field("ended_at", TS, nullable=False),
        pa.field("last_event_at", TS, nullable=False),
        pa.field("error", pa.bool_(), nullable=False),
        # ok | cancelled | error: how the turn closed (null in TurnLogs derived before it existed)
        pa.field("status", pa.string(), nullable=False),
        pa.field("error_type", pa.string()),  # the close's or the error answer's type
        pa.field("payload", pa.string(), nullable=False),
        pa.field("block_count", pa.int32(), nullable=False),
        pa.field("source_event_ids", pa.list_(pa.string()), nullable=False),
        pa.field("tokens_in", pa.int64()),
        pa.field("tokens_out", pa.int64()),
        pa.field("model", pa.string()),  # the model of the turn's last completion naming one
        # a coding host's project: the git root of the turn's cwd, else the cwd (null when unknown)
        pa.field("project", pa.string()),
        pa.field("feedback_summary", pa.string()),  # JSON {count,last_ts,last_reaction,...}
        pa.field("title", pa.string()),
        pa.field("expires_at", TS, nullable=False),
        pa.field("updated_at", TS, nullable=False),
    ]
)

# conv.timeline.v1: one row per conversation (the newest timeline).
TIMELINES_SCHEMA = pa.schema(
    [
        *IDENTITY,
        pa.field("version", pa.int32(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("started_at", TS, nullable=False),
        pa.field("last_activity_at", TS, nullable=False),
        pa.field("turn_ids", pa.list_(pa.string()), nullable=False),
        pa.field("turn_count", pa.int32(), nullable=False),
        pa.field("blocks", pa.string(), nullable=False),  # JSON list; [] for minimal adapters
        pa.field("sources_pool", pa.string(), nullable=False),  # JSON list
        pa.field("forked_from", pa.string()),
        pa.field("recording_kind", pa.string(), nullable=False),  # highest of its turns
        pa.field("expires_at", TS, nullable=False),
        pa.field("updated_at", TS, nullable=False),
    ]
)

TURN_CATALOG_SCHEMA = pa.schema(
    [
        *IDENTITY,
        pa.field("turn_id", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),  # 1-based by started_at, then turn_id
        pa.field("started_at", TS, nullable=False),
        pa.field("ended_at", TS, nullable=False),
        pa.field("first_user_text", pa.string(), nullable=False),
        pa.field("last_assistant_text", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("last_activity_at", TS, nullable=False),
        pa.field("error", pa.bool_(), nullable=False),
        pa.field("recording_kind", pa.string(), nullable=False),
        pa.field("expires_at", TS, nullable=False),
        pa.field("updated_at", TS, nullable=False),
    ]
)

# conv.artifacts.events / conv.artifacts.stream items in arrival order (stream chunks -> counts).
REPLAY_SCHEMA = pa.schema(
    [
        *IDENTITY,
        pa.field("turn_id", pa.string(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("artifact", pa.string(), nullable=False),  # conv.artifacts.events | .stream
        pa.field("name", pa.string(), nullable=False),  # chat.step, chat.citations, tool, ...
        pa.field("marker", pa.string()),  # canvas | tool | subsystem (stream only)
        pa.field("ts", TS, nullable=False),
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("data", pa.string(), nullable=False),  # JSON
        pa.field("expires_at", TS, nullable=False),
        pa.field("updated_at", TS, nullable=False),
    ]
)

# Progress of incremental derivation: the highest raw `landed_version` already derived.
DERIVE_STATE_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("landed_version", pa.int64(), nullable=False),
        pa.field("conversations", pa.int64(), nullable=False),
        pa.field("turns", pa.int64(), nullable=False),
        pa.field("derived_at", TS, nullable=False),
    ]
)

DERIVE_FAILURES = "derive_failures"

# Conversations whose derivation raised: the error, and the newest landed version it was tried
# at. The conversation's derived rows stay as they were; the rest are derived. A later run that
# derives the conversation (a new event for it) or an erasure of it removes the row.
DERIVE_FAILURES_SCHEMA = pa.schema(
    [
        *IDENTITY[:2],
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("conversation_id", pa.string(), nullable=False),
        pa.field("error_type", pa.string(), nullable=False),
        pa.field("error", pa.string(), nullable=False),
        pa.field("landed_version", pa.int64(), nullable=False),
        pa.field("failed_at", TS, nullable=False),
    ]
)

INDEX_FAILURES = "index_failures"

# Documents Elasticsearch rejected (a 400: a mapping or parsing error, the document itself is
# bad), one row per (index kind, document id); the sync goes on and records them here. A later
# sync that writes or deletes the document (its source rows changed, were erased or expired) or an
# erasure removes the row.
INDEX_FAILURES_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),  # rows | turns
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("index_name", pa.string(), nullable=False),
        pa.field("tenant", pa.string()),
        pa.field("app", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("status", pa.int32(), nullable=False),
        pa.field("error", pa.string(), nullable=False),
        pa.field("failed_at", TS, nullable=False),
    ]
)

# Conversations erased on purpose: later events for them are quarantined, never re-derived.
# Only a SHA-256 of the conversation id is kept, so an erasure leaves no identifier behind.
PURGED_CONVERSATIONS_SCHEMA = pa.schema(
    [
        pa.field("conversation_key", pa.string(), nullable=False),
        pa.field("purged_at", TS, nullable=False),
    ]
)

CHANGE_FEED_PROPERTY = "delta.enableChangeDataFeed"
CHANGE_FEED = frozenset(
    {ROLE_ROWS, ROW_EMBEDDINGS, TURN_LOGS, TURN_CATALOG, CONVERSATION_TIMELINES}
)
"""Tables created with Delta's change data feed on: the embedding stage and the index sync read
what changed since their watermark from it (`ctxdb.storage.changes`)."""


def table_properties(table: str) -> dict[str, str] | None:
    """Delta table properties `table` is created with."""
    return {CHANGE_FEED_PROPERTY: "true"} if table in CHANGE_FEED else None


# Every table ctxdb writes, with its Arrow schema: the catalog that Dagster's asset declarations,
# `ctxdb sql` and the docs are checked against. A new table is added here.
SCHEMAS: dict[str, pa.Schema] = {
    RAW_TURN_EVENTS: RAW_EVENTS_SCHEMA,
    QUARANTINED_EVENTS: QUARANTINE_SCHEMA,
    LANDED_FILES: LANDED_FILES_SCHEMA,
    TURN_LOGS: TURN_LOGS_SCHEMA,
    CONVERSATION_TIMELINES: TIMELINES_SCHEMA,
    ROLE_ROWS: ROLE_ROWS_SCHEMA,
    TURN_CATALOG: TURN_CATALOG_SCHEMA,
    REPLAY_ARTIFACTS: REPLAY_SCHEMA,
    DERIVE_STATE: DERIVE_STATE_SCHEMA,
    EMBEDDINGS: EMBEDDINGS_SCHEMA,
    ROW_EMBEDDINGS: ROW_EMBEDDINGS_SCHEMA,
    INDEX_STATE: INDEX_STATE_SCHEMA,
    RETENTION_PENDING: RETENTION_PENDING_SCHEMA,
    RETENTION_REPORT: RETENTION_REPORT_SCHEMA,
    LIFECYCLE_JOURNAL: LIFECYCLE_JOURNAL_SCHEMA,
    PURGED_CONVERSATIONS: PURGED_CONVERSATIONS_SCHEMA,
    QUARANTINED_FILES: QUARANTINED_FILES_SCHEMA,
    DERIVE_FAILURES: DERIVE_FAILURES_SCHEMA,
    INDEX_FAILURES: INDEX_FAILURES_SCHEMA,
}

LANDING = "landing"
DERIVATION = "derivation"
EMBEDDING = "embedding"
INDEXING = "indexing"
LIFECYCLE = "lifecycle"

# How the retention sweep shrinks a table (`TablePolicy.expires_by`).
EXPIRES_AT = "expires_at"  # rows whose own `expires_at` has passed
OCCURRED_AT = "occurred_at"  # raw events: `occurred_at` + their tenant/app TTL
DEFAULT_TTL = "default_ttl"  # `quarantined_at` / `failed_at` + the default TTL
ORPHANED = "orphaned"  # rows of purged rows or removed files (statuses, vectors, landed files)


@dataclass(frozen=True)
class TablePolicy:
    """The maintenance policy of one table: who writes it, whether the retention sweep shrinks
    it (and by what), and how its history is kept. Every table is compacted (OPTIMIZE) by the
    compaction run and vacuumed by every sweep; the window is the retention VACUUM window, or,
    for a `state` table (rewritten or appended by every run, never read through time travel),
    the state history window, after which its log is checkpointed and trimmed too."""

    writer: str
    expires_by: str | None = None
    clock: str | None = None
    """The time column a DEFAULT_TTL row expires by."""
    state: bool = False
    compact: bool = True
    keep_latest: tuple[str, str] | None = None
    """(key, order) of a state table whose older rows per key are dropped by the maintenance."""


POLICIES: dict[str, TablePolicy] = {
    RAW_TURN_EVENTS: TablePolicy(LANDING, expires_by=OCCURRED_AT),
    QUARANTINED_EVENTS: TablePolicy(LANDING, expires_by=DEFAULT_TTL, clock="quarantined_at"),
    LANDED_FILES: TablePolicy(LANDING, expires_by=ORPHANED, state=True),
    QUARANTINED_FILES: TablePolicy(
        LANDING, expires_by=DEFAULT_TTL, clock="quarantined_at", state=True
    ),
    TURN_LOGS: TablePolicy(DERIVATION, expires_by=EXPIRES_AT),
    CONVERSATION_TIMELINES: TablePolicy(DERIVATION, expires_by=EXPIRES_AT),
    ROLE_ROWS: TablePolicy(DERIVATION, expires_by=EXPIRES_AT),
    TURN_CATALOG: TablePolicy(DERIVATION, expires_by=EXPIRES_AT),
    REPLAY_ARTIFACTS: TablePolicy(DERIVATION, expires_by=EXPIRES_AT),
    DERIVE_STATE: TablePolicy(DERIVATION, state=True, keep_latest=("name", "landed_version")),
    DERIVE_FAILURES: TablePolicy(DERIVATION, expires_by=DEFAULT_TTL, clock="failed_at", state=True),
    EMBEDDINGS: TablePolicy(EMBEDDING, expires_by=ORPHANED),
    ROW_EMBEDDINGS: TablePolicy(EMBEDDING, expires_by=ORPHANED),
    INDEX_STATE: TablePolicy(INDEXING, state=True),
    INDEX_FAILURES: TablePolicy(INDEXING, expires_by=DEFAULT_TTL, clock="failed_at", state=True),
    RETENTION_PENDING: TablePolicy(LIFECYCLE, state=True),
    RETENTION_REPORT: TablePolicy(LIFECYCLE),
    LIFECYCLE_JOURNAL: TablePolicy(LIFECYCLE, state=True),
    PURGED_CONVERSATIONS: TablePolicy(LIFECYCLE),
}
"""The one table registry: compaction, VACUUM, the retention sweep and `ctxdb tables` read it
(docs/tables.md, "Maintenance policy"); a table in SCHEMAS without a policy fails the tests."""


def policy(table: str) -> TablePolicy:
    """The policy of `table` (KeyError naming it when it has none)."""
    try:
        return POLICIES[table]
    except KeyError:
        raise KeyError(f"table {table!r} has no policy in ctxdb.storage.tables.POLICIES") from None


def tables_where(**wanted: object) -> tuple[str, ...]:
    """Tables of the registry whose policy has every attribute in `wanted`, in SCHEMAS order."""
    return tuple(
        table
        for table in SCHEMAS
        if all(getattr(policy(table), name) == value for name, value in wanted.items())
    )


def expiring(kind: str) -> tuple[str, ...]:
    """Tables the retention sweep shrinks by `kind` (EXPIRES_AT, DEFAULT_TTL, ...)."""
    return tables_where(expires_by=kind)
