"""Issue 12, landing: no single input stops a landing run, and no input is dropped silently.

Finding 6: a wrong-typed payload value (`"tokens_in": "5"`) is quarantined, never coerced.
Finding 7: an event dated outside [1970, 2200) is quarantined.
Finding 8: a file that cannot be read (a truncated gzip) is quarantined as a file; the rest land.
Finding 23: a UTF-8 byte order mark is stripped; a re-used event id with another owner or other
content is quarantined as a conflict, with the reason.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest_components import NATIVE, skip_missing
from conftest_turn_record import NOW, Turn, settings_for, write_jsonl
from dagster import DagsterInstance, RunRequest, SkipReason
from test_landing_sensor import Sensor

from ctxdb.landing import listing as landing_files
from ctxdb.landing import scan
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
    TURN_LOGS,
)


@pytest.fixture(params=["native", "python"])
def scanner(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and scan._native is None:
        skip_missing(NATIVE)
    return request.param


def _turn(conversation: str, **identity: str) -> list[dict]:
    return Turn(conversation, "t1", **identity).basic().events


def test_finding_6_string_tokens_are_quarantined(tmp_path: Path, scanner: str) -> None:
    bad = _turn("c-bad")
    bad[2]["payload"]["tokens_in"] = "5"
    write_jsonl(tmp_path / "landing" / "a.jsonl", [*_turn("c-good"), *bad])
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(tmp_path / "landing"), now=NOW, scanner=scanner)
    assert stats.landed == 7 and stats.quarantined == 1
    quarantined = store.read(QUARANTINED_EVENTS).row(0, named=True)
    assert quarantined["reason"] == "wrong_type"
    assert quarantined["detail"] == (
        "payload.tokens_in: Input should be a valid integer, got a JSON string"
    )
    assert quarantined["event_id"] == bad[2]["event_id"]
    derived = derive(store, settings_for(tmp_path), now=NOW)  # derivation no longer meets "5"
    assert derived.turns == 2
    logs = store.read(TURN_LOGS).sort("conversation_id")
    assert logs.select("conversation_id", "tokens_in").rows() == [("c-bad", None), ("c-good", 10)]


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        ("assistant.completion", {"text": "x", "tokens_out": "5"}),
        ("assistant.completion", {"text": "x", "tokens_in": 5.0}),
        ("assistant.completion", {"text": "x", "error": "true"}),
        ("assistant.completion", {"text": "x", "error": 1}),
        ("stream.aggregate", {"marker": "tool", "name": "n", "chunks_num": "2"}),
        (
            "user.attachment",
            {"name": "a.csv", "mime": "text/csv", "size": "3", "storage_ref": "r"},
        ),
        (
            "file.hosted",
            {"path": "a.pdf", "mime": "application/pdf", "size": 1.0, "sha256": "a" * 64},
        ),
        ("user.submission", {"text": "x", "arrived_at": 1764496800}),
    ],
)
def test_finding_6_no_wrong_typed_value_is_coerced(
    tmp_path: Path, scanner: str, type_: str, payload: dict
) -> None:
    event = Turn("c1", "t1").add(type_, payload)
    write_jsonl(tmp_path / "landing" / "a.jsonl", [event])
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(tmp_path / "landing"), now=NOW, scanner=scanner)
    assert (stats.landed, stats.reasons) == (0, {"wrong_type": 1})


@pytest.mark.parametrize(
    "occurred_at", ["9999-12-31T23:59:59Z", "1969-12-31T23:59:59Z", "2200-01-01T00:00:00Z"]
)
def test_finding_7_events_outside_the_timestamp_range_are_quarantined(
    tmp_path: Path, scanner: str, occurred_at: str
) -> None:
    event = Turn("c1", "t1").add("turn.started")
    write_jsonl(tmp_path / "landing" / "a.jsonl", [{**event, "occurred_at": occurred_at}])
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(tmp_path / "landing"), now=NOW, scanner=scanner)
    assert (stats.landed, stats.reasons) == (0, {"timestamp_out_of_range": 1})


def _gzip(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in events).encode()))
    return path


def test_finding_8_a_truncated_gzip_is_quarantined_as_a_file(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", _turn("c-a"))
    broken = _gzip(landing / "b.jsonl.gz", _turn("c-b"))
    whole = broken.read_bytes()
    broken.write_bytes(whole[: len(whole) // 2])
    write_jsonl(landing / "c.jsonl", _turn("c-c"))
    store = DeltaStore(str(tmp_path / "delta"))

    stats = land(store, str(landing), now=NOW)  # before: the run failed with "Aborted."
    assert (stats.files, stats.landed, stats.quarantined_files) == (3, 8, 1)
    assert set(store.read(RAW_TURN_EVENTS)["conversation_id"]) == {"c-a", "c-c"}
    row = store.read(QUARANTINED_FILES).row(0, named=True)
    assert row["source_file"] == str(broken)
    assert row["reason"] == "corrupt_gzip"
    assert row["size"] == len(whole) // 2
    assert row["head"] == whole[:64]
    assert "EOFError" in row["detail"]
    assert str(broken) not in store.read(LANDED_FILES)["source_file"].to_list()

    again = land(store, str(landing), now=NOW)  # not read again while it is unchanged
    assert (again.files, again.skipped_files, again.quarantined_files) == (0, 3, 0)
    assert store.read(QUARANTINED_FILES).height == 1

    _gzip(broken, _turn("c-b"))  # the producer writes the file again, whole
    fixed = land(store, str(landing), now=NOW)
    assert (fixed.files, fixed.landed) == (1, 4)
    assert store.read(QUARANTINED_FILES).is_empty()  # the fix clears the entry


def test_finding_8_a_file_that_fails_to_read_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", _turn("c-a"))
    flaky = write_jsonl(landing / "b.jsonl", _turn("c-b"))
    store = DeltaStore(str(tmp_path / "delta"))
    real = landing_files._read_raw

    def failing(path: str, storage_options=None) -> bytes:  # a fake read error (reads failing)
        if path == str(flaky):
            raise PermissionError(13, "Permission denied", path)
        return real(path, storage_options)

    monkeypatch.setattr(landing_files, "_read_raw", failing)
    stats = land(store, str(landing), now=NOW)
    assert (stats.landed, stats.quarantined_files) == (4, 1)
    assert store.read(QUARANTINED_FILES)["reason"].to_list() == ["unreadable_file"]
    land(store, str(landing), now=NOW)  # still failing: tried again, recorded once
    assert store.read(QUARANTINED_FILES).height == 1

    monkeypatch.setattr(landing_files, "_read_raw", real)
    healed = land(store, str(landing), now=NOW)
    assert (healed.files, healed.landed) == (1, 4)
    assert store.read(QUARANTINED_FILES).is_empty()


def test_finding_23_a_byte_order_mark_is_stripped(tmp_path: Path, scanner: str) -> None:
    path = write_jsonl(tmp_path / "landing" / "a.jsonl", _turn("c1"))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(tmp_path / "landing"), now=NOW, scanner=scanner)
    assert (stats.landed, stats.quarantined) == (4, 0)
    assert store.read(RAW_TURN_EVENTS).sort("line_number")["line_number"].to_list() == [1, 2, 3, 4]


def test_finding_23_a_reused_event_id_is_quarantined_as_a_conflict(
    tmp_path: Path, scanner: str
) -> None:
    landing = tmp_path / "landing"
    first = Turn("c1", "t1").add("user.submission", {"text": "hello"})
    write_jsonl(landing / "a.jsonl", [first])
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(landing), now=NOW, scanner=scanner)

    other_text = {**first, "payload": {"text": "something else"}}
    other_owner = {**first, "user_id": "mallory"}
    same = json.dumps(first, indent=None, separators=(", ", ": "), sort_keys=True)  # reformatted
    repeat_in_batch = {**first, "event_id": "e-new", "payload": {"text": "one"}}
    repeat_changed = {**repeat_in_batch, "payload": {"text": "two"}}
    write_jsonl(
        landing / "b.jsonl", [other_text, other_owner, same, repeat_in_batch, repeat_changed]
    )
    stats = land(store, str(landing), now=NOW, scanner=scanner)
    assert (stats.landed, stats.duplicates, stats.quarantined) == (1, 1, 3)
    assert stats.reasons == {"event_id_conflict": 3}
    conflicts = store.read(QUARANTINED_EVENTS).sort("line_number")
    assert conflicts["line_number"].to_list() == [1, 2, 5]
    assert conflicts["detail"].to_list() == [
        f"event_id {first['event_id']} was first landed with other payload",
        f"event_id {first['event_id']} was first landed with another owner",
        "event_id e-new was first landed with other payload",
    ]
    assert json.loads(conflicts["raw_line"][0])["user_id"] == "u1"
    landed = store.read(RAW_TURN_EVENTS)
    assert landed["event_id"].is_unique().all()
    payload = landed.filter(pl.col("event_id") == first["event_id"])["payload"].item()
    assert json.loads(payload) == {"text": "hello"}
    files = store.read(LANDED_FILES).filter(pl.col("source_file").str.ends_with("b.jsonl"))
    assert files.select("landed", "duplicates", "quarantined").row(0) == (1, 1, 3)


def test_finding_8_a_quarantined_file_is_not_pending_for_the_sensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = tmp_path / "landing"
    broken = _gzip(landing / "b.jsonl.gz", _turn("c-b"))
    broken.write_bytes(broken.read_bytes()[:20])
    store = DeltaStore(str(tmp_path / "delta"))
    with DagsterInstance.ephemeral() as instance:
        sensor = Sensor(instance, store)
        assert isinstance(sensor.tick(), RunRequest)
        land(store, str(landing), now=NOW)  # the requested run quarantines the file
        skipped = sensor.tick()
    assert isinstance(skipped, SkipReason) and "no new files" in str(skipped.skip_message)


def _conflicts(store: DeltaStore) -> pl.DataFrame:
    return (
        store.read(QUARANTINED_EVENTS)
        .filter(pl.col("reason") == "event_id_conflict")
        .sort("source_file", "line_number")
    )


def _line(path: Path, number: int) -> str:
    return path.read_text().splitlines()[number - 1]


def test_issue_24_finding_3_event_id_reuse_with_different_content_is_quarantined(
    tmp_path: Path, scanner: str
) -> None:
    """An id landed earlier, then sent again with other text: from another file, and from the
    same file rewritten in place (same path and line number, which a rerun after a crash also
    reads again). Each is an `event_id_conflict` row with the line's own bytes; a byte-identical
    replay stays a plain duplicate."""
    landing = tmp_path / "landing"
    first = Turn("c1", "t1").add("user.submission", {"text": "hello"})
    path = write_jsonl(landing / "a.jsonl", [first])
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(landing), now=NOW, scanner=scanner)

    edited = {**first, "payload": {"text": "hello, edited"}}
    write_jsonl(landing / "b.jsonl", [edited, first])
    write_jsonl(path, [{**first, "payload": {"text": "rewritten"}}, "", "", ""])
    stats = land(store, str(landing), now=NOW, scanner=scanner)

    assert (stats.landed, stats.duplicates, stats.quarantined) == (0, 1, 2)
    conflicts = _conflicts(store)
    assert conflicts["raw_line"].to_list() == [_line(path, 1), _line(landing / "b.jsonl", 1)]
    assert set(conflicts["detail"]) == {
        f"event_id {first['event_id']} was first landed with other payload"
    }
    landed = store.read(RAW_TURN_EVENTS)
    assert landed.height == 1 and json.loads(landed["payload"].item()) == {"text": "hello"}


def test_issue_24_finding_3_in_batch_duplicates_with_different_content_are_quarantined(
    tmp_path: Path, scanner: str
) -> None:
    """Within one batch (one file, and two files of one wave) an id repeated with other content
    is quarantined; the first line lands, and a content-identical repeat is a duplicate."""
    landing = tmp_path / "landing"
    one = Turn("c1", "t1").add("user.submission", {"text": "one"})
    two = {**one, "payload": {"text": "two"}}
    later = {**one, "occurred_at": "2026-11-20T10:00:00Z"}
    reformatted = json.dumps(one, indent=2).replace("\n", "")  # the same content, other bytes
    write_jsonl(landing / "a.jsonl", [one, two, reformatted])
    write_jsonl(landing / "b.jsonl", [later])
    store = DeltaStore(str(tmp_path / "delta"))
    stats = land(store, str(landing), now=NOW, scanner=scanner)

    assert (stats.landed, stats.duplicates, stats.quarantined) == (1, 1, 2)
    conflicts = _conflicts(store)
    assert conflicts["line_number"].to_list() == [2, 1]
    assert conflicts["raw_line"].to_list() == [_line(landing / "a.jsonl", 2), json.dumps(later)]
    assert conflicts["detail"].to_list() == [
        f"event_id {one['event_id']} was first landed with other payload",
        f"event_id {one['event_id']} was first landed with other occurred_at",
    ]
    landed = store.read(RAW_TURN_EVENTS)
    assert json.loads(landed["payload"].item()) == {"text": "one"}


@pytest.mark.parametrize("when", ["earlier_run", "same_batch"])
def test_issue_24_finding_3_another_users_event_reusing_an_id_is_quarantined(
    tmp_path: Path, scanner: str, when: str
) -> None:
    """Another user's event (in that user's own conversation) carrying an id u1's event already
    has never overwrites or merges into u1's event: it is quarantined with its own bytes, and
    u1's TurnLog is derived from u1's event, u2's TurnLog without it."""
    landing = tmp_path / "landing"
    mine = Turn("c1", "t1").basic().events
    theirs = Turn("c2", "t1", user_id="u2").basic().events
    theirs[0] = {**theirs[0], "event_id": mine[0]["event_id"]}
    store = DeltaStore(str(tmp_path / "delta"))
    write_jsonl(landing / "a.jsonl", mine)
    if when == "earlier_run":
        land(store, str(landing), now=NOW, scanner=scanner)
    write_jsonl(landing / "b.jsonl", theirs)
    land(store, str(landing), now=NOW, scanner=scanner)

    conflicts = _conflicts(store)
    assert conflicts["raw_line"].to_list() == [json.dumps(theirs[0])]
    assert conflicts["detail"].to_list() == [
        f"event_id {mine[0]['event_id']} was first landed with another owner"
    ]
    landed = store.read(RAW_TURN_EVENTS)
    assert landed["event_id"].is_unique().all() and landed.height == 7
    reused = landed.filter(pl.col("event_id") == mine[0]["event_id"])
    assert reused.select("user_id", "conversation_id").row(0) == ("u1", "c1")
    assert json.loads(reused["payload"].item()) == mine[0]["payload"]
    derive(store, settings_for(tmp_path), now=NOW)
    logs = store.read(TURN_LOGS)
    assert set(logs["user_id"]) == {"u1", "u2"}
    sources = dict(logs.select("user_id", "source_event_ids").iter_rows())
    assert mine[0]["event_id"] in sources["u1"]
    assert mine[0]["event_id"] not in sources["u2"]
