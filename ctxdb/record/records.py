"""Group landed events by turn and assemble one `Turn` per closed turn.

The events of closed turns are sorted and shaped by polars (epoch microseconds and the TurnLog's
ISO text of every time), their payloads decoded in one msgspec call, and each turn is assembled
from column slices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from ctxdb.record.turnlog import IDENTITY, Turn, assemble_turn

ARRIVAL = ["occurred_at", "landed_version", "source_file", "line_number"]
COLUMNS = ["event_id", "type", "adapter"]


def arrival_order(raw: pl.DataFrame) -> pl.DataFrame:
    """Events sorted by conversation, turn and arrival (time, then landing order)."""
    order = [c for c in ARRIVAL if c in raw.columns]
    return raw.sort(["conversation_id", "turn_id", *order])


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


@dataclass
class ClosedEvents:
    """The events of the closed turns of some conversations, in arrival order.

    `frame` holds them with `ts` (epoch microseconds) and `iso` columns, `payloads` the decoded
    payloads row for row, `starts` the first row of every turn (and the row count last)."""

    frame: pl.DataFrame
    payloads: list[Any]
    starts: list[int]


def closed_events(raw: pl.DataFrame) -> ClosedEvents:
    """The events of `raw`'s closed turns (open turns wait for their `turn.closed`)."""
    turn = ["conversation_id", "turn_id"]
    frame = (
        arrival_order(raw)
        .filter((pl.col("type") == "turn.closed").any().over(turn))
        .with_columns(
            pl.col("occurred_at").dt.epoch("us").alias("ts"), iso_expr("occurred_at").alias("iso")
        )
    )
    new_turn = (pl.col("conversation_id") != pl.col("conversation_id").shift()) | (
        pl.col("turn_id") != pl.col("turn_id").shift()
    )
    starts = frame.select(new_turn.fill_null(True).arg_true())[:, 0].to_list()
    return ClosedEvents(frame, decode_payloads(frame["payload"]), [*starts, frame.height])


def build_turns(events: ClosedEvents) -> list[Turn]:
    """One `Turn` per closed turn, in (conversation, turn) order."""
    frame = events.frame
    rows = [
        {"event_id": i, "type": t, "adapter": a, "payload": p, "ts": ts, "iso": iso}
        for i, t, a, p, ts, iso in zip(
            *(frame[c].to_list() for c in COLUMNS),
            events.payloads,
            frame["ts"].to_list(),
            frame["iso"].to_list(),
            strict=True,
        )
    ]
    identity = {c: frame[c].to_list() for c in IDENTITY}
    turns = []
    for a, b in zip(events.starts, events.starts[1:], strict=False):
        turn = assemble_turn(rows[a:b], {c: column[a] for c, column in identity.items()})
        if turn is not None:
            turns.append(turn)
    return turns
