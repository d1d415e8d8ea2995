"""Names and Arrow schemas of every Delta table ctxdb writes (documented in docs/tables.md)."""

from __future__ import annotations

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
        pa.field("text_hash", pa.string(), nullable=False),  # sha256 of the text sent to the model
        pa.field("ref", pa.string(), nullable=False),  # conv: ref of the source block
        pa.field("path", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("visibility", pa.string(), nullable=False),  # public | internal
        pa.field("expires_at", TS, nullable=False),
        pa.field("derived_at", TS, nullable=False),
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
    ]
)
