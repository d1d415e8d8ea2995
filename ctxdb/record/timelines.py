"""`conversation_timelines` (conv.timeline.v1): one row per conversation, the newest timeline.

Title is carried forward (the latest `conversation.title` event, else the first meaningful
sentence of the prompts, `ctxdb.record.titles`); blocks stay empty for minimal adapters and hold
the progressive block list of the rich (ReAct) turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_columns
from ctxdb.record.titles import title_from_prompts
from ctxdb.record.turns import USER_BLOCK_TYPES, Turn
from ctxdb.settings import Settings
from ctxdb.storage.tables import TIMELINES_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id"]
IDENTITY = ["tenant", "app", "agent", "user_id", "conversation_id"]


def in_time_order(turns: Sequence[Turn]) -> list[Turn]:
    """Turns by (started_at, turn_id), the order of a conversation's timeline and catalog."""
    return sorted(turns, key=lambda t: (t.started_at, t.turn_id))


def conversation_titles(raw: pl.DataFrame, turns: Sequence[Turn]) -> dict[str, str]:
    """Title per conversation: latest title event, else one made from its prompts
    (`ctxdb.record.titles`: wrappers and markdown dropped, a shared header skipped)."""
    titled = (
        raw.filter(pl.col("type") == "conversation.title")
        .sort("occurred_at")
        .group_by("conversation_id")
        .agg(pl.col("payload").last().str.json_path_match("$.title").alias("title"))
    )
    titles = dict(titled.iter_rows())
    prompts: dict[str, list[str]] = {}
    for turn in in_time_order(turns):
        users = [b for b in turn.blocks if b["type"] in USER_BLOCK_TYPES and b["text"].strip()]
        if users and turn.conversation_id not in titles:
            prompts.setdefault(turn.conversation_id, []).append(users[0]["text"])
    for conversation_id, texts in prompts.items():
        title = title_from_prompts(texts)
        if title:
            titles[conversation_id] = title
    return titles


def timelines_frame(
    raw: pl.DataFrame,
    turns: Sequence[Turn],
    titles: dict[str, str],
    settings: Settings,
    now: datetime,
) -> pl.DataFrame:
    """TIMELINES_SCHEMA rows for every conversation with at least one closed turn."""
    if not turns:
        return empty(TIMELINES_SCHEMA)
    by_conv: dict[str, list[Turn]] = {}
    for turn in in_time_order(turns):
        by_conv.setdefault(turn.conversation_id, []).append(turn)
    groups = list(by_conv.values())
    columns: dict[str, list] = {name: [getattr(g[0], name) for g in groups] for name in IDENTITY}
    blocks, sources, kinds = [], [], []
    for group in groups:
        rich = [t for t in group if t.recording_kind == "rich"]
        blocks.append(json.dumps([b for t in rich for b in t.blocks]))
        sources.append(json.dumps(list(dict.fromkeys(s for t in group for s in t.sources_used))))
        kinds.append("rich" if rich else "minimal")
    columns |= {
        "title": [titles.get(g[0].conversation_id) for g in groups],
        "turn_ids": [[t.turn_id for t in g] for g in groups],
        "turn_count": [len(g) for g in groups],
        "blocks": blocks,
        "sources_pool": sources,
        "recording_kind": kinds,
    }
    activity = raw.group_by("conversation_id").agg(
        pl.col("occurred_at").min().alias("started_at"),
        pl.col("occurred_at").max().alias("last_activity_at"),
    )
    data = from_columns(columns, TIMELINES_SCHEMA).join(activity, on="conversation_id", how="left")
    return frame(
        data.with_columns(
            pl.lit(1).alias("version"),
            pl.lit(None, dtype=pl.String).alias("forked_from"),
            pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("updated_at"),
        ).with_columns(expires_at_expr(settings, ts_column="last_activity_at", role_column=None)),
        TIMELINES_SCHEMA,
    )
