"""`turn_catalog`: per conversation, the ordinal of each recorded turn plus listing texts.

Ordinals are 1-based over the conversation's closed turns ordered by (started_at, turn_id), so they
depend only on the turns themselves: late events for a turn never move it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_rows
from ctxdb.record.turnlog import COMPLETION, USER_BLOCK_TYPES, TurnRecord
from ctxdb.settings import Settings
from ctxdb.storage.tables import TURN_CATALOG_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id"]


def turn_catalog_frame(
    records: Sequence[TurnRecord], titles: Mapping[str, str], settings: Settings, now: datetime
) -> pl.DataFrame:
    """TURN_CATALOG_SCHEMA rows; `expires_at` = ended_at + the tenant/app TTL."""
    if not records:
        return empty(TURN_CATALOG_SCHEMA)
    rows = []
    for r in records:
        users = [b.text for b in r.log.blocks if b.type in USER_BLOCK_TYPES]
        completions = [b.text for b in r.log.blocks if b.type == COMPLETION]
        rows.append(
            {
                "tenant": r.tenant,
                "app": r.app,
                "agent": r.agent,
                "user_id": r.user_id,
                "conversation_id": r.conversation_id,
                "turn_id": r.turn_id,
                "started_at": r.started_at,
                "ended_at": r.ended_at,
                "first_user_text": users[0] if users else "",
                "last_assistant_text": completions[-1],
                "title": titles.get(r.conversation_id),
                "last_activity_at": r.last_event_at,
                "error": r.error,
                "recording_kind": r.recording_kind,
                "updated_at": now,
            }
        )
    ordered = from_rows(rows, TURN_CATALOG_SCHEMA).sort("conversation_id", "started_at", "turn_id")
    data = ordered.with_columns(
        (pl.int_range(pl.len()).over("conversation_id") + 1).cast(pl.Int32).alias("ordinal"),
        expires_at_expr(settings, ts_column="ended_at", role_column=None),
    )
    return frame(data, TURN_CATALOG_SCHEMA)
