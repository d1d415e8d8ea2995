"""Issue 24, landing: no single payload value halts landing, and every number lands as a value
the tables and derivation hold.

Finding 1: one event with a 400-digit integer (`tokens_out`, an attachment `size`) made every
`ctxdb land` fail with the native scanner (the contract took the line, then its payload came out
null and the Delta write refused it). Such a line is now quarantined as `number_out_of_range`
with its raw line, and every other line of the file lands.
Finding 2: `tokens_in` of 2**63 or more landed, then its conversation failed to derive (Int64
overflow). The contract bounds every integer field to signed 64-bit and refuses it at landing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest_components import NATIVE, skip_missing
from conftest_turn_record import NOW, Turn, settings_for, write_jsonl

from ctxdb.contract import events
from ctxdb.contract.events import INT64_MAX, INT64_MIN, EventError, parse_event
from ctxdb.landing import scan
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import QUARANTINED_EVENTS, RAW_TURN_EVENTS, TURN_LOGS

HUGE = 10**400


@pytest.fixture(params=["native", "python"])
def scanner(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and scan._native is None:
        skip_missing(NATIVE)
    return request.param


ATTACHMENT = {"name": "a.csv", "mime": "text/csv", "storage_ref": "r", "size": HUGE}


@pytest.mark.parametrize(
    ("type_", "payload", "path"),
    [
        ("assistant.completion", {"text": "x", "tokens_out": HUGE}, "payload.tokens_out"),
        ("assistant.completion", {"text": "x", "tokens_in": -HUGE}, "payload.tokens_in"),
        ("user.attachment", ATTACHMENT, "payload.size"),
        ("user.context", {"kind": "k", "event": {"n": [1, HUGE]}}, "payload.event.n.1"),
        ("assistant.completion", {"text": "x", "not_in_contract": HUGE}, "payload.not_in_contract"),
    ],
)
def test_huge_integer_payload_is_quarantined_not_halting(
    tmp_path: Path, scanner: str, type_: str, payload: dict, path: str
) -> None:
    poison = Turn("c-poison", "t1", tenant="other").add(type_, payload)
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", [*Turn("c-a", "t1").basic().events, poison])
    write_jsonl(landing / "b.jsonl", Turn("c-b", "t1", tenant="third").basic().events)
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(landing), now=NOW, scanner=scanner)
    assert (stats.landed, stats.reasons) == (8, {"number_out_of_range": 1})
    row = store.read(QUARANTINED_EVENTS).row(0, named=True)
    assert row["raw_line"] == json.dumps(poison)
    assert row["detail"] == f"{path}: integer outside signed 64-bit [{INT64_MIN}, {INT64_MAX}]"
    assert row["event_id"] == poison["event_id"]
    assert land(store, str(landing), now=NOW, scanner=scanner).landed == 0  # a rerun goes on
    write_jsonl(landing / "c.jsonl", Turn("c-c", "t1").basic().events)
    assert land(store, str(landing), now=NOW, scanner=scanner).landed == 4
    assert derive(store, settings_for(tmp_path), now=NOW).turns == 3


@pytest.mark.parametrize("tokens_in", [2**63, 10**19, 2**64, 10**25])
def test_tokens_in_over_int64_refused_at_landing(
    tmp_path: Path, scanner: str, tokens_in: int
) -> None:
    over = Turn("c-over", "t1").basic()
    over.events[2]["payload"]["tokens_in"] = tokens_in
    at_max = Turn("c-max", "t1").basic()
    at_max.events[2]["payload"]["tokens_in"] = INT64_MAX
    write_jsonl(tmp_path / "landing" / "a.jsonl", [*over.events, *at_max.events])
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(tmp_path / "landing"), now=NOW, scanner=scanner)
    assert (stats.landed, stats.reasons) == (7, {"number_out_of_range": 1})
    assert store.read(RAW_TURN_EVENTS).height == 7
    assert derive(store, settings_for(tmp_path), now=NOW).turns == 2
    logs = store.read(TURN_LOGS).sort("conversation_id")
    assert logs.select("conversation_id", "tokens_in").rows() == [
        ("c-max", INT64_MAX),
        ("c-over", None),
    ]


def _integer_bounds(schema: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, minimum, maximum) of every integer in a JSON schema."""
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "integer":
            found.append((path, schema.get("minimum"), schema.get("maximum")))
        for key, value in schema.items():
            found += _integer_bounds(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found += _integer_bounds(value, f"{path}.{index}")
    return found


@pytest.mark.parametrize("type_", sorted(events.PAYLOADS))
def test_every_integer_field_of_the_contract_fits_an_int64_column(type_: str) -> None:
    for path, low, high in _integer_bounds(events.PAYLOADS[type_].model_json_schema()):
        assert low is not None and high is not None, f"{type_}{path} is unbounded"
        assert INT64_MIN <= low <= high <= INT64_MAX, path


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"text": "x", "tokens_in": INT64_MAX, "tokens_out": 0}, None),
        ({"text": "x", "tokens_in": -1}, "invalid_field"),
        ({"text": "x", "tokens_in": 5.0}, "wrong_type"),
        ({"text": "x", "tokens_in": INT64_MAX + 1}, "number_out_of_range"),
        ({"text": "x", "extra": INT64_MIN}, None),
        ({"text": "x", "extra": INT64_MIN - 1}, "number_out_of_range"),
        ({"text": "x", "extra": {"deep": float("nan")}}, "number_out_of_range"),
        ({"text": "x", "extra": [float("-inf")]}, "number_out_of_range"),
        ({"text": "x", "extra": 1.5e308}, None),
    ],
)
def test_the_contract_refuses_numbers_the_tables_cannot_hold(
    payload: dict, reason: str | None
) -> None:
    raw = json.dumps(Turn("c1", "t1").add("assistant.completion", payload))
    if reason is None:
        parse_event(raw)
        return
    with pytest.raises(EventError) as info:
        parse_event(raw)
    assert info.value.reason == reason


def test_a_float_beyond_double_range_and_deep_nesting_are_refused() -> None:
    base = json.dumps(Turn("c1", "t1").add("assistant.completion", {"text": "x", "extra": 0}))

    def nested(levels: int) -> str:
        return base.replace('"extra": 0', '"extra": ' + "[" * levels + "]" * levels)

    with pytest.raises(EventError, match="number_out_of_range: payload.extra: inf"):
        parse_event(base.replace('"extra": 0', '"extra": 1e400'))
    parse_event(nested(events.PAYLOAD_MAX_DEPTH - 1))  # the payload object is level 1
    with pytest.raises(EventError, match="nesting_too_deep: payload.extra.0"):
        parse_event(nested(events.PAYLOAD_MAX_DEPTH))


def test_token_sums_of_a_turn_saturate_at_the_int64_bound(tmp_path: Path) -> None:
    """Each count is within the bound, but two completions of one turn at INT64_MAX add up past
    it: the turn derives with its sum saturated instead of failing its conversation."""
    turn = Turn("c-sum", "t1")
    turn.add("turn.started")
    turn.add("user.submission", {"text": "q", "event_type": "prompt"})
    for _ in range(2):
        turn.add("assistant.completion", {"text": "a", "tokens_in": INT64_MAX, "tokens_out": 1})
    turn.add("turn.closed", {"status": "ok"})
    write_jsonl(tmp_path / "landing" / "a.jsonl", turn.events)
    store = DeltaStore(str(tmp_path / "delta"))
    assert land(store, str(tmp_path / "landing"), now=NOW).landed == 5
    stats = derive(store, settings_for(tmp_path), now=NOW)
    assert (stats.turns, stats.failed) == (1, 0)
    row = store.read(TURN_LOGS).select("tokens_in", "tokens_out").row(0)
    assert row == (INT64_MAX, 2)


@pytest.mark.parametrize("depth", [500, 1000, 5000])
@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deep_nesting_is_quarantined_not_halting(
    tmp_path: Path, scanner: str, depth: int, opener: str
) -> None:
    """A probe found one line nested 1,000 deep stopped every landing (msgspec's RecursionError
    escaped the scanners): it is now quarantined as `nesting_too_deep`, and the rest lands."""
    closer = "]" if opener == "[" else "}"
    deep = opener * depth + "1" + closer * depth
    poison = Turn("c-deep", "t1", tenant="other").add("user.context", {"kind": "k", "event": {}})
    raw = json.dumps(poison).replace('"event": {}', f'"event": {deep}')
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", Turn("c-a", "t1").basic().events)
    (landing / "a.jsonl").write_text((landing / "a.jsonl").read_text() + raw + "\n")
    write_jsonl(landing / "b.jsonl", Turn("c-b", "t1").basic().events)
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(landing), now=NOW, scanner=scanner)
    assert (stats.landed, stats.reasons) == (8, {"nesting_too_deep": 1})
    row = store.read(QUARANTINED_EVENTS).row(0, named=True)
    assert row["raw_line"] == raw
