"""Issue 24, differential (hypothesis): the native (Rust) and the pure-Python scanner give
identical tables on the same bytes, and both give what the pydantic contract says.

Each generated file holds lines built from a valid event of every type, with a few edits written
as raw JSON text: a value set or added (huge and negative integers, floats where integers belong,
`NaN`/`Infinity` literals, numbers past double range, deep nesting, strings of every unicode
category, escaped or not), a key repeated before or after its first occurrence, a field dropped,
or a string or list at, under and over each limit of the contract's JSON schema. Both scanners'
event rows (payload text included) and quarantine rows must be equal, every non-blank line must
land exactly when the contract accepts it (with its payload as written) or be quarantined with
the contract's reason, and no payload may be null (the Delta write of finding 1). Examples are
derandomized, few (under a minute) and not stored.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from conftest_components import NATIVE, without
from conftest_turn_record import NOW
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from pydantic_core import from_json
from test_events import BASE, PAYLOADS

from ctxdb.contract import events
from ctxdb.contract.events import INT64_MAX, INT64_MIN, MAX_EVENT_BYTES, EventError, parse_event
from ctxdb.landing import scan
from ctxdb.landing.scan import parse_bytes, payload_as_written

pytestmark = without(NATIVE, scan._native is not None)

DIFFERENTIAL = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CATEGORIES = (
    "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co Cn"
)
characters = st.sampled_from(CATEGORIES.split()).flatmap(
    lambda category: st.characters(categories=[category])  # type: ignore[list-item]
)
"""A character of any unicode general category, each category as likely (surrogates included)."""

NUMBERS = [
    str(INT64_MAX),
    str(INT64_MAX + 1),
    str(INT64_MIN),
    str(INT64_MIN - 1),
    str(2**64),
    "1" + "0" * 400,
    "-" + "9" * 400,
    "12345678901234567890.5",
    "-0",
    "5.0",
    "1e2",
    "1E+2",
    "-0.0",
    "1e400",
    "-1e400",
    "1e-400",
    "1.7976931348623157e308",
    "NaN",
    "Infinity",
    "-Infinity",
]
number_texts = st.one_of(
    st.sampled_from(NUMBERS),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
DEPTHS = [62, 63, 64, 65, 126, 127, 128, 129, 199, 200, 201, 260]
nested_texts = st.tuples(st.sampled_from(DEPTHS), st.booleans()).map(
    lambda d: "[" * d[0] + "]" * d[0] if d[1] else '{"k":' * d[0] + "0" + "}" * d[0]
)
"""A value nested that many levels (inside a payload, one level more)."""


@st.composite
def string_texts(draw: st.DrawFn, length: int | None = None) -> str:
    """A JSON string of characters of any category (`length` code points when given)."""
    text = draw(st.text(characters, max_size=6 if length is None else min(length, 3)))
    if length is not None:
        text += draw(characters) * (length - len(text))
    return json.dumps(text, ensure_ascii=draw(st.booleans()))


value_texts = st.one_of(
    number_texts,
    number_texts,
    nested_texts,
    string_texts(),
    st.sampled_from(["true", "false", "null", "{}", "[]", '[1, "a", {"b": null}]']),
)


def _limits() -> list[tuple[str, str, str, int]]:
    """(event type, field, what, size) for every length limit of the contract: `chars` of a
    string, `items` of a list, `item` chars of each list item; minimums and maximums."""
    found = [("*", name, "id", 128) for name in ("event_id", "conversation_id", "tenant")]
    for type_, model in events.PAYLOADS.items():
        for name, prop in model.model_json_schema().get("properties", {}).items():
            for option in prop.get("anyOf", [prop]):
                for bound in ("minLength", "maxLength"):
                    if bound in option:
                        found.append((type_, name, "chars", option[bound]))
                    if bound in option.get("items", {}):
                        found.append((type_, name, "item", option["items"][bound]))
                if "maxItems" in option:
                    found.append((type_, name, "items", option["maxItems"]))
    return found


LIMITS = _limits()
VALID = {type_: {**BASE, "type": type_, "payload": payload} for type_, payload in PAYLOADS.items()}
Pairs = list[tuple[str, str]]


def pairs(value: dict[str, Any]) -> Pairs:
    """An object as (key, JSON text) pairs, in which keys may repeat."""
    return [(k, json.dumps(v)) for k, v in value.items()]


def render(items: Pairs) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in items) + "}"


def _set(items: Pairs, key: str, text: str) -> Pairs:
    if key in dict(items):
        return [(k, text if k == key else v) for k, v in items]
    return [*items, (key, text)]


@st.composite
def limit_edit(draw: st.DrawFn, type_: str) -> tuple[str, str, str]:
    """(target, key, JSON text) for a value at, under or over one limit of `type_`."""
    own = [limit for limit in LIMITS if limit[0] in ("*", type_)]
    if not own:
        return "payload", "text", draw(string_texts())
    owner, name, what, size = draw(st.sampled_from(own))
    size = max(0, size + draw(st.sampled_from([-1, 0, 1])))
    target = "envelope" if owner == "*" else "payload"
    if what == "id":
        return target, name, json.dumps("a" * size)
    if what == "chars":
        return target, name, draw(string_texts(size))
    if what == "item":
        return target, name, f"[{draw(string_texts(size))}]"
    return target, name, "[" + ", ".join(['"x"'] * size) + "]"


@st.composite
def bound_edit(draw: st.DrawFn, type_: str) -> tuple[str, str]:
    """(payload key, JSON text) for a number or a nesting depth at or past a bound, in an
    integer field, an unknown key or inside a free-form object."""
    schema = events.PAYLOADS[type_].model_json_schema().get("properties", {})
    integers = [k for k, p in schema.items() if "integer" in json.dumps(p)]
    objects = [k for k, p in schema.items() if '"object"' in json.dumps(p)]
    key = draw(st.sampled_from(["not_in_contract", *integers, *objects]))
    text = draw(st.one_of(st.sampled_from(NUMBERS), nested_texts))
    return key, '{"n": [' + text + "]}" if key in objects else text


@st.composite
def edited_lines(draw: st.DrawFn) -> bytes:
    """A valid event of some type with one to three raw-text edits."""
    type_ = draw(st.sampled_from(sorted(VALID)))
    envelope = pairs({k: v for k, v in VALID[type_].items() if k != "payload"})
    payload = pairs(VALID[type_]["payload"])
    fields = sorted({*events.PAYLOADS[type_].model_fields, "not_in_contract"})
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["set", "set", "repeat", "drop", "limit", "bound"]))
        on_payload = draw(st.booleans()) or kind in ("limit", "bound")
        keys = fields if on_payload else [k for k, _ in envelope]
        key = draw(st.sampled_from(["not_in_contract", *keys] if on_payload else keys))
        text = draw(value_texts)
        if kind == "limit":
            target, key, text = draw(limit_edit(type_))
            on_payload = target == "payload"
        if kind == "bound":
            key, text = draw(bound_edit(type_))
        items = payload if on_payload else envelope
        if kind in ("set", "limit", "bound"):
            items = _set(items, key, text)
        elif kind == "repeat":
            items = [(key, text), *items] if draw(st.booleans()) else [*items, (key, text)]
        else:
            items = [(k, v) for k, v in items if k != key]
        payload, envelope = (items, envelope) if on_payload else (payload, items)
    envelope = [(k, v) for k, v in envelope if k != "payload"] + [("payload", render(payload))]
    return render(envelope).encode("utf-8", "surrogatepass")


HIDDEN_DEPTH = (
    json.dumps(VALID["assistant.completion"])[:-2]
    + ', "not_in_contract": '
    + '{"k": ' * 200
    + "0"
    + "}" * 200
    + ', "not_in_contract": 1}}'
).encode()
"""A payload nested past the contract parser's recursion limit under a key that a later
duplicate replaces (hypothesis found it): both scanners leave it to the contract, which refuses
it; the pure-Python scanner once landed it (its parser keeps the last duplicate only)."""


@st.composite
def files(draw: st.DrawFn) -> bytes:
    valid = st.sampled_from(sorted(VALID)).map(lambda t: json.dumps(VALID[t]).encode())
    lines = draw(st.lists(st.one_of(edited_lines(), edited_lines(), valid), min_size=1, max_size=6))
    return draw(st.sampled_from([b"\n", b"\r\n"])).join(lines)


def expected(raw: bytes) -> tuple[str, str | None]:
    """What the contract says of one line: ("landed", payload as written) or ("quarantined",
    reason)."""
    try:
        parse_event(raw)
        return "landed", payload_as_written(raw)
    except EventError as exc:
        return "quarantined", exc.reason


def check(data: bytes) -> dict[str, int]:
    """Both scanners' tables are equal and are the contract's verdicts; the count of each."""
    native = parse_bytes(data, "mem", NOW, scanner="native")
    python = parse_bytes(data, "mem", NOW, scanner="python")
    assert_frame_equal(native.events, python.events)
    assert_frame_equal(native.quarantine, python.quarantine)
    assert native.events["payload"].null_count() == 0
    landed = {row["line_number"]: row for row in native.events.iter_rows(named=True)}
    refused = {row["line_number"]: row for row in native.quarantine.iter_rows(named=True)}
    counts = {"landed": 0, "quarantined": 0}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.removesuffix(b"\r")
        if not raw.strip():
            continue
        verdict, value = expected(raw)
        counts[verdict] += 1
        if verdict == "landed":
            row = landed[number]
            assert row["payload"] == value
            assert json.dumps(from_json(row["payload"])) == json.dumps(from_json(raw)["payload"])
        else:
            assert refused[number]["reason"] == value, refused[number]["detail"]
    assert len(landed) + len(refused) == sum(counts.values())
    return counts


EXTREMES = [
    '"tokens_out": ' + "1" * 400,
    '"tokens_in": 9223372036854775808',
    '"tokens_in": 9223372036854775807',
    '"tokens_in": -9223372036854775809',
    '"tokens_in": 5.0',
    '"tokens_in": NaN',
    '"not_in_contract": Infinity',
    '"not_in_contract": 1e400',
    '"not_in_contract": 1e-400',
    '"not_in_contract": ' + "[" * 63 + "]" * 63,
    '"not_in_contract": ' + "[" * 64 + "]" * 64,
    '"not_in_contract": ' + "[" * 130 + "]" * 130,
    '"not_in_contract": NaN, "not_in_contract": 1',
    '"text": "a", "text": "b"',
]


@pytest.mark.parametrize("edit", EXTREMES)
def test_both_scanners_agree_on_each_extreme_value(edit: str) -> None:
    envelope = pairs({**BASE, "type": "assistant.completion", "payload": {}})[:-1]
    check(render([*envelope, ("payload", "{" + edit + "}")]).encode())


def test_a_nan_under_a_repeated_envelope_key_is_quarantined_not_landed() -> None:
    """The contract's parser reads NaN and keeps the last of a repeated key; the line is not
    JSON, so it is quarantined (its payload could not be cut out as written)."""
    raw = json.dumps(VALID["turn.started"])
    data = ('{"event_id": NaN, ' + raw[1:]).encode()
    assert check(data) == {"landed": 0, "quarantined": 1}
    assert parse_bytes(data, "mem", NOW).quarantine["reason"].to_list() == ["malformed_json"]


def test_both_scanners_give_identical_tables_on_generated_lines() -> None:
    """The property over generated files; then, that the examples reached every side: lines
    each scanner takes alone, lines only the contract takes, and each bound's reason."""
    reached: Counter[str] = Counter()

    @DIFFERENTIAL
    @given(data=files())
    @example(data=json.dumps(VALID["user.submission"]).encode())
    @example(data=HIDDEN_DEPTH)
    def identical(data: bytes) -> None:
        reached.update(check(data))
        reached["fast"] += scan._native.scan_events(data, MAX_EVENT_BYTES)["rows"]
        reached.update(parse_bytes(data, "mem", NOW).quarantine["reason"])

    identical()
    assert reached["fast"] > 0 and reached["landed"] > reached["fast"]
    assert {"number_out_of_range", "nesting_too_deep", "wrong_type", "invalid_field"} <= set(
        reached
    ), reached
