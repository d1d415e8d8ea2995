"""`turn_catalog`: per conversation, the ordinal of each recorded turn plus listing texts.

Ordinals are 1-based over the conversation's closed turns ordered by (started_at, turn_id), so they
depend only on the turns themselves: late events for a turn never move it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_columns
from ctxdb.record.turns import COMPLETION, USER_BLOCK_TYPES, Turn
from ctxdb.settings import Settings
from ctxdb.storage.tables import TURN_CATALOG_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id"]
IDENTITY = ["tenant", "app", "agent", "user_id", "conversation_id", "turn_id"]


def _first_user_text(turn: Turn) -> str:
    return next((b["text"] for b in turn.blocks if b["type"] in USER_BLOCK_TYPES), "")


def _last_assistant_text(turn: Turn) -> str:
    return [b["text"] for b in turn.blocks if b["type"] == COMPLETION][-1]


def turn_catalog_frame(
    turns: Sequence[Turn], titles: Mapping[str, str], settings: Settings, now: datetime
) -> pl.DataFrame:
    """TURN_CATALOG_SCHEMA rows; `expires_at` = ended_at + the tenant/app TTL."""
    if not turns:
        return empty(TURN_CATALOG_SCHEMA)
    columns = {name: [getattr(t, name) for t in turns] for name in IDENTITY}
    columns |= {
        "started_at": [t.started_at for t in turns],
        "ended_at": [t.ended_at for t in turns],
        "first_user_text": [_first_user_text(t) for t in turns],
        "last_assistant_text": [_last_assistant_text(t) for t in turns],
        "title": [titles.get(t.conversation_id) for t in turns],
        "last_activity_at": [t.last_event_at for t in turns],
        "error": [t.error for t in turns],
        "recording_kind": [t.recording_kind for t in turns],
    }
    data = from_columns(
        columns, TURN_CATALOG_SCHEMA, micros=("started_at", "ended_at", "last_activity_at")
    ).sort("conversation_id", "started_at", "turn_id")
    data = data.with_columns(
        (pl.int_range(pl.len()).over("conversation_id") + 1).cast(pl.Int32).alias("ordinal"),
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("updated_at"),
        expires_at_expr(settings, ts_column="ended_at", role_column=None),
    )
    return frame(data, TURN_CATALOG_SCHEMA)
