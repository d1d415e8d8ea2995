"""The native scanner (Rust, holding the contract generated from the pydantic one) never accepts
a line the pydantic contract rejects, and agrees with it on every field of the lines it accepts."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import polars as pl
import pytest
from conftest_components import NATIVE, without
from conftest_turn_record import NOW
from test_events import BASE, PAYLOADS, line

from ctxdb.contract import events
from ctxdb.contract.events import MAX_EVENT_BYTES, EventError, parse_event
from ctxdb.landing import native_contract
from ctxdb.landing.scan import _native, parse_bytes
from ctxdb.sample.generate import generate_events

pytestmark = without(NATIVE, _native is not None)

EDGE_CASES = [
    line(occurred_at="2026-11-30T10:00:00.123456789+05:30"),
    line(occurred_at="2026-11-30T10:00:00.1234567Z"),
    line(occurred_at="2026-11-30T10:00:00.5-03:30"),
    line(occurred_at="2026-11-30 10:00:00Z"),
    line(occurred_at="2026-11-30T10:00:00z"),
    line(occurred_at="2026-02-29T10:00:00Z"),
    line(occurred_at="2028-02-29T23:59:59.999999-11:59"),
    line(occurred_at=1764496800),
    line(occurred_at="2026-11-30T10:00:00"),
    line(schema_version=1.0),
    line(schema_version="1"),
    line(schema_version=True),
    line(schema_version=2),
    line(conversation_id="c1\n"),
    line(conversation_id="c.1"),
    line(conversation_id="cé"),
    line(event_id="-e1"),
    line(user_id="ü@example.com"),
    line(user_id="u+tag@example.com:8"),
    line(tenant=""),
    line(turn_id="t" * 128),
    line(turn_id="t" * 129),
    line(adapter="other"),
    line(type="user.unknown"),
    line(type="user.submission", payload={"text": "x", "event_type": "prompt", "extra": 1}),
    line(type="user.submission", payload={"text": "x", "arrived_at": "2026-11-30T10:00:00"}),
    json.dumps(
        {**BASE, "type": "user.submission", "payload": {"text": "é" * 100_000}}, ensure_ascii=False
    ),
    json.dumps(
        {**BASE, "type": "user.submission", "payload": {"text": "é" * 100_001}}, ensure_ascii=False
    ),
    line(type="user.submission", payload={"text": "x", "event_type": None}),
    line(type="user.submission", payload={"text": "x", "batch_id": None}),
    line(type="user.submission", payload=["x"]),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": True}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": 3.0}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": -1}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "name": ".."}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "name": "a/b"}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "name": "a\\b"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "path": "a//b"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "path": "/etc/x"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "path": "a/../b"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "sha256": "A" * 64}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "sha256": "a" * 63}),
    line(type="assistant.completion", payload={"text": "x", "error": "true"}),
    line(type="assistant.completion", payload={"text": None}),
    line(type="assistant.completion", payload={"text": "x", "tokens_in": -1}),
    line(type="assistant.completion", payload={}),
    line(type="turn.closed", payload={"status": "meh"}),
    line(type="turn.closed", payload={"status": None}),
    line(type="react.anchors", payload={"phrases": [""]}),
    line(type="react.anchors", payload={"phrases": ["p"] * 33}),
    line(type="react.summary", payload={"text": "s", "refs": ["r"] * 65}),
    line(type="react.summary", payload={"text": "s", "refs": ["r"] * 64}),
    line(type="react.note", payload={"text": ""}),
    line(type="react.block", payload={"block_type": "react.tool.call", "call_id": "a.b"}),
    line(type="react.block", payload={"block_type": "react.tool.call", "meta": None}),
    line(type="feedback", payload={"reaction": "meh"}),
    line(type="feedback", payload={"reaction": None, "origin": "o" * 65}),
    line(type="conversation.title", payload={"title": ""}),
    line(type="user.context", payload={"kind": "k", "event": []}),
    line(type="user.context", payload={"kind": "k", "event": {"a": [1, {"b": None}]}}),
    line(type="communicator.event", payload={"name": "chat.other"}),
    line(type="stream.aggregate", payload={"marker": "tool", "name": "n", "chunks": [1]}),
    line(type="stream.aggregate", payload={"marker": "tool", "name": "n", "chunks_num": -1}),
    # Strict types (finding 6): no value is coerced from another JSON type.
    line(type="assistant.completion", payload={"text": "x", "tokens_in": "5"}),
    line(type="assistant.completion", payload={"text": "x", "tokens_out": 5.0}),
    line(type="assistant.completion", payload={"text": "x", "error": 1}),
    line(type="stream.aggregate", payload={"marker": "tool", "name": "n", "chunks_num": "2"}),
    line(type="user.attachment", payload={**PAYLOADS["user.attachment"], "size": "3"}),
    line(type="file.hosted", payload={**PAYLOADS["file.hosted"], "size": 10.0}),
    line(type="user.submission", payload={"text": "x", "arrived_at": 1764496800}),
    line(type="user.submission", payload={"text": 5}),
    # The timestamp range (finding 7): [1970-01-01, 2200-01-01) UTC, offsets included.
    line(occurred_at="9999-12-31T23:59:59Z"),
    line(occurred_at="1969-12-31T23:59:59.999999Z"),
    line(occurred_at="1970-01-01T00:30:00+01:00"),
    line(occurred_at="1970-01-01T01:00:00+01:00"),
    line(occurred_at="1970-01-01T00:00:00Z"),
    line(occurred_at="2199-12-31T23:59:59.999999Z"),
    line(occurred_at="2199-12-31T23:30:00-01:00"),
    line(occurred_at="2200-01-01T00:00:00Z"),
    line(type="user.submission", payload={"text": "x", "arrived_at": "2200-01-01T00:00:00Z"}),
    line(type="user.submission", payload={"text": "x", "arrived_at": "1969-07-20T20:17:00Z"}),
    json.dumps({**BASE, "payload": None}),
    json.dumps({**BASE, "payload": "{}"}),
    json.dumps({**BASE, "extra": 1}),
    json.dumps(list(BASE.values())),
    line()[:-1] + ', "event_id": "e2"}',
    line(type="user.submission", payload={"text": "a"})[:-2] + ', "text": "b"}}',
    line(type="user.submission", payload={"text": 'esc "q" \\ \n \u2603 \ud83d\ude00'}),
    '{"event_id": "e1"}',
    "null",
    "[]",
    "not json",
    line() + " trailing",
    " \t" + line(),
]


def _scan(raw: str) -> dict:
    return _native.scan_events(raw.encode("utf-8", "surrogatepass"), MAX_EVENT_BYTES)


def _agree(raw: str) -> bool:
    """Whether the scanner accepted `raw`; if it did, the contract accepts the same values."""
    scan = _scan(raw)
    if scan["rows"] == 0:
        return False
    model = parse_event(raw)  # must not raise: the mirror only accepts valid lines
    row = parse_bytes(raw.encode("utf-8", "surrogatepass"), "mem", NOW).events.row(0, named=True)
    for name in events.ENVELOPE_COLUMNS:
        assert row[name] == getattr(model, name), name
    assert row["occurred_at"] == model.occurred_at.astimezone(UTC)
    assert json.loads(row["payload"]) == json.loads(raw)["payload"]
    return True


@pytest.mark.parametrize("raw", EDGE_CASES)
def test_edge_cases_are_never_accepted_by_the_mirror_alone(raw: str) -> None:
    _agree(raw)


def test_the_mirror_takes_the_common_forms_of_the_edge_cases() -> None:
    accepted = [raw for raw in EDGE_CASES if _agree(raw)]
    assert line(occurred_at="2028-02-29T23:59:59.999999-11:59") in accepted
    assert any(raw.endswith('"}}') and "é" * 100_000 in raw for raw in accepted)
    assert line(user_id="u+tag@example.com:8") in accepted
    assert " \t" + line() in accepted


@pytest.mark.parametrize("type_", sorted(PAYLOADS))
def test_every_documented_example_takes_the_native_path(type_: str) -> None:
    assert _agree(line(type=type_, payload=PAYLOADS[type_]))


def test_the_mirror_agrees_on_the_generated_sample() -> None:
    generated = generate_events(users=3, conversations=30, seed=2, now=NOW, malformed_ratio=0.05)
    lines = list(generated.lines())
    scan = _native.scan_events("\n".join(lines).encode(), MAX_EVENT_BYTES)
    assert scan["rows"] == len(generated.events)
    rejected = {number for number, _, _ in scan["rejected"]}
    for number, raw in enumerate(lines, start=1):
        if number in rejected:
            with pytest.raises(EventError):
                parse_event(raw)
    assert len(rejected) == len(generated.malformed)


def test_oversize_lines_and_blank_lines() -> None:
    big = line(type="user.submission", payload={"text": "x" * MAX_EVENT_BYTES})
    data = f"{line()}\n\n  \r\n{big}\r\n{line(event_id='e2')}\n".encode()
    scan = _native.scan_events(data, MAX_EVENT_BYTES)
    assert scan["rows"] == 2
    assert [number for number, _, _ in scan["rejected"]] == [4]
    parsed = parse_bytes(data, "mem", NOW)
    assert parsed.events["line_number"].to_list() == [1, 5]
    assert parsed.quarantine["reason"].to_list() == ["oversize"]
    for empty in (b"", b"\n\n", b" \r\n\t\n"):
        nothing = parse_bytes(empty, "mem", NOW)
        assert nothing.events.is_empty() and nothing.quarantine.is_empty()


def test_a_line_only_the_contract_accepts_lands_in_order() -> None:
    coerced = line(event_id="e2", occurred_at="2026-11-30 10:00:00Z")
    data = "\n".join([line(event_id="e1"), coerced, line(event_id="e3")]).encode()
    assert [n for n, _, _ in _native.scan_events(data, MAX_EVENT_BYTES)["rejected"]] == [2]
    parsed = parse_bytes(data, "mem", NOW).events
    assert parsed["event_id"].to_list() == ["e1", "e2", "e3"]
    assert parsed["occurred_at"][1] == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert parsed.schema["payload"] == pl.String


def test_the_built_scanner_holds_the_contract_generated_now() -> None:
    """The scanner compiled into this install embeds the contract the pydantic models generate
    today: a stale build (contract changed, not rebuilt) fails here."""
    assert json.loads(_native.CONTRACT_JSON) == native_contract.contract()


def test_the_mirror_takes_the_ends_of_the_timestamp_range_and_nothing_past_them() -> None:
    assert _agree(line(occurred_at="1970-01-01T00:00:00Z"))
    assert _agree(line(occurred_at="1970-01-01T01:00:00+01:00"))
    assert _agree(line(occurred_at="2199-12-31T23:59:59.999999Z"))
    for outside in (
        "1969-12-31T23:59:59.999999Z",
        "2199-12-31T23:30:00-01:00",
        "2200-01-01T00:00:00Z",
    ):
        assert not _agree(line(occurred_at=outside))
        with pytest.raises(EventError, match="timestamp_out_of_range"):
            parse_event(line(occurred_at=outside))


def _mutations(seed: int, count: int) -> list[str]:
    """Lines derived from valid examples by random byte edits and by swapping one field's value
    for a value of another JSON type: most are invalid, some valid in unusual forms."""
    rng = random.Random(seed)
    examples = [line(type=t, payload=p) for t, p in sorted(PAYLOADS.items())]
    odd_values = [None, True, 0, -1, 1.5, "", "x" * 300, [], {}, ["a"], {"a": 1}, "2026-11-30"]
    out = []
    for _ in range(count):
        raw = rng.choice(examples)
        if rng.random() < 0.5:
            at = rng.randrange(len(raw))
            edit = rng.choice(["drop", "insert", "replace"])
            char = rng.choice('{}[]",:\\ a1.-eE\x00\u00e9')
            if edit == "drop":
                raw = raw[:at] + raw[at + 1 :]
            elif edit == "insert":
                raw = raw[:at] + char + raw[at:]
            else:
                raw = raw[:at] + char + raw[at + 1 :]
        else:
            event = json.loads(raw)
            target = event if rng.random() < 0.4 or not event["payload"] else event["payload"]
            target[rng.choice(sorted(target))] = rng.choice(odd_values)
            raw = json.dumps(event, ensure_ascii=rng.random() < 0.5)
        out.append(raw)
    return out


def test_randomly_mutated_lines_are_never_accepted_by_the_mirror_alone() -> None:
    accepted = sum(_agree(raw) for raw in _mutations(seed=11, count=3_000))
    assert 0 < accepted < 3_000  # both paths were exercised
