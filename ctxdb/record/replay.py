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
from ctxdb.record.frames import empty, frame, from_columns
from ctxdb.record.records import ClosedEvents
from ctxdb.record.superseding import superseded
from ctxdb.record.turns import Turn
from ctxdb.settings import Settings
from ctxdb.storage.tables import REPLAY_SCHEMA

KEYS = ["tenant", "app", "user_id", "conversation_id", "turn_id", "seq"]
ALWAYS = ("accounting.usage", "chat.turn.summary")
EVENTS = "conv.artifacts.events"
STREAM = "conv.artifacts.stream"
REPLAYED = ["chat.step", "communicator.event", "stream.aggregate"]
IDENTITY = ["tenant", "app", "agent", "user_id", "conversation_id", "turn_id"]
_SORTED_JSON = json.JSONEncoder(sort_keys=True).encode
"""`json.dumps(value, sort_keys=True)` without building an encoder per call."""


def _item(type_: str, payload: dict) -> tuple[str, str, str | None, dict]:
    """(artifact, name, marker, data) of one replayable event."""
    if type_ == "chat.step":
        return EVENTS, "chat.step", None, payload
    if type_ == "communicator.event":
        return EVENTS, payload["name"], None, payload.get("data", {})
    data = {k: v for k, v in payload.items() if k != "chunks"}
    data["chunks_num"] = payload.get("chunks_num", len(payload.get("chunks") or []))
    return STREAM, payload["name"], payload["marker"], data


def _superseded_steps(picked: pl.DataFrame, payloads: Sequence) -> set[str]:
    """The ids of the steps among `picked` that the host's own steps supersede
    (`ctxdb.record.superseding`), as in the TurnLog."""
    steps = picked.filter(pl.col("type") == "chat.step")
    by_turn: dict[tuple[str, str], list[dict]] = {}
    for conversation, turn, event_id, row in steps.select(
        "conversation_id", "turn_id", "event_id", "row"
    ).iter_rows():
        step = {"type": "chat.step", "event_id": event_id, "payload": payloads[row]}
        by_turn.setdefault((conversation, turn), []).append(step)
    return {event_id for group in by_turn.values() for event_id in superseded(group)}


def replay_frame(
    events: ClosedEvents, turns: Sequence[Turn], settings: Settings, now: datetime
) -> pl.DataFrame:
    """REPLAY_SCHEMA rows for the closed turns in `turns` (`events`: their events)."""
    kinds = {(t.conversation_id, t.turn_id): t.recording_kind for t in turns}
    data = events.frame
    picked = data.filter(pl.col("type").is_in(REPLAYED))
    dropped = _superseded_steps(picked, events.payloads)
    rows = picked["row"].to_list()
    columns: dict[str, list] = {name: [] for name in (*IDENTITY, "event_id", "ts")}
    values = {name: picked[name].to_list() for name in columns}
    types = picked["type"].to_list()
    seq, artifact, name, marker, payload = [], [], [], [], []
    seqs: dict[tuple[str, str], int] = {}
    for i, row in enumerate(rows):
        key = (values["conversation_id"][i], values["turn_id"][i])
        kind = kinds.get(key)
        if kind is None or values["event_id"][i] in dropped:
            continue
        item = _item(types[i], events.payloads[row])
        if kind == "rich" and item[1] not in ALWAYS:
            continue
        n = seqs.get(key, 0)
        seqs[key] = n + 1
        for column, values_of in values.items():
            columns[column].append(values_of[i])
        seq.append(n)
        artifact.append(item[0])
        name.append(item[1])
        marker.append(item[2])
        payload.append(_SORTED_JSON(item[3]))
    if not seq:
        return empty(REPLAY_SCHEMA)
    columns |= {"seq": seq, "artifact": artifact, "name": name, "marker": marker, "data": payload}
    return frame(
        from_columns(columns, REPLAY_SCHEMA, micros=("ts",)).with_columns(
            pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("updated_at"),
            expires_at_expr(settings, ts_column="ts", role_column=None),
        ),
        REPLAY_SCHEMA,
    )
