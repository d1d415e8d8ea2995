"""Issue 12, property-based (hypothesis): any bytes in a landing file either land exactly once or
are quarantined with a reason, and never stop the run; the contract never coerces a value, holds
its timestamp range, and answers every input with a model or an `EventError`; neither scanner
accepts what the contract refuses.

Examples are drawn from valid events (every type), the same events with one value swapped for an
arbitrary JSON value or a few bytes spliced in, arbitrary text and arbitrary bytes, in plain and
gzip files (some cut short), with and without a byte order mark and CRLF endings. Runs are
derandomized so a failure reproduces; no example database is written.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
from conftest_turn_record import NOW
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_events import BASE, PAYLOADS, line

from ctxdb.contract import events
from ctxdb.contract.events import MAX_EVENT_BYTES, EventError, parse_event
from ctxdb.landing import mirror, scan
from ctxdb.landing.run import land
from ctxdb.landing.scan import parse_bytes
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
    SCHEMAS,
)

SCANNERS = ["python"] + ([] if scan._native is None else ["native"])
CHEAP = settings(max_examples=300, deadline=None, derandomize=True, database=None)
LANDINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REASONS = {
    "malformed_json",
    "oversize",
    "unknown_type",
    "missing_field",
    "naive_timestamp",
    "timestamp_out_of_range",
    "number_out_of_range",
    "nesting_too_deep",
    "wrong_type",
    "unsafe_id",
    "unsupported_schema_version",
    "unknown_field",
    "invalid_field",
    "conversation_owner_mismatch",
    "purged_conversation",
    "event_id_conflict",
}
"""Every quarantine reason docs/events.md lists."""

VALID = [line(type=type_, payload=payload) for type_, payload in sorted(PAYLOADS.items())]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def swapped(draw: st.DrawFn) -> str:
    """A valid event with one envelope or payload value replaced by an arbitrary JSON value."""
    event = json.loads(draw(st.sampled_from(VALID)))
    target = event if draw(st.booleans()) or not event["payload"] else event["payload"]
    target[draw(st.sampled_from(sorted(target)))] = draw(json_values)
    return json.dumps(event, ensure_ascii=draw(st.booleans()))


@st.composite
def spliced(draw: st.DrawFn) -> bytes:
    """A valid event line with a few arbitrary bytes written over or into it."""
    raw = draw(st.sampled_from(VALID)).encode()
    at = draw(st.integers(0, len(raw)))
    cut = draw(st.integers(0, 3))
    return raw[:at] + draw(st.binary(max_size=4)) + raw[at + cut :]


@st.composite
def renamed(draw: st.DrawFn) -> str:
    """A valid event with an id from a small set (so ids repeat, with the same or other content)."""
    event = json.loads(draw(st.sampled_from(VALID)))
    event["event_id"] = draw(st.sampled_from(["e1", "e2", "e3"]))
    event["user_id"] = draw(st.sampled_from(["u1", "u2"]))
    return json.dumps(event)


lines = st.one_of(
    st.sampled_from(VALID).map(str.encode),
    renamed().map(str.encode),
    swapped().map(lambda s: s.encode("utf-8", "surrogatepass")),
    spliced(),
    st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=80),
    st.sampled_from([b"", b"   ", b"\t\r", b"\x0b\x0c", b"null", b"[]", b"{}"]),
)


@st.composite
def file_bytes(draw: st.DrawFn) -> bytes:
    ending = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = ending.join(draw(st.lists(lines, max_size=10)))
    if draw(st.booleans()):
        data += ending
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + data


def non_blank_lines(data: bytes) -> list[int]:
    """The 1-based numbers of the lines landing must account for (split on `\\n`, a trailing
    `\\r` dropped, blank lines skipped, a leading byte order mark dropped)."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    numbers = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.removesuffix(b"\r").strip():
            numbers.append(number)
    return numbers


@CHEAP
@given(data=file_bytes())
def test_every_non_blank_line_is_an_event_or_a_quarantine_row_with_a_reason(data: bytes) -> None:
    expected = non_blank_lines(data)
    outcomes = {}
    for scanner in SCANNERS:
        parsed = parse_bytes(data, "mem", NOW, scanner=scanner)
        landed = parsed.events["line_number"].to_list()
        quarantined = parsed.quarantine["line_number"].to_list()
        assert sorted(landed + quarantined) == expected, scanner
        assert set(parsed.quarantine["reason"]) <= REASONS
        assert all(parsed.quarantine["detail"].str.len_chars() > 0)
        outcomes[scanner] = (landed, parsed.quarantine.select("line_number", "reason").rows())
    assert len(set(map(repr, outcomes.values()))) == 1  # both scanners, the same outcome


def _write(path: Path, data: bytes, packing: str) -> None:
    if packing == "plain":
        path.write_bytes(data)
        return
    packed = gzip.compress(data)
    path.write_bytes(packed if packing == "gzip" else packed[: max(2, len(packed) // 2)])


@LANDINGS
@given(
    files=st.lists(
        st.tuples(file_bytes(), st.sampled_from(["plain", "gzip", "cut gzip"])),
        min_size=1,
        max_size=3,
    )
)
def test_any_landing_file_lands_each_line_once_or_quarantines_it(
    files: list[tuple[bytes, str]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        written = {}
        for number, (data, packing) in enumerate(files):
            path = landing / f"part-{number}.jsonl{'' if packing == 'plain' else '.gz'}"
            _write(path, data, packing)
            written[str(path)] = (data, packing)
        store = DeltaStore(str(Path(tmp) / "delta"))

        stats = land(store, str(landing), now=NOW)  # never raises

        assert land(store, str(landing), now=NOW).files == 0  # all accounted for, once
        raw = store.read(RAW_TURN_EVENTS, SCHEMAS[RAW_TURN_EVENTS])
        quarantine = store.read(QUARANTINED_EVENTS, SCHEMAS[QUARANTINED_EVENTS])
        landed_files = {
            row["source_file"]: row
            for row in store.read(LANDED_FILES, SCHEMAS[LANDED_FILES]).to_dicts()
        }
        bad_files = set(store.read(QUARANTINED_FILES, SCHEMAS[QUARANTINED_FILES])["source_file"])
        assert raw["event_id"].is_unique().all()
        assert stats.landed == raw.height
        for path, (data, packing) in written.items():
            if packing == "cut gzip":
                assert path in bad_files and path not in landed_files
                continue
            expected = non_blank_lines(data)
            mine = raw.filter(pl.col("source_file") == path)["line_number"].to_list()
            refused = quarantine.filter(pl.col("source_file") == path)
            assert not set(mine) & set(refused["line_number"])
            assert set(mine) | set(refused["line_number"]) <= set(expected)
            assert set(refused["reason"]) <= REASONS
            row = landed_files[path]
            assert row["lines"] == len(expected)
            assert (row["landed"], row["quarantined"]) == (len(mine), refused.height)
            assert row["landed"] + row["duplicates"] + row["quarantined"] == row["lines"]


# The contract.


@CHEAP
@given(
    raw=st.one_of(swapped(), st.text(max_size=300), spliced().map(lambda b: b.decode("latin-1")))
)
def test_the_contract_answers_every_line_with_a_model_or_an_event_error(raw: str) -> None:
    try:
        parse_event(raw)
    except EventError as exc:
        assert exc.reason in REASONS
        assert exc.detail


@CHEAP
@given(
    type_=st.sampled_from(sorted(PAYLOADS)),
    value=json_values,
    data=st.data(),
)
def test_an_accepted_payload_value_is_the_value_as_written(
    type_: str, value: Any, data: st.DataObject
) -> None:
    """Strict mode: a value of another JSON type is refused, never converted (finding 6)."""
    payload = dict(PAYLOADS[type_])
    fields = sorted(events.PAYLOADS[type_].model_fields)
    if not fields:
        return
    field = data.draw(st.sampled_from(fields))
    payload[field] = value
    try:
        event = parse_event(line(type=type_, payload=payload))
    except EventError:
        return
    accepted = getattr(event.payload, field)
    if isinstance(accepted, datetime):
        assert isinstance(value, str)
        return
    assert accepted == value
    if isinstance(value, bool) or isinstance(accepted, bool):
        assert type(accepted) is type(value)
    elif isinstance(value, int | float | str):
        assert type(accepted) is type(value)


@CHEAP
@given(
    instant=st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2300, 1, 1), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(-23 * 60, 23 * 60),
)
def test_timestamps_are_accepted_exactly_inside_the_range(
    instant: datetime, offset_minutes: int
) -> None:
    """[1970-01-01, 2200-01-01) UTC, whatever the offset it is written with (finding 7)."""
    local = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    raw = line(occurred_at=local.isoformat())
    inside = events.EARLIEST <= instant < events.LATEST
    try:
        event = parse_event(raw)
    except EventError as exc:
        assert not inside and exc.reason == "timestamp_out_of_range"
        return
    assert inside and event.occurred_at == instant
    for scanner in SCANNERS:
        row = parse_bytes(raw.encode(), "mem", NOW, scanner=scanner).events
        assert row["occurred_at"].to_list() == [instant]


@CHEAP
@given(raw=st.one_of(swapped(), spliced().map(lambda b: b.decode("utf-8", "replace"))))
def test_no_scanner_accepts_a_line_the_contract_refuses(raw: str) -> None:
    data = raw.encode("utf-8", "surrogatepass")
    try:
        parse_event(raw)
        valid = True
    except EventError:
        valid = False
    python_alone = mirror.scan(data, MAX_EVENT_BYTES)[0].height == 1
    assert valid or not python_alone
    if scan._native is not None:
        assert valid or scan._native.scan_events(data, MAX_EVENT_BYTES)["rows"] == 0


def test_the_strategies_reach_both_sides() -> None:
    """The generated lines are not all refused: valid examples land, so both paths are tried."""
    assert parse_bytes("\n".join(VALID).encode(), "mem", NOW).events.height == len(VALID)
    assert parse_event(json.dumps(BASE)).type == "turn.started"
