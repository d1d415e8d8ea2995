"""Group landed events by turn and assemble one `Turn` per closed turn.

Polars sorts the events of the closed turns, shapes their times (epoch microseconds and the
TurnLog's ISO text) and computes every per-turn fact that needs no payload (`FACTS`: first and
closing events, start and last time, event ids, recording kind, feedback count); payloads are
decoded in one msgspec call, and Python assembles each turn's blocks from its block-making events
only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from ctxdb.contract.events import RICH_ADAPTERS, RICH_EVENT_TYPES
from ctxdb.record.turns import BLOCK_EVENT_TYPES, IDENTITY, Turn, TurnRecord, assemble_turn

ARRIVAL = ["occurred_at", "landed_version", "source_file", "line_number"]
TURN = ["conversation_id", "turn_id"]


def arrival_order(raw: pl.DataFrame) -> pl.DataFrame:
    """Events sorted by conversation, turn and arrival (time, then landing order)."""
    order = [c for c in ARRIVAL if c in raw.columns]
    return raw.sort([*TURN, *order])


def iso_expr(column: str) -> pl.Expr:
    """A UTC time as the TurnLog JSON writes it (pydantic: no fraction when it is zero)."""
    ts = pl.col(column)
    return (
        pl.when(ts.dt.microsecond() == 0)
        .then(ts.dt.to_string("%Y-%m-%dT%H:%M:%SZ"))
        .otherwise(ts.dt.to_string("%Y-%m-%dT%H:%M:%S%.6fZ"))
    )


def decode_payloads(payloads: pl.Series) -> list[Any]:
    """Every payload JSON text decoded (one msgspec call; `json.loads` per text if it refuses)."""
    texts = payloads.to_list()
    try:
        return msgspec.json.decode(("[" + ",".join(texts) + "]").encode())
    except msgspec.DecodeError:
        return [json.loads(t) for t in texts]


def _row_where(kind: str) -> pl.Expr:
    return pl.col("row").filter(pl.col("type") == kind)


def _facts() -> list[pl.Expr]:
    """Per-turn aggregates over its events in arrival order (`row`: index into the frame)."""
    kind, ts = pl.col("type"), pl.col("ts")
    started = _row_where("turn.started").get(ts.filter(kind == "turn.started").arg_min())
    return [
        pl.len().alias("n"),
        pl.col("row").first().alias("first"),
        _row_where("turn.closed").alias("closes"),
        pl.coalesce(started, pl.col("row").get(ts.arg_min())).alias("started"),
        ts.max().alias("last_ts"),
        pl.col("event_id").alias("event_ids"),
        (pl.col("adapter").is_in(RICH_ADAPTERS) | kind.is_in(RICH_EVENT_TYPES)).any().alias("rich"),
        (pl.col("adapter") == "react").any().alias("react"),
        (kind == "feedback").sum().alias("feedback_count"),
        _row_where("feedback").last().alias("feedback_last"),
        _row_where("communicator.event").alias("communicator"),
        kind.is_in(BLOCK_EVENT_TYPES).sum().alias("block_events"),
    ]


@dataclass
class ClosedEvents:
    """The events of the closed turns of some conversations, in arrival order.

    `frame` holds them (with `ts`, epoch microseconds, `iso` and `seq`, the index within the
    turn), `payloads` the decoded payloads row for row, `facts` one row per turn (`_facts`)."""

    frame: pl.DataFrame
    payloads: list[Any]
    facts: pl.DataFrame


def closed_events(raw: pl.DataFrame) -> ClosedEvents:
    """The events of `raw`'s closed turns (open turns wait for their `turn.closed`)."""
    frame = (
        arrival_order(raw)
        .filter((pl.col("type") == "turn.closed").any().over(TURN))
        .with_columns(
            pl.col("occurred_at").dt.epoch("us").alias("ts"),
            iso_expr("occurred_at").alias("iso"),
            pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
            pl.int_range(pl.len(), dtype=pl.Int64).over(TURN).alias("seq"),
        )
    )
    facts = frame.group_by(TURN, maintain_order=True).agg(_facts())
    return ClosedEvents(frame, decode_payloads(frame["payload"]), facts)


def build_turns(events: ClosedEvents) -> list[Turn]:
    """One `Turn` per closed turn, in (conversation, turn) order."""
    frame, payloads = events.frame, events.payloads
    blocks = frame.filter(pl.col("type").is_in(BLOCK_EVENT_TYPES))
    rows = [
        {"event_id": i, "type": t, "payload": payloads[r], "ts": ts, "iso": iso, "seq": seq}
        for i, t, r, ts, iso, seq in zip(
            *(blocks[c].to_list() for c in ("event_id", "type", "row", "ts", "iso", "seq")),
            strict=True,
        )
    ]
    columns = {c: frame[c].to_list() for c in (*IDENTITY, "adapter", "ts", "iso")}
    turns = []
    start = 0
    for facts in events.facts.drop(TURN).iter_rows(named=True):
        end = start + facts["block_events"]
        turn = assemble_turn(rows[start:end], facts, columns, payloads)
        start = end
        turns.append(turn)
    return fill_projects(turns)


def fill_projects(turns: list[Turn]) -> list[Turn]:
    """Give each turn without a `project` its conversation's first known one (by start time):
    turns captured before their host recorded projects get it when their conversation is
    derived again (a resumed session, `ctxdb derive --full`). A batch holds whole conversations."""
    first: dict[tuple[str, ...], str] = {}
    for turn in sorted(turns, key=lambda t: (t.started_at, t.turn_id)):
        if turn.project is not None:
            key = (turn.tenant, turn.app, turn.user_id, turn.conversation_id)
            first.setdefault(key, turn.project)
    for turn in turns:
        if turn.project is None:
            turn.project = first.get((turn.tenant, turn.app, turn.user_id, turn.conversation_id))
    return turns


def frame_of(events: list[dict[str, Any]]) -> pl.DataFrame:
    """Decoded event dicts (aware `occurred_at`, payload dicts), in arrival order, as the raw
    events frame derivation reads."""
    return pl.DataFrame(
        {
            **{c: [e[c] for e in events] for c in (*IDENTITY, "event_id", "type", "adapter")},
            "occurred_at": [e["occurred_at"] for e in events],
            "payload": [json.dumps(e["payload"]) for e in events],
            "line_number": list(range(len(events))),
        }
    ).with_columns(pl.col("occurred_at").dt.convert_time_zone("UTC").dt.cast_time_unit("us"))


def build_turn(events: list[dict[str, Any]]) -> Turn | None:
    """The `Turn` of one turn's decoded event dicts (aware `occurred_at`, payload dicts, arrival
    order), through the same path as derivation; None while the turn is not closed."""
    turns = build_turns(closed_events(frame_of(events)))
    return turns[0] if turns else None


def build_turn_record(events: list[dict[str, Any]]) -> TurnRecord | None:
    """`build_turn` as the pydantic `TurnRecord`."""
    turn = build_turn(events)
    return None if turn is None else turn.to_record()
