"""Issue 12, finding 9: the landing sensor through `build_sensor_context` on a real Dagster
instance, real landing files and the real `landed_files` table: new files are requested once, a
failed run is requested again under a new run key, and nothing is requested while a run is in
flight. Issue 44 item 3: a tick lists the recent date partitions only."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest_ops import sensor_resources
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_sensor_context,
)

import pipelines.landing_sensor as landing_sensor_module
from ctxdb.landing import partitions
from ctxdb.landing.cursor import landed_since, landing_floor
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.storage.delta import DeltaStore
from pipelines.landing_sensor import RUN_KEY_TAG, Cursor, landing_sensor

NOW = datetime(2026, 11, 30, tzinfo=UTC)


class Sensor:
    """Evaluates the sensor as the daemon would: each tick starts from the last tick's cursor."""

    def __init__(self, instance: DagsterInstance, store: DeltaStore) -> None:
        self.instance = instance
        self.resources = sensor_resources(store.root)
        self.cursor: str | None = None

    def tick(self) -> RunRequest | SkipReason:
        with build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources=self.resources
        ) as context:
            result = landing_sensor(context)
            self.cursor = context.cursor
        return result

    def launch(self, request: RunRequest, status: DagsterRunStatus) -> DagsterRun:
        """The run the daemon would create for `request`, in `status`."""
        run = DagsterRun(
            job_name="memory_job",
            run_id=str(uuid.uuid4()),
            tags={RUN_KEY_TAG: request.run_key, **request.tags},
            status=status,
        )
        return self.instance.add_run(run)


@pytest.fixture
def landing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    return tmp_path / "landing"


@pytest.fixture
def sensor(tmp_path: Path) -> Iterator[Sensor]:
    with DagsterInstance.ephemeral() as instance:
        yield Sensor(instance, DeltaStore(str(tmp_path / "delta")))


def add_file(landing: Path, name: str, seed: int) -> None:
    generated = generate_events(users=1, conversations=1, seed=seed, now=NOW, days=2)
    write_sample(generated, landing / name, files_root=landing.parent / "files", per_file=500)


def test_finding_9_new_files_are_requested_once(sensor: Sensor, landing: Path) -> None:
    assert isinstance(sensor.tick(), SkipReason)
    add_file(landing, "a", seed=1)
    first = sensor.tick()
    assert isinstance(first, RunRequest)
    assert first.run_key == f"landing-{Cursor.parse(sensor.cursor).digest}-1"
    assert first.run_config == {"ops": {"raw_turn_events": {"config": {"path": str(landing)}}}}
    again = sensor.tick()
    assert isinstance(again, SkipReason) and "already requested" in again.skip_message


def test_finding_9_a_failed_run_is_requested_again(
    sensor: Sensor, landing: Path, tmp_path: Path
) -> None:
    add_file(landing, "a", seed=1)
    first = sensor.tick()
    run = sensor.launch(first, DagsterRunStatus.STARTED)
    sensor.instance.report_run_failed(run, "Elasticsearch was down")

    retry = sensor.tick()
    assert isinstance(retry, RunRequest), retry
    assert retry.run_key != first.run_key  # Dagster would drop a request under a used key
    assert retry.run_key.endswith("-2") and retry.tags["ctxdb/landing_attempt"] == "2"
    canceled = sensor.launch(retry, DagsterRunStatus.CANCELED)
    third = sensor.tick()
    assert isinstance(third, RunRequest) and third.run_key.endswith("-3"), canceled

    # the third attempt lands the files: nothing is pending, nothing is requested
    land(DeltaStore(str(tmp_path / "delta")), str(landing))
    sensor.launch(third, DagsterRunStatus.SUCCESS)
    assert isinstance(sensor.tick(), SkipReason)
    add_file(landing, "b", seed=2)
    fresh = sensor.tick()
    assert isinstance(fresh, RunRequest) and fresh.run_key.endswith("-1")


@pytest.mark.parametrize("status", [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED])
def test_finding_9_nothing_is_requested_while_a_run_is_in_flight(
    sensor: Sensor, landing: Path, status: DagsterRunStatus
) -> None:
    add_file(landing, "a", seed=1)
    first = sensor.tick()
    run = sensor.launch(first, status)
    add_file(landing, "b", seed=2)  # new files while the run is queued or running
    waiting = sensor.tick()
    assert isinstance(waiting, SkipReason) and status.value in waiting.skip_message
    assert Cursor.parse(sensor.cursor).run_key == first.run_key

    sensor.instance.report_run_failed(run, "killed")
    after = sensor.tick()
    assert isinstance(after, RunRequest)
    assert after.run_key.endswith("-1") and after.run_key != first.run_key  # the new file set


def test_finding_9_an_old_cursor_starts_over(sensor: Sensor, landing: Path) -> None:
    sensor.cursor = "0123456789abcdef"  # the former cursor format: a bare digest
    add_file(landing, "a", seed=1)
    assert isinstance(sensor.tick(), RunRequest)


def add_dated(folder: Path, seed: int, mtime: datetime) -> set[str]:
    """One conversation's events as JSONL parts in `folder`, all with `mtime`; their paths."""
    generated = generate_events(users=1, conversations=1, seed=seed, now=NOW, days=2)
    written = write_sample(generated, folder, per_file=500)
    for part in written:
        os.utime(part, (mtime.timestamp(), mtime.timestamp()))
    return {str(part) for part in written}


def test_a_tick_lists_the_recent_partitions_only(
    sensor: Sensor, landing: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thirty days of landed partitions: once a tick has kept the landing floor, a tick lists
    (with the landing's own `list_files`) the files outside partitions and the partitions from
    the floor's day less a day on, never the older ones. A new file in today's partition is
    requested; once it has landed, quiet ticks compare from the floor (the kept digest of older
    files covers what the bounded listing holds); a file published there late, with an old mtime,
    is requested with `full`."""
    listed: list[set[str]] = []

    def listing(*args, **kwargs):
        files = list_files(*args, **kwargs)
        listed.append({f.path for f in files})
        return files

    monkeypatch.setattr(landing_sensor_module, "list_files", listing)
    days = [NOW - timedelta(days=d) for d in range(30, 0, -1)]
    old = {
        day: add_dated(partitions.folder(landing / "chat", day) / "s", n, day)
        for n, day in enumerate(days)
    }
    flat = add_dated(landing / "imported", 99, days[0])
    store = DeltaStore(str(tmp_path / "delta"))
    every = flat.union(*old.values())
    assert land(store, str(landing)).files == len(every)
    assert isinstance(sensor.tick(), SkipReason)
    assert listed[-1] == every  # no floor kept yet: everything
    assert isinstance(sensor.tick(), SkipReason)
    floor = landing_floor(store)
    assert floor is not None
    recent = [paths for day, paths in old.items() if day.date() >= partitions.first_listed(floor)]
    assert listed[-1] == flat.union(*recent) and len(recent) == 3

    new = add_dated(partitions.folder(landing / "chat", NOW) / "s", 100, NOW)
    request = sensor.tick()
    assert isinstance(request, RunRequest) and request.tags["ctxdb/landing_files"] == str(len(new))
    assert listed[-1] == flat.union(*recent, new)
    land(store, str(landing))
    compared: list[datetime | None] = []

    def landed(store: DeltaStore, since: datetime | None):
        compared.append(since)
        return landed_since(store, since)

    monkeypatch.setattr(landing_sensor_module, "landed_since", landed)
    assert isinstance(sensor.tick(), SkipReason) and isinstance(sensor.tick(), SkipReason)
    assert compared and None not in compared  # the floor moved a day on: no full comparison
    late = add_dated(partitions.folder(landing / "chat", NOW) / "late", 101, days[0])
    request = sensor.tick()
    assert isinstance(request, RunRequest)
    assert request.run_config["ops"]["raw_turn_events"]["config"]["full"] is True
    assert late <= listed[-1] and not listed[-1] & old[days[0]]
