"""Landing JSONL files into raw_turn_events: idempotent, nothing silently dropped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest_ops import sensor_resources
from conftest_turn_record import NOW, Turn, write_jsonl
from dagster import DagsterInstance, RunRequest, SkipReason, build_sensor_context
from test_generate import MALFORMED_REASONS

from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.landing.scan import parse_bytes
from ctxdb.landing.waves import first_distinct
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.storage import tombstones
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
)
from pipelines.landing_sensor import landing_sensor


@pytest.fixture
def store(tmp_path: Path) -> DeltaStore:
    return DeltaStore(str(tmp_path / "delta"))


def test_generated_sample_lands_with_every_line_accounted_for(tmp_path: Path, store) -> None:
    generated = generate_events(
        users=3, conversations=16, seed=5, now=NOW, malformed_ratio=0.02, duplicate_ratio=0.01
    )
    parts = write_sample(generated, tmp_path / "landing", per_file=250)
    assert any(p.suffix == ".gz" for p in parts)
    stats = land(store, str(tmp_path / "landing"), now=NOW)
    lines = len(generated.events) + len(generated.malformed)
    assert stats.lines == lines
    assert stats.landed + stats.duplicates + stats.quarantined == lines
    assert stats.landed == len({e["event_id"] for e in generated.events})
    assert set(stats.reasons) == MALFORMED_REASONS
    raw = store.read(RAW_TURN_EVENTS)
    assert raw.schema == pl.from_arrow(RAW_EVENTS_SCHEMA.empty_table()).schema
    assert raw["event_id"].is_unique().all()
    assert raw["landed_version"].unique().to_list() == [1]  # version 0 creates the table
    quarantine = store.read(QUARANTINED_EVENTS)
    assert quarantine.height == stats.quarantined
    files = store.read(LANDED_FILES)
    assert files["lines"].sum() == lines
    assert files["landed"].sum() == stats.landed


def test_quarantine_rows_keep_raw_line_file_line_number_and_reason(tmp_path: Path, store) -> None:
    turn = Turn("c1", "t1").basic()
    good = turn.events
    bad = {**good[1], "event_id": "x9", "occurred_at": "2026-11-20T09:00:00"}
    path = write_jsonl(tmp_path / "in" / "a.jsonl", [good[0], "{oops", bad, *good[1:], "", " "])
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert (stats.landed, stats.quarantined) == (4, 2)
    quarantine = store.read(QUARANTINED_EVENTS).sort("line_number")
    assert quarantine["line_number"].to_list() == [2, 3]
    assert quarantine["reason"].to_list() == ["malformed_json", "naive_timestamp"]
    assert quarantine["raw_line"][0] == "{oops"
    assert quarantine["event_id"][1] == "x9"
    assert set(quarantine["source_file"]) == {str(path)}
    raw = store.read(RAW_TURN_EVENTS).sort("line_number")
    assert raw["line_number"].to_list() == [1, 4, 5, 6]


def test_rerun_reads_no_file_twice_and_never_writes_an_event_twice(tmp_path: Path, store) -> None:
    events = Turn("c1", "t1").basic().events
    write_jsonl(tmp_path / "in" / "a.jsonl", events)
    assert land(store, str(tmp_path / "in"), now=NOW).landed == 4
    again = land(store, str(tmp_path / "in"), now=NOW)
    assert (again.files, again.skipped_files, again.landed) == (0, 1, 0)
    # The same events re-delivered in another (gzip) file are duplicates, not new rows.
    body = "".join(json.dumps(e) + "\n" for e in events).encode()
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(gzip.compress(body))
    redelivered = land(store, str(tmp_path / "in"), now=NOW)
    assert (redelivered.files, redelivered.landed, redelivered.duplicates) == (1, 0, 4)
    assert store.read(RAW_TURN_EVENTS).height == 4
    assert store.version(RAW_TURN_EVENTS) == 1  # created empty, then one MERGE


def test_a_grown_file_is_read_again_and_only_new_events_land(tmp_path: Path, store) -> None:
    turn = Turn("c1", "t1").basic()
    path = write_jsonl(tmp_path / "in" / "a.jsonl", turn.events)
    land(store, str(tmp_path / "in"), now=NOW)
    turn.add("feedback", {"reaction": "up"})
    write_jsonl(path, turn.events)
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert (stats.landed, stats.duplicates) == (1, 4)
    assert store.read(RAW_TURN_EVENTS)["landed_version"].sort().to_list() == [1, 1, 1, 1, 2]


def test_events_for_purged_or_foreign_conversations_are_quarantined(tmp_path: Path, store) -> None:
    tombstones.record(store, pl.Series(["gone"]), NOW)
    write_jsonl(tmp_path / "in" / "a.jsonl", Turn("mine", "t1").basic().events)
    land(store, str(tmp_path / "in"), now=NOW)
    intruder = Turn("mine", "t2", user_id="u2").basic().events
    purged = Turn("gone", "t1").basic().events
    write_jsonl(tmp_path / "in" / "b.jsonl", [*intruder, *purged])
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert stats.landed == 0
    assert stats.reasons == {"conversation_owner_mismatch": 4, "purged_conversation": 4}
    raw = store.read(RAW_TURN_EVENTS)
    assert set(raw["user_id"]) == {"u1"} and set(raw["conversation_id"]) == {"mine"}
    quarantined = store.read(QUARANTINED_EVENTS)
    erased = quarantined.filter(pl.col("reason") == "purged_conversation")
    assert erased.height == 4 and set(erased["raw_line"]) == {""}  # an erasure stays erased
    foreign = quarantined.filter(pl.col("reason") == "conversation_owner_mismatch")
    assert all(json.loads(line)["user_id"] == "u2" for line in foreign["raw_line"])


def test_a_crash_between_commits_is_completed_by_the_next_run(
    tmp_path: Path, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "in" / "a.jsonl", [*Turn("c1", "t1").basic().events, "{bad"])
    real_insert = DeltaStore.insert_new

    def crash_on_landed_files(self, table, data, keys, schema=None):
        # Stands in for a process crash after the events commit, before landed_files is written.
        if table == LANDED_FILES:
            raise RuntimeError("simulated crash")
        return real_insert(self, table, data, keys, schema)

    monkeypatch.setattr(DeltaStore, "insert_new", crash_on_landed_files)
    with pytest.raises(RuntimeError, match="simulated crash"):
        land(store, str(tmp_path / "in"), now=NOW)
    monkeypatch.undo()
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert (stats.files, stats.landed, stats.duplicates) == (1, 0, 4)
    assert store.read(RAW_TURN_EVENTS).height == 4
    assert store.read(QUARANTINED_EVENTS).height == 1
    assert store.read(LANDED_FILES).height == 1


def test_file_uris_are_listed_and_read_through_pyarrow_fs(tmp_path: Path, store) -> None:
    write_jsonl(tmp_path / "in" / "sub" / "a.jsonl", Turn("c1", "t1").basic().events)
    (tmp_path / "in" / "notes.txt").write_text("not an event file")
    uri = (tmp_path / "in").as_uri()
    assert [f.path for f in list_files(uri)] == [f"file://{tmp_path}/in/sub/a.jsonl"]
    assert land(store, uri, now=NOW).landed == 4


def test_parse_bytes_is_pure_and_splits_valid_from_bad() -> None:
    events = Turn("c1", "t1").basic().events
    data = b"\n".join([json.dumps(e).encode() for e in events] + [b"nope"])
    parsed = parse_bytes(data, "mem", NOW)
    assert parsed.events.height == 4
    assert parsed.events["payload"].str.json_path_match("$.text").drop_nulls().to_list() == [
        "How do I fix the openpyxl error?",
        "Convert it.",
    ]
    assert parsed.quarantine["reason"].to_list() == ["malformed_json"]


def test_landing_sensor_requests_a_run_only_for_new_files(
    tmp_path: Path, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = tmp_path / "landing"
    resources = sensor_resources(store.root)
    with DagsterInstance.ephemeral() as instance:
        with build_sensor_context(instance=instance, resources=resources) as context:
            assert isinstance(landing_sensor(context), SkipReason)
            write_jsonl(landing / "a.jsonl", Turn("c1", "t1").basic().events)
            request = landing_sensor(context)
            assert isinstance(request, RunRequest)
            assert request.run_key.startswith("landing-")
            assert isinstance(landing_sensor(context), SkipReason)  # same files, same cursor
        land(store, str(landing), now=NOW)
        with build_sensor_context(instance=instance, resources=resources) as fresh:
            assert isinstance(landing_sensor(fresh), SkipReason)


def test_threaded_validation_gives_the_same_rows_as_one_thread(tmp_path: Path) -> None:
    generated = generate_events(users=2, conversations=40, seed=8, now=NOW, malformed_ratio=0.02)
    write_sample(generated, tmp_path / "landing", per_file=5_000)
    serial, threaded = DeltaStore(str(tmp_path / "a")), DeltaStore(str(tmp_path / "b"))
    land(serial, str(tmp_path / "landing"), now=NOW, threads=1)
    land(threaded, str(tmp_path / "landing"), now=NOW, threads=4)
    assert serial.read(QUARANTINED_EVENTS).height > 0
    for table in (RAW_TURN_EVENTS, QUARANTINED_EVENTS, LANDED_FILES):
        keys = ["source_file", "line_number"] if table != LANDED_FILES else ["source_file"]
        assert serial.read(table).sort(keys).equals(threaded.read(table).sort(keys)), table


def test_waves_commit_separately_and_check_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one file per wave, a duplicate or a foreign owner in a later file is caught against
    an earlier wave of the same run, whether or not that wave's commit has finished."""
    mine = Turn("mine", "t1").basic().events
    write_jsonl(tmp_path / "in" / "a.jsonl", mine)
    write_jsonl(
        tmp_path / "in" / "b.jsonl", [mine[0], *Turn("mine", "t2", user_id="u2").basic().events]
    )
    write_jsonl(tmp_path / "in" / "c.jsonl", Turn("other", "t1").basic().events)
    monkeypatch.setattr("ctxdb.landing.run.WAVE_ROWS", 1)
    store = DeltaStore(str(tmp_path / "waves"))
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert (stats.landed, stats.duplicates, stats.quarantined) == (8, 1, 4)
    assert stats.reasons == {"conversation_owner_mismatch": 4}
    raw = store.read(RAW_TURN_EVENTS)
    assert raw.group_by("source_file").agg(pl.col("landed_version").unique()).sort("source_file")[
        "landed_version"
    ].to_list() == [[1], [2]]
    assert stats.landed_version == 2
    files = store.read(LANDED_FILES).sort("source_file")
    assert files["duplicates"].to_list() == [0, 1, 0]
    assert files["quarantined"].to_list() == [0, 4, 0]
    assert store.version(LANDED_FILES) == 3  # created empty, then one commit per wave


def test_many_waves_land_what_one_wave_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generated = generate_events(
        users=2, conversations=12, seed=4, now=NOW, malformed_ratio=0.03, duplicate_ratio=0.05
    )
    write_sample(generated, tmp_path / "landing", per_file=40)
    one, many = DeltaStore(str(tmp_path / "one")), DeltaStore(str(tmp_path / "many"))
    single = land(one, str(tmp_path / "landing"), now=NOW)
    monkeypatch.setattr("ctxdb.landing.run.WAVE_ROWS", 60)
    waved = land(many, str(tmp_path / "landing"), now=NOW)
    assert (single.landed, single.duplicates, single.quarantined) == (
        waved.landed,
        waved.duplicates,
        waved.quarantined,
    )
    assert single.duplicates > 0
    assert many.version(RAW_TURN_EVENTS) > 0
    for table, keys, drop in (
        (RAW_TURN_EVENTS, ["source_file", "line_number"], ["landed_version"]),
        (QUARANTINED_EVENTS, ["source_file", "line_number"], []),
        (LANDED_FILES, ["source_file"], []),
    ):
        a, b = one.read(table).drop(drop).sort(keys), many.read(table).drop(drop).sort(keys)
        assert a.equals(b), table


@pytest.mark.parametrize("size", [0, 1, 7, 2_000])
def test_first_distinct_matches_polars(size: int) -> None:
    values = pl.Series(
        [f"id{(i * 7919) % max(1, size // 3)}" for i in range(size)], dtype=pl.String
    )
    assert first_distinct(values).to_list() == values.is_first_distinct().to_list()
