"""`turn_logs`: one row per closed turn with the TurnLog payload and compact accounting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import polars as pl
from pydantic_core import to_json

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_columns
from ctxdb.record.turns import Turn
from ctxdb.settings import Settings
from ctxdb.storage.tables import TURN_LOGS_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id"]
IDENTITY = ["tenant", "app", "agent", "user_id", "conversation_id", "turn_id"]


def turn_logs_frame(
    turns: Sequence[Turn],
    titles: Mapping[str, str | None],
    settings: Settings,
    now: datetime,
) -> pl.DataFrame:
    """TURN_LOGS_SCHEMA rows; `expires_at` = ended_at + the tenant/app TTL."""
    if not turns:
        return empty(TURN_LOGS_SCHEMA)
    columns = {name: [getattr(t, name) for t in turns] for name in IDENTITY}
    columns |= {
        "adapter": [t.adapter for t in turns],
        "recording_kind": [t.recording_kind for t in turns],
        "recording_state": [t.recording_state for t in turns],
        "started_at": [t.started_at for t in turns],
        "ended_at": [t.ended_at for t in turns],
        "last_event_at": [t.last_event_at for t in turns],
        "error": [t.error for t in turns],
        "status": [t.status for t in turns],
        "error_type": [t.error_type for t in turns],
        "payload": [t.log_json() for t in turns],
        "block_count": [len(t.blocks) for t in turns],
        "source_event_ids": [t.source_event_ids for t in turns],
        "tokens_in": [t.tokens["in"] if t.tokens else None for t in turns],
        "tokens_out": [t.tokens["out"] if t.tokens else None for t in turns],
        "model": [t.model for t in turns],
        "project": [t.project for t in turns],
        "feedback_summary": [to_json(t.feedback).decode() if t.feedback else None for t in turns],
        "title": [titles.get(t.conversation_id) for t in turns],
    }
    data = from_columns(
        columns, TURN_LOGS_SCHEMA, micros=("started_at", "ended_at", "last_event_at")
    )
    return frame(
        data.with_columns(
            pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("updated_at"),
            expires_at_expr(settings, ts_column="ended_at", role_column=None),
        ),
        TURN_LOGS_SCHEMA,
    )
