"""`turn_logs`: one row per closed turn with the TurnLog payload and compact accounting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_rows
from ctxdb.record.turnlog import TurnRecord
from ctxdb.settings import Settings
from ctxdb.storage.tables import TURN_LOGS_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id"]


def turn_logs_frame(
    records: Sequence[TurnRecord],
    titles: Mapping[str, str | None],
    settings: Settings,
    now: datetime,
) -> pl.DataFrame:
    """TURN_LOGS_SCHEMA rows; `expires_at` = ended_at + the tenant/app TTL."""
    if not records:
        return empty(TURN_LOGS_SCHEMA)
    rows = [
        {
            "tenant": r.tenant,
            "app": r.app,
            "agent": r.agent,
            "user_id": r.user_id,
            "conversation_id": r.conversation_id,
            "turn_id": r.turn_id,
            "adapter": r.adapter,
            "recording_kind": r.recording_kind,
            "recording_state": r.recording_state,
            "started_at": r.started_at,
            "ended_at": r.ended_at,
            "last_event_at": r.last_event_at,
            "error": r.error,
            "payload": r.log.model_dump_json(),
            "block_count": r.log.blocks_count,
            "source_event_ids": r.source_event_ids,
            "tokens_in": r.log.tokens["in"] if r.log.tokens else None,
            "tokens_out": r.log.tokens["out"] if r.log.tokens else None,
            "feedback_summary": r.log.feedback.model_dump_json() if r.log.feedback else None,
            "title": titles.get(r.conversation_id),
            "updated_at": now,
        }
        for r in records
    ]
    return frame(
        from_rows(rows, TURN_LOGS_SCHEMA).with_columns(
            expires_at_expr(settings, ts_column="ended_at", role_column=None)
        ),
        TURN_LOGS_SCHEMA,
    )
