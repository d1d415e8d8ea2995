"""Issue 26 item 4: landing discovery in proportion to the new files. `ctxdb land` and the landing
sensor compare only files from the landing floor on (the newest landed mtime less an hour) with
the `landed_files` rows from that floor on, the predicate pushed into the Delta scan; a file that
appears late with an old mtime lands by a full comparison, which the sensor starts by itself.
Real landing files, real Delta tables, a real Dagster instance."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pytest
from conftest_ops import sensor_resources
from dagster import DagsterInstance, RunRequest, SkipReason, build_sensor_context

from ctxdb.landing.cursor import CURSOR_LAG, landed_since, landing_floor
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import files_to_land, land
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES
from pipelines.landing_sensor import Cursor, landing_sensor

NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> DeltaStore:
    return DeltaStore(str(tmp_path / "delta"))


def add_file(landing: Path, name: str, seed: int, mtime: datetime) -> None:
    """One conversation's events as JSONL parts under `landing/name`, all with `mtime`."""
    generated = generate_events(users=1, conversations=1, seed=seed, now=NOW, days=2)
    for part in write_sample(generated, landing / name, per_file=500):
        os.utime(part, (mtime.timestamp(), mtime.timestamp()))


def test_only_landed_rows_from_the_floor_on_are_read(tmp_path: Path, store: DeltaStore) -> None:
    landing = tmp_path / "landing"
    for day in range(4):  # four landings, a day apart: four Delta files of landed_files
        add_file(landing, f"day{day}", seed=day, mtime=NOW + timedelta(days=day))
        assert land(store, str(landing)).files > 0
    landed = store.read(LANDED_FILES)
    floor = landing_floor(store)
    assert floor == landed["mtime"].max() - CURSOR_LAG

    recent = landed_since(store, floor)
    assert recent.height == landed.filter(landed["mtime"] >= floor).height
    assert 0 < recent.height < landed.height
    dataset = store.table(LANDED_FILES).to_pyarrow_dataset()
    scanned = list(dataset.get_fragments(filter=pc.field("mtime") >= floor))
    assert len(scanned) == 1  # the older Delta files are skipped by their statistics

    add_file(landing, "day9", seed=9, mtime=NOW + timedelta(days=9))
    new = {f.path for f in list_files(str(landing)) if "day9" in f.path}
    assert {f.path for f in files_to_land(store, list_files(str(landing)))} == new
    assert land(store, str(landing)).files == len(new)
    assert files_to_land(store, list_files(str(landing)), full=True) == []


def test_a_late_file_with_an_old_mtime_lands_with_full(tmp_path: Path, store: DeltaStore) -> None:
    landing = tmp_path / "landing"
    add_file(landing, "a", seed=1, mtime=NOW)
    land(store, str(landing))
    add_file(landing, "late", seed=2, mtime=NOW - timedelta(days=3))  # copied with its old mtime

    skipped = land(store, str(landing))
    assert skipped.files == 0
    assert {f.path for f in files_to_land(store, list_files(str(landing)), full=True)}
    landed = land(store, str(landing), full=True)
    assert landed.files > 0 and landed.landed > 0
    assert land(store, str(landing), full=True).files == 0


def test_max_files_lands_the_oldest_so_the_rest_stay_above_the_floor(
    tmp_path: Path, store: DeltaStore
) -> None:
    landing = tmp_path / "landing"
    add_file(landing, "z_old", seed=1, mtime=NOW - timedelta(days=5))
    add_file(landing, "a_new", seed=2, mtime=NOW)
    first = land(store, str(landing), max_files=1)
    assert first.files == 1
    assert "z_old" in store.read(LANDED_FILES)["source_file"][0]
    assert land(store, str(landing)).files == 1  # a_new, above the floor, still lands


def sensor_tick(instance: DagsterInstance, store: DeltaStore, cursor: str | None):
    with build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources=sensor_resources(store.root),
    ) as context:
        return landing_sensor(context), context.cursor


def test_the_sensor_requests_a_full_landing_for_a_late_old_file(
    tmp_path: Path, store: DeltaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = tmp_path / "landing"
    add_file(landing, "a", seed=1, mtime=NOW)
    land(store, str(landing))
    with DagsterInstance.ephemeral() as instance:
        quiet, cursor = sensor_tick(instance, store, None)
        assert isinstance(quiet, SkipReason)
        kept = Cursor.parse(cursor)
        assert kept.floor == landing_floor(store).isoformat() and kept.older

        add_file(landing, "b", seed=2, mtime=NOW + timedelta(minutes=5))
        plain, cursor = sensor_tick(instance, store, cursor)
        assert isinstance(plain, RunRequest)
        assert "full" not in plain.run_config["ops"]["raw_turn_events"]["config"]
        land(store, str(landing))

        add_file(landing, "late", seed=3, mtime=NOW - timedelta(days=3))
        late, cursor = sensor_tick(instance, store, cursor)
        assert isinstance(late, RunRequest), late
        assert late.run_config["ops"]["raw_turn_events"]["config"]["full"] is True
        assert late.tags["ctxdb/landing_files"] == str(len(list((landing / "late").iterdir())))

        land(store, str(landing), full=True)
        done, cursor = sensor_tick(instance, store, cursor)
        assert isinstance(done, SkipReason) and "no new files" in done.skip_message
        assert Cursor.parse(cursor).older != kept.older  # the late file is below the floor now
