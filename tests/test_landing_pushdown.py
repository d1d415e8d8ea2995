"""Issue 26 item 3: landing's duplicate, re-used-id and owner checks and the derivation batches
read landed events through predicates pushed into the Delta scan (the incoming event ids, the
incoming conversations, a batch's conversations), so files whose statistics rule those values out
are not read. polars logs how many files a scan skips (`pl.Config(verbose=True)`); the tests read
that log while landing and deriving real files into real Delta tables, and check that the same
duplicates, conflicts and derived rows come out as with a whole-table read. A landing sensor
tick compares the listing with the `landed_files` rows of recent files only.

The ids here are ordered per file (as time-ordered ids would be) so that statistics can rule
files out: a scan skips the files outside the range of the ids it looks for. With random ids
(uuid4) every file spans the whole range, and the scan reads the id column of every file but
keeps only the matches."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pytest
from conftest_ops import sensor_resources
from dagster import DagsterInstance, SkipReason, build_sensor_context

from ctxdb.landing.cursor import landed_since, landing_floor
from ctxdb.landing.run import land
from ctxdb.record import batches
from ctxdb.record.batches import derive_batch
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    ROLE_ROWS,
    TURN_LOGS,
)
from pipelines import landing_sensor

NOW = datetime(2026, 11, 30, tzinfo=UTC)
SKIPPED = re.compile(r"skipping (\d+) / (\d+) files")


def events(prefix: str, conversation: str, turns: int = 3) -> list[dict]:
    """Closed turns of one conversation, every event id starting with `prefix`."""
    rows = []
    for turn in range(turns):
        for step, (kind, payload) in enumerate(
            [
                ("turn.started", {}),
                ("user.submission", {"text": f"question {turn} in {conversation}"}),
                ("assistant.completion", {"text": f"answer {turn} in {conversation}"}),
                ("turn.closed", {"status": "ok"}),
            ]
        ):
            rows.append(
                {
                    "event_id": f"{prefix}-{turn}-{step}",
                    "schema_version": 1,
                    "type": kind,
                    "occurred_at": (NOW + timedelta(minutes=turn * 4 + step)).isoformat(),
                    "tenant": "acme",
                    "app": "chat",
                    "agent": "helper",
                    "adapter": "minimal",
                    "user_id": "u1",
                    "conversation_id": conversation,
                    "turn_id": f"t{turn}",
                    "payload": payload,
                }
            )
    return rows


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def skipped_by_scans(capfd: pytest.CaptureFixture[str]) -> list[tuple[int, int]]:
    """(files skipped, files) of every Delta scan polars logged since the last call."""
    return [(int(a), int(b)) for a, b in SKIPPED.findall(capfd.readouterr().err)]


@pytest.fixture
def landed(tmp_path: Path, delta_store: DeltaStore) -> Path:
    """Four landings, one conversation each: four Delta files of raw events whose event ids
    (a-..., b-..., c-..., d-...) and conversation ids are in disjoint ranges."""
    landing = tmp_path / "landing"
    for name in "abcd":
        write(landing / f"{name}.jsonl", events(name, f"conv-{name}"))
        assert land(delta_store, str(landing), now=NOW).landed == 12
    assert len(delta_store.table(RAW_TURN_EVENTS).file_uris()) == 4
    return landing


def test_the_landing_checks_read_only_the_files_their_ids_can_be_in(
    landed: Path, delta_store: DeltaStore, capfd: pytest.CaptureFixture[str]
) -> None:
    # a client sends its last events again (d's file, the newest), with one id re-used for a
    # new conversation, and new events: the incoming ids span d-... to e-...
    again = events("d", "conv-d")[:2]
    reused = {**events("d", "conv-d")[2], "conversation_id": "conv-e"}
    write(landed / "e.jsonl", [*again, reused, *events("e", "conv-e")])
    capfd.readouterr()
    with pl.Config(verbose=True):
        stats = land(delta_store, str(landed), now=NOW)

    assert (stats.duplicates, stats.landed) == (2, 12)
    conflicts = delta_store.read(QUARANTINED_EVENTS)
    assert conflicts["reason"].to_list() == ["event_id_conflict"]
    assert conflicts["event_id"].to_list() == ["d-0-2"]
    # three scans of the four files: the known ids (d-... to e-...) and the first holders of
    # the dropped ids (d-...) read d's file only; the owners of the conversations of the fresh
    # events (conv-e only: the re-used id was dropped) read none
    assert skipped_by_scans(capfd) == [(3, 4), (3, 4), (4, 4)]


def test_a_derivation_batch_reads_only_the_files_of_its_conversations(
    landed: Path,
    delta_store: DeltaStore,
    settings: Settings,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = DeltaStore(delta_store.root + "-whole")
    for name in "abcd":
        write(landed.parent / "whole" / f"{name}.jsonl", events(name, f"conv-{name}"))
    land(whole, str(landed.parent / "whole"), now=NOW)
    derive(whole, settings, now=NOW)

    def logged(batch, *args):  # the batch's read of raw events, logged by polars
        with pl.Config(verbose=True):
            return derive_batch(batch, *args)

    monkeypatch.setattr(batches, "derive_batch", logged)
    capfd.readouterr()
    one_each = settings.replace(derive_batch_conversations=1, derive_processes=1)
    stats = derive(delta_store, one_each, now=NOW)

    assert stats.conversations == 4
    # each batch of one conversation reads its own file of raw events only
    assert skipped_by_scans(capfd) == [(3, 4)] * 4
    for table, key in ((TURN_LOGS, ["conversation_id", "turn_id"]), (ROLE_ROWS, ["row_id"])):
        assert (
            delta_store.read(table)
            .select(key)
            .sort(key)
            .equals(whole.read(table).select(key).sort(key))
        ), table


def test_a_sensor_tick_reads_the_landed_rows_of_recent_files_only(
    tmp_path: Path, delta_store: DeltaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = tmp_path / "landing"
    for day in range(4):  # four landings a day apart: four files of landed_files
        path = landing / f"day{day}.jsonl"
        write(path, events(f"d{day}", f"conv-{day}"))
        stamp = (NOW + timedelta(days=day)).timestamp()
        os.utime(path, (stamp, stamp))
        land(delta_store, str(landing), now=NOW)
    read: list[tuple[datetime | None, int]] = []

    def counted(store: DeltaStore, since: datetime | None) -> pl.DataFrame:
        rows = landed_since(store, since)
        read.append((since, rows.height))
        return rows

    monkeypatch.setattr(landing_sensor, "landed_since", counted)
    resources = sensor_resources(delta_store.root)
    cursor = None
    with DagsterInstance.ephemeral() as instance:
        for _ in range(3):
            with build_sensor_context(
                instance=instance, cursor=cursor, resources=resources
            ) as context:
                assert isinstance(landing_sensor.landing_sensor(context), SkipReason)
                cursor = context.cursor

    floor = landing_floor(delta_store)
    # the first tick has no floor kept yet and compares everything; every later tick reads the
    # landed row of the newest file only (the mtime predicate skips the other Delta files)
    assert read == [(None, 4), (floor, 1), (floor, 1)]
    fragments = (
        delta_store.table(LANDED_FILES)
        .to_pyarrow_dataset()
        .get_fragments(filter=pc.field("mtime") >= floor)
    )
    assert len(list(fragments)) == 1
