"""The fast msgspec mirror never accepts a line the pydantic contract rejects, and agrees on it."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest
from conftest_turn_record import NOW
from test_events import BASE, PAYLOADS, line

from ctxdb.events import EventError, parse_event
from ctxdb.events_fast import ID_PATTERNS, fast_event
from ctxdb.generate import generate_events

EDGE_CASES = [
    line(occurred_at="2026-11-30T10:00:00.123456789+05:30"),
    line(occurred_at="2026-11-30 10:00:00Z"),
    line(occurred_at="2026-11-30T10:00:00z"),
    line(occurred_at=1764496800),
    line(occurred_at="2026-11-30T10:00:00"),
    line(schema_version=1.0),
    line(schema_version="1"),
    line(schema_version=True),
    line(conversation_id="c1\n"),
    line(conversation_id="cé"),
    line(user_id="ü@example.com"),
    line(tenant=""),
    line(turn_id="t" * 129),
    line(type="user.submission", payload={"text": "x", "event_type": "prompt", "extra": 1}),
    line(type="user.submission", payload={"text": "x", "arrived_at": "2026-11-30T10:00:00"}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": True}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": 3.0}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "name": ".."}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "path": "a//b"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "sha256": "A" * 64}),
    line(type="assistant.completion", payload={"text": "x", "error": "true"}),
    line(type="assistant.completion", payload={"text": "x", "tokens_in": -1}),
    line(type="react.anchors", payload={"phrases": [""]}),
    line(type="react.summary", payload={"text": "s", "refs": ["r"] * 65}),
    line(type="react.block", payload={"block_type": "react.tool.call", "call_id": "a.b"}),
    line(type="feedback", payload={"reaction": "meh"}),
    line(type="conversation.title", payload={"title": ""}),
    line(type="user.context", payload={"kind": "k", "event": []}),
    line(type="stream.aggregate", payload={"marker": "tool", "name": "n", "chunks": [1]}),
    json.dumps({**BASE, "payload": None}),
    json.dumps({**BASE, "extra": 1}),
    '{"event_id": "e1"}',
    "null",
    "",
]


def _accepted_fast(raw: str) -> bool:
    event = fast_event(raw)
    if event is None:
        return False
    ids = pl.DataFrame({c: [getattr(event, c)] for c in ID_PATTERNS})
    return all(ids[c].str.contains(p).all() for c, p in ID_PATTERNS.items())


def _agree(raw: str) -> None:
    if not _accepted_fast(raw):
        return
    model = parse_event(raw)  # must not raise: the mirror only accepts valid lines
    event = fast_event(raw)
    for name in (
        "event_id",
        "type",
        "tenant",
        "app",
        "agent",
        "adapter",
        "user_id",
        "conversation_id",
        "turn_id",
    ):
        assert getattr(event, name) == getattr(model, name)
    # msgspec rounds sub-microsecond digits where pydantic truncates them: at most 1 us apart.
    assert abs(event.occurred_at - model.occurred_at) <= timedelta(microseconds=1)
    assert json.loads(bytes(event.payload)) == json.loads(raw)["payload"]


@pytest.mark.parametrize("raw", EDGE_CASES)
def test_edge_cases_are_never_accepted_by_the_mirror_alone(raw: str) -> None:
    _agree(raw)


@pytest.mark.parametrize("type_", sorted(PAYLOADS))
def test_every_documented_example_takes_the_fast_path(type_: str) -> None:
    raw = line(type=type_, payload=PAYLOADS[type_])
    assert _accepted_fast(raw)
    _agree(raw)


def test_the_mirror_agrees_on_the_generated_sample() -> None:
    generated = generate_events(users=3, conversations=30, seed=2, now=NOW, malformed_ratio=0.05)
    fast = 0
    for raw in generated.lines():
        _agree(raw)
        fast += _accepted_fast(raw)
    assert fast == len(generated.events)
    for raw in generated.malformed:
        assert not _accepted_fast(raw)
        with pytest.raises(EventError):
            parse_event(raw)
