"""The raw event contract: every type validates, every kind of bad line gets its reason."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxdb.contract.events import EVENT_TYPES, MAX_EVENT_BYTES, EventError, parse_event

BASE = {
    "event_id": "e1",
    "schema_version": 1,
    "type": "turn.started",
    "occurred_at": "2026-11-30T10:00:00+02:00",
    "tenant": "acme",
    "app": "chat",
    "agent": "helper",
    "adapter": "minimal",
    "user_id": "u1@example.com",
    "conversation_id": "c1",
    "turn_id": "t1",
    "payload": {},
}
SHA = "a" * 64
PAYLOADS = {
    "turn.started": {},
    "turn.closed": {"status": "error", "error_type": "timeout"},
    "user.submission": {
        "text": "hi",
        "event_type": "steer",
        "batch_id": "b1",
        "arrived_at": "2026-11-30T08:00:01Z",
    },
    "user.context": {"kind": "selection", "label": "cells A1:B2", "ref": "app://x"},
    "user.attachment": {
        "name": "a.csv",
        "mime": "text/csv",
        "size": 3,
        "storage_ref": "conv:fi:turn_t1.user.attachments/a.csv",
        "extracted_text": "a,b",
    },
    "chat.step": {"step": "s1", "phase": "complete", "tool": "search", "status": "ok"},
    "file.hosted": {"path": "out/report.pdf", "mime": "application/pdf", "size": 10, "sha256": SHA},
    "assistant.completion": {"text": "done", "error": False, "tokens_in": 1, "tokens_out": 2},
    "react.summary": {"text": "summary", "refs": ["conv:fi:turn_t1.files/x"], "scope": "turn"},
    "react.anchors": {"phrases": ["InvalidFileException"], "entities": ["openpyxl"]},
    "react.note": {"text": "note"},
    "react.block": {"block_type": "react.tool.call", "call_id": "c1", "tool": "search"},
    "feedback": {"reaction": "up", "text": "thanks"},
    "communicator.event": {"name": "chat.citations", "data": {"items": []}},
    "stream.aggregate": {"marker": "subsystem", "name": "code_exec", "chunks": ["a", "b"]},
    "conversation.title": {"title": "Excel trouble"},
}


def line(**changes: object) -> str:
    return json.dumps({**BASE, **changes})


def reason(raw: str | bytes) -> str:
    with pytest.raises(EventError) as info:
        parse_event(raw)
    return info.value.reason


def test_every_type_has_an_example_payload() -> None:
    assert set(PAYLOADS) == set(EVENT_TYPES)


@pytest.mark.parametrize("type_", sorted(PAYLOADS))
def test_each_event_type_validates_and_normalizes_time_to_utc(type_: str) -> None:
    event = parse_event(line(type=type_, payload=PAYLOADS[type_]))
    assert event.type == type_
    assert event.occurred_at == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert event.occurred_at.utcoffset().total_seconds() == 0


def test_submission_arrival_time_is_utc_and_defaults_apply() -> None:
    event = parse_event(line(type="user.submission", payload={"text": "hi"}))
    assert event.payload.event_type == "prompt"
    assert event.payload.batch_id is None
    stamped = parse_event(line(type="user.submission", payload=PAYLOADS["user.submission"]))
    assert stamped.payload.arrived_at == datetime(2026, 11, 30, 8, 0, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("{not json", "malformed_json"),
        ("[1, 2]", "malformed_json"),
        (line(type="user.telepathy"), "unknown_type"),
        (json.dumps({k: v for k, v in BASE.items() if k != "tenant"}), "missing_field"),
        (json.dumps({k: v for k, v in BASE.items() if k != "type"}), "missing_field"),
        (line(occurred_at="2026-11-30T10:00:00"), "naive_timestamp"),
        (line(conversation_id="conv.1"), "unsafe_id"),
        (line(conversation_id="a/b"), "unsafe_id"),
        (line(conversation_id="a\\b"), "unsafe_id"),
        (line(turn_id="t.1"), "unsafe_id"),
        (line(event_id=""), "unsafe_id"),
        (line(user_id="../etc"), "unsafe_id"),
        (line(schema_version=2), "unsupported_schema_version"),
        (line(surprise=1), "unknown_field"),
        (line(adapter="autogen"), "invalid_field"),
        (line(type="user.submission", payload={"text": 42}), "wrong_type"),
        (
            line(type="user.submission", payload={"text": "x", "event_type": "shout"}),
            "invalid_field",
        ),
        (
            line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "path": "../secret"}),
            "invalid_field",
        ),
        (
            line(
                type="user.attachment", payload={**PAYLOADS["user.attachment"], "name": "a/b.csv"}
            ),
            "invalid_field",
        ),
        (line(type="react.anchors", payload={"phrases": ["p"] * 33}), "invalid_field"),
        (line(type="react.summary", payload={"text": "s" * 24_001}), "invalid_field"),
        (
            line(type="chat.step", payload={"step": "s", "phase": "start", "x": 1, "tool": 3}),
            "wrong_type",
        ),
    ],
)
def test_bad_lines_get_a_reason(raw: str, expected: str) -> None:
    assert reason(raw) == expected


def test_oversize_lines_are_rejected_before_parsing() -> None:
    big = line(type="user.submission", payload={"text": "x" * MAX_EVENT_BYTES})
    assert reason(big) == "oversize"
    assert reason(big.encode()) == "oversize"


def test_docs_examples_validate() -> None:
    """Every JSON example in docs/events.md is a valid event, one per event type."""
    text = (Path(__file__).parent.parent / "docs" / "events.md").read_text()
    examples = re.findall(r"```json\n(.*?)\n```", text, flags=re.S)
    types = [parse_event(example).type for example in examples]
    assert sorted(types) == sorted(EVENT_TYPES)
