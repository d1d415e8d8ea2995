"""Group landed events by turn and build one TurnRecord per closed turn."""

from __future__ import annotations

import json
from itertools import groupby
from operator import itemgetter

import polars as pl

from ctxdb.contract.events import ENVELOPE_COLUMNS
from ctxdb.record.turnlog import TurnRecord, build_turn_record

ARRIVAL = ["occurred_at", "landed_version", "source_file", "line_number"]
EVENT_FIELDS = [*ENVELOPE_COLUMNS, "payload"]


def arrival_order(raw: pl.DataFrame) -> pl.DataFrame:
    """Events sorted by conversation, turn and arrival (time, then landing order)."""
    order = [c for c in ARRIVAL if c in raw.columns]
    return raw.sort(["conversation_id", "turn_id", *order])


def decoded_events(raw: pl.DataFrame) -> list[dict]:
    """Event dicts in arrival order with `payload` decoded from its JSON string."""
    rows = arrival_order(raw).select(EVENT_FIELDS).to_dicts()
    for row in rows:
        row["payload"] = json.loads(row["payload"])
    return rows


def build_records(raw: pl.DataFrame) -> list[TurnRecord]:
    """One TurnRecord per closed turn in `raw` (open turns wait for their `turn.closed`)."""
    records = []
    key = itemgetter("conversation_id", "turn_id")
    for _, events in groupby(decoded_events(raw), key=key):
        record = build_turn_record(list(events))
        if record is not None:
            records.append(record)
    return records
