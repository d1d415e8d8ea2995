"""Issue 44 item 3: a landing listing in proportion to what is new. Writers publish into date
partitions (`dt=YYYY-MM-DD`, `ctxdb.landing.partitions`); a landing lists the partitions from its
cursor's day (less a day of overlap) on, and every file outside partitions (the flat layout of
older landing folders). Real landing files, real Delta tables, the real recorder."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
import test_object_store_lifecycle as s3

from ctxdb.capture.recorder import Recorder
from ctxdb.capture.upload import uploader
from ctxdb.landing import partitions
from ctxdb.landing.cursor import landing_floor
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, RAW_TURN_EVENTS

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
endpoint, on_s3 = s3.endpoint, s3.on_s3  # the moto server and settings on it


@pytest.fixture
def store(tmp_path: Path) -> DeltaStore:
    return DeltaStore(str(tmp_path / "delta"))


def add_file(folder: Path, seed: int, mtime: datetime) -> set[str]:
    """One conversation's events as JSONL parts in `folder`, all with `mtime`; their paths."""
    generated = generate_events(users=1, conversations=1, seed=seed, now=NOW, days=2)
    written = write_sample(generated, folder / f"s{seed}", per_file=500)
    for part in written:
        os.utime(part, (mtime.timestamp(), mtime.timestamp()))
    return {str(part) for part in written}


def in_partition(landing: Path, day: datetime) -> Path:
    return partitions.folder(landing / "capture" / "chat" / "helper", day)


def landed_paths(store: DeltaStore) -> list[str]:
    return store.read(LANDED_FILES).get_column("source_file").to_list()


def test_new_partition_files_flat_files_and_late_files_land_once(
    tmp_path: Path, store: DeltaStore
) -> None:
    landing = tmp_path / "landing"
    old_days = [NOW - timedelta(days=d) for d in (9, 8, 7)]
    old = set().union(*(add_file(in_partition(landing, d), n, d) for n, d in enumerate(old_days)))
    flat = add_file(landing / "imported", 10, NOW - timedelta(days=9))
    assert land(store, str(landing)).files == len(old | flat)
    floor = landing_floor(store)
    assert floor is not None and floor.date() == old_days[-1].date()

    listed = {f.path for f in list_files(str(landing), since=floor)}
    recent = [partitions.name(d) for d in old_days[1:]]  # the cursor's day and the one before
    assert listed == flat | {p for p in old if any(f"/{name}/" in p for name in recent)}
    assert {f.path for f in list_files(str(landing))} == old | flat

    new = add_file(in_partition(landing, NOW), 20, NOW)
    flat_new = add_file(landing / "imported", 21, NOW)
    # a day late: published into the partition before the cursor's, with a fresh mtime
    late = add_file(in_partition(landing, floor - timedelta(days=1)), 22, NOW)
    too_late = add_file(in_partition(landing, NOW - timedelta(days=9)), 23, NOW)
    stats = land(store, str(landing))
    assert stats.files == len(new | flat_new | late)
    assert not too_late & set(landed_paths(store))
    assert land(store, str(landing), full=True).files == len(too_late)
    assert land(store, str(landing)).files == 0

    paths = landed_paths(store)
    assert sorted(paths) == sorted(old | flat | new | flat_new | late | too_late)
    events = store.read(RAW_TURN_EVENTS)
    assert events.height == events.get_column("event_id").n_unique()


def test_the_recorder_publishes_into_the_day_partition_and_it_lands(
    settings: Settings, tmp_path: Path
) -> None:
    recorder = Recorder.from_settings(
        settings, tenant="acme", app="chat", agent="helper", project=tmp_path
    )
    with recorder.turn(user_id="u1", conversation_id="c1", turn_id="t1") as turn:
        turn.submission("a question for the day partition")
    recorder.close()

    published = sorted(Path(settings.landing_uri).rglob("*.jsonl"))
    assert published
    assert all(p.parent.name == partitions.name(datetime.now(UTC)) for p in published)
    store = DeltaStore.from_settings(settings)
    assert land(store, settings.landing_uri).landed > 0
    assert land(store, settings.landing_uri).files == 0
    ids = store.read(RAW_TURN_EVENTS).get_column("event_id")
    assert ids.n_unique() == ids.len() > 0
    assert pl.Series(landed_paths(store)).is_in([str(p) for p in published]).all()


def put_events(settings: Settings, name: str, seed: int) -> None:
    """One conversation's events put by hand at `name` under the S3 landing location."""
    lines = generate_events(users=1, conversations=1, seed=seed, now=NOW, days=2).lines()
    s3._put(settings, name, [line.encode() for line in lines])


def test_on_s3_old_partitions_are_not_listed_and_flat_files_still_land(on_s3: Settings) -> None:
    recorder = Recorder.from_settings(on_s3, tenant="acme", app="chat", agent="helper")
    with recorder.turn(user_id="u1", conversation_id="c1", turn_id="t1") as turn:
        turn.submission("a question landed in today's partition of the bucket")
    recorder.close()
    store, options = DeltaStore.from_settings(on_s3), on_s3.object_store_options
    published = [f.path for f in list_files(on_s3.landing_uri, options)]
    today = partitions.name(datetime.now(UTC))
    assert published and all(f"/{today}/" in p for p in published)
    assert land(store, on_s3.landing_uri).files == len(published)

    put_events(on_s3, "imported/s1.jsonl", 1)  # the flat layout: listed every run
    old = partitions.name(datetime.now(UTC) - timedelta(days=9))
    put_events(on_s3, f"capture/chat/helper/{old}/late.jsonl", 2)
    floor = landing_floor(store)
    listed = [f.path for f in list_files(on_s3.landing_uri, options, since=floor)]
    assert any(p.endswith("/imported/s1.jsonl") for p in listed)
    assert not any(p.endswith("/late.jsonl") for p in listed)
    assert land(store, on_s3.landing_uri).files == 1
    assert land(store, on_s3.landing_uri, full=True).files == 1  # the late file
    assert land(store, on_s3.landing_uri).files == 0
    events = store.read(RAW_TURN_EVENTS)
    assert events.height == events.get_column("event_id").n_unique()


def test_a_spool_file_uploaded_late_goes_into_the_partition_of_its_upload(tmp_path: Path) -> None:
    spool, landing = tmp_path / "spool", tmp_path / "landing"
    sealed = partitions.folder(spool / "chat" / "helper", NOW - timedelta(days=9)) / "w-1.jsonl"
    sealed.parent.mkdir(parents=True)
    sealed.write_text(
        "".join(f"{line}\n" for line in generate_events(1, 1, seed=1, now=NOW).lines())
    )
    uploader(spool, f"file://{landing}")(sealed)

    today = partitions.name(datetime.now(UTC))
    uploaded = [p.relative_to(landing).as_posix() for p in landing.rglob("*.jsonl")]
    assert uploaded == [f"chat/helper/{today}/w-1.jsonl"]
    assert not sealed.exists()
