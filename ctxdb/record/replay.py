"""`replay_artifacts`: recorded communicator events and stream aggregates, in arrival order.

Reference rules: `accounting.usage` and `chat.turn.summary` are always kept; `chat.step`,
`chat.citations` and `chat.followups` only for turns without a rich TurnLog; stream aggregates
(`conv.artifacts.stream`, chunks replaced by `chunks_num`) are skipped on rich turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import polars as pl

from ctxdb.record.expiry import expires_at_expr
from ctxdb.record.frames import empty, frame, from_rows
from ctxdb.record.records import arrival_order
from ctxdb.record.turnlog import TurnRecord
from ctxdb.settings import Settings
from ctxdb.storage.tables import REPLAY_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id", "seq"]
ALWAYS = ("accounting.usage", "chat.turn.summary")
EVENTS = "conv.artifacts.events"
STREAM = "conv.artifacts.stream"


def _item(type_: str, payload: dict) -> tuple[str, str, str | None, dict]:
    """(artifact, name, marker, data) of one replayable event."""
    if type_ == "chat.step":
        return EVENTS, "chat.step", None, payload
    if type_ == "communicator.event":
        return EVENTS, payload["name"], None, payload.get("data", {})
    data = {k: v for k, v in payload.items() if k != "chunks"}
    data["chunks_num"] = payload.get("chunks_num", len(payload.get("chunks") or []))
    return STREAM, payload["name"], payload["marker"], data


def replay_frame(
    raw: pl.DataFrame, records: Sequence[TurnRecord], settings: Settings, now: datetime
) -> pl.DataFrame:
    """REPLAY_SCHEMA rows for the closed turns in `records`."""
    kinds = {(r.conversation_id, r.turn_id): r.recording_kind for r in records}
    candidates = arrival_order(
        raw.filter(pl.col("type").is_in(["chat.step", "communicator.event", "stream.aggregate"]))
    )
    rows = []
    seqs: dict[tuple[str, str], int] = {}
    for event in candidates.to_dicts():
        key = (event["conversation_id"], event["turn_id"])
        kind = kinds.get(key)
        if kind is None:
            continue
        artifact, name, marker, data = _item(event["type"], json.loads(event["payload"]))
        if kind == "rich" and name not in ALWAYS:
            continue
        seq = seqs.get(key, 0)
        seqs[key] = seq + 1
        rows.append(
            {
                **{
                    k: event[k]
                    for k in (
                        "tenant",
                        "app",
                        "agent",
                        "user_id",
                        "conversation_id",
                        "turn_id",
                        "event_id",
                    )
                },
                "seq": seq,
                "artifact": artifact,
                "name": name,
                "marker": marker,
                "ts": event["occurred_at"],
                "data": json.dumps(data, sort_keys=True),
                "updated_at": now,
            }
        )
    if not rows:
        return empty(REPLAY_SCHEMA)
    return frame(
        from_rows(rows, REPLAY_SCHEMA).with_columns(
            expires_at_expr(settings, ts_column="ts", role_column=None)
        ),
        REPLAY_SCHEMA,
    )
