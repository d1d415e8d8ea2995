"""`conversation_timelines` (conv.timeline.v1): one row per conversation, the newest timeline.

Title is carried forward (the latest `conversation.title` event, else the first prompt cut to 80
characters); blocks stay empty for minimal adapters and hold the progressive block list of the
rich (ReAct) turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_rows
from ctxdb.record.turnlog import USER_BLOCK_TYPES, TurnRecord
from ctxdb.settings import Settings
from ctxdb.storage.tables import TIMELINES_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id"]
TITLE_FALLBACK_CHARS = 80


def conversation_titles(raw: pl.DataFrame, records: Sequence[TurnRecord]) -> dict[str, str]:
    """Title per conversation: latest title event, else the first user prompt (shortened)."""
    titled = (
        raw.filter(pl.col("type") == "conversation.title")
        .sort("occurred_at")
        .group_by("conversation_id")
        .agg(pl.col("payload").last().str.json_path_match("$.title").alias("title"))
    )
    titles = dict(titled.iter_rows())
    for record in sorted(records, key=lambda r: (r.started_at, r.turn_id)):
        if record.conversation_id in titles:
            continue
        users = [b for b in record.log.blocks if b.type in USER_BLOCK_TYPES and b.text.strip()]
        if users:
            text = " ".join(users[0].text.split())
            titles[record.conversation_id] = text[:TITLE_FALLBACK_CHARS]
    return titles


def timelines_frame(
    raw: pl.DataFrame,
    records: Sequence[TurnRecord],
    titles: dict[str, str],
    settings: Settings,
    now: datetime,
) -> pl.DataFrame:
    """TIMELINES_SCHEMA rows for every conversation with at least one closed turn."""
    if not records:
        return empty(TIMELINES_SCHEMA)
    activity = dict(
        raw.group_by("conversation_id")
        .agg(
            pl.struct(
                pl.col("occurred_at").min().alias("a"), pl.col("occurred_at").max().alias("b")
            )
        )
        .iter_rows()
    )
    by_conv: dict[str, list[TurnRecord]] = {}
    for record in sorted(records, key=lambda r: (r.started_at, r.turn_id)):
        by_conv.setdefault(record.conversation_id, []).append(record)
    rows = []
    for conversation_id, turns in by_conv.items():
        first = turns[0]
        rich = [t for t in turns if t.recording_kind == "rich"]
        blocks = [b.model_dump(mode="json") for t in rich for b in t.log.blocks]
        sources = list(dict.fromkeys(s for t in turns for s in t.log.sources_used))
        span = activity[conversation_id]
        rows.append(
            {
                "tenant": first.tenant,
                "app": first.app,
                "agent": first.agent,
                "user_id": first.user_id,
                "conversation_id": conversation_id,
                "version": 1,
                "title": titles.get(conversation_id),
                "started_at": span["a"],
                "last_activity_at": span["b"],
                "turn_ids": [t.turn_id for t in turns],
                "turn_count": len(turns),
                "blocks": json.dumps(blocks),
                "sources_pool": json.dumps(sources),
                "forked_from": None,
                "recording_kind": "rich" if rich else "minimal",
                "updated_at": now,
            }
        )
    return frame(
        from_rows(rows, TIMELINES_SCHEMA).with_columns(
            expires_at_expr(settings, ts_column="last_activity_at", role_column=None)
        ),
        TIMELINES_SCHEMA,
    )
