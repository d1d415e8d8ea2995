"""Issue 12, findings 12 and 13: two `ctxdb land` (or two `ctxdb derive`) started at once on the
same store do not duplicate anything. Each is a real process; both are released together from a
start line once their imports are done, so their runs overlap. With the writer lease, the second
waits for the first (`CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S`) and then finds nothing left to do.

Issue 25, item 1: the same holds without any lease (as with the lease store unreachable and
`CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false`, the unsafe mode): two runs in two threads, made
to commit each step at the same moment, store every event, TurnLog and role row once by the Delta
writes alone (keyed MERGEs; a concurrent commit makes one rerun). Without that setting, a landing
with the lease store unreachable refuses to run."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import polars as pl
import pytest
from conftest_ports import free_port_pair
from conftest_turn_record import NOW

from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.record.turn_logs import KEYS as TURN_LOG_KEYS
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    ROLE_ROWS,
    TURN_LOGS,
)

pytestmark = pytest.mark.es
T = TypeVar("T")

AT_THE_START_LINE = """
import pathlib, sys, time
import ctxdb.cli.data  # the command's imports, done before the start
from ctxdb.cli import main
print("ready", flush=True)
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.002)
main(sys.argv[2:])
"""


def run_together(args: list[str], settings: Settings, tmp_path: Path) -> list[dict]:
    """Start two `ctxdb <args>` processes, release them at once, and return each one's output."""
    env = {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S": "120",
    }
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", AT_THE_START_LINE, str(go), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    go.touch()
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    return outputs


def sample(tmp_path: Path) -> tuple[Path, int]:
    generated = generate_events(users=3, conversations=40, seed=21, now=NOW, malformed_ratio=0.01)
    landing = tmp_path / "landing"
    write_sample(generated, landing, files_root=tmp_path / "files", per_file=400)
    return landing, len({e["event_id"] for e in generated.events})


def at_once(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the two runs' calls of `target` (a commit step) meet before each one: both commit
    every step against the same snapshot, the race a lease would have prevented."""
    barrier = threading.Barrier(2, timeout=120)
    module, name = target.rsplit(".", 1)
    real = getattr(importlib.import_module(module), name)

    def together(*args, **kwargs):
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(target, together)


def both(run: Callable[[], T]) -> list[T]:
    """Run `run` in two threads at once; their results (a failure in either is raised)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return [f.result() for f in [pool.submit(run), pool.submit(run)]]


def test_finding_12_two_landings_at_once_land_each_event_once(
    settings: Settings, tmp_path: Path
) -> None:
    landing, events = sample(tmp_path)
    files = len(list(landing.rglob("*.jsonl*")))

    first, second = run_together(["land", "--path", str(landing)], settings, tmp_path)

    store = DeltaStore(settings.delta_uri)
    raw = store.read(RAW_TURN_EVENTS)
    assert raw.height == events  # before the lease: every event twice
    assert raw["event_id"].is_unique().all()
    assert store.read(LANDED_FILES)["source_file"].is_unique().all()
    assert sorted([first["landed"], second["landed"]]) == [0, events]
    assert sorted([first["skipped_files"], second["skipped_files"]]) == [0, files]


def test_finding_13_two_derivations_at_once_derive_each_turn_once(
    settings: Settings, tmp_path: Path
) -> None:
    landing, _ = sample(tmp_path)
    store = DeltaStore(settings.delta_uri)
    land(store, str(landing), now=NOW)

    first, second = run_together(["derive"], settings, tmp_path)

    logs = store.read(TURN_LOGS)
    assert logs.height > 0
    assert logs.select(TURN_LOG_KEYS).is_unique().all()  # before the lease: every TurnLog twice
    assert store.read(ROLE_ROWS)["row_id"].is_unique().all()
    assert sorted([first["turns"], second["turns"]]) == [0, logs.height]
    closed = (
        store.read(RAW_TURN_EVENTS)
        .filter(pl.col("type") == "turn.closed")
        .select("conversation_id", "turn_id")
        .unique()
    )
    assert logs.height == closed.height


def test_issue_25_two_landings_without_the_lease_land_each_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two landings without any lease (`writer=None`, as with the lease store unreachable and
    `CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false`), in small waves over the same files,
    committing each wave at the same moment: every event, quarantine row and landed file is stored
    once (before: every event twice)."""
    landing, events = sample(tmp_path)
    store = DeltaStore(str(tmp_path / "delta"))
    monkeypatch.setattr("ctxdb.landing.run.WAVE_ROWS", 500)
    at_once("ctxdb.landing.run.commit", monkeypatch)

    first, second = both(lambda: land(store, str(landing), now=NOW))

    raw = store.read(RAW_TURN_EVENTS)
    assert raw.height == events
    assert raw["event_id"].is_unique().all()
    assert first.files == second.files == len(list(landing.rglob("*.jsonl*")))
    assert first.landed + second.landed == events
    assert first.duplicates + second.duplicates >= events  # each skipped what the other landed
    quarantine = store.read(QUARANTINED_EVENTS)
    assert quarantine.height > 0
    assert quarantine.select("source_file", "line_number").is_unique().all()
    assert store.read(LANDED_FILES)["source_file"].is_unique().all()
    versions = raw.group_by("landed_version").len()
    assert versions.height == raw["landed_version"].n_unique()  # each wave names its own version
    assert set(versions["landed_version"]) <= set(range(1, store.version(RAW_TURN_EVENTS) + 1))


def derived(store: DeltaStore) -> tuple[pl.DataFrame, pl.DataFrame]:
    """TurnLogs (key, sources, tokens) and role row ids, sorted, for comparing two stores."""
    logs = store.read(TURN_LOGS).select(
        *TURN_LOG_KEYS, "source_event_ids", "tokens_in", "tokens_out"
    )
    return logs.sort(TURN_LOG_KEYS), store.read(ROLE_ROWS).select("row_id").sort("row_id")


def test_issue_25_two_first_derivations_without_the_lease_derive_each_turn_once(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first derivations without any lease, writing every table at the same moment: the
    tables equal one derivation alone (no TurnLog, role row, source event id or token counted
    twice)."""
    landing, _ = sample(tmp_path)
    store, alone = DeltaStore(str(tmp_path / "delta")), DeltaStore(str(tmp_path / "alone"))
    for target in (store, alone):
        land(target, str(landing), now=NOW)
    derive(alone, settings, now=NOW)
    at_once("ctxdb.record.run.write_table", monkeypatch)

    first, second = both(lambda: derive(store, settings, now=NOW))

    assert first.turns == second.turns > 0  # both derived every turn
    logs, rows = derived(store)
    assert logs.select(TURN_LOG_KEYS).is_unique().all()
    assert rows["row_id"].is_unique().all()
    sources = pl.col("source_event_ids")
    assert logs.select(sources.list.n_unique() == sources.list.len()).to_series().all()
    expected_logs, expected_rows = derived(alone)
    assert logs.equals(expected_logs)
    assert rows.equals(expected_rows)


def test_issue_25_land_runs_without_the_lease_store_only_when_allowed(
    settings: Settings, tmp_path: Path
) -> None:
    """A failure test (the lease store is down: ELASTICSEARCH_URL points at a closed port).
    `ctxdb land` refuses with one line, a non-zero exit and nothing written; with
    `CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false` it lands without the lease and says so."""
    landing, events = sample(tmp_path)
    env = {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "ELASTICSEARCH_URL": f"http://127.0.0.1:{free_port_pair()}",
    }
    command = [str(Path(sys.executable).with_name("ctxdb")), "land", "--path", str(landing)]

    refused = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert refused.stderr.startswith("error: landing refuses to run without the writer lease")
    assert "CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    store = DeltaStore(settings.delta_uri)
    assert not any(store.exists(t) for t in (RAW_TURN_EVENTS, LANDED_FILES, QUARANTINED_EVENTS))

    env["CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED"] = "false"
    allowed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert allowed.returncode == 0, allowed.stderr
    assert "landing runs without the writer lease" in allowed.stderr
    assert json.loads(allowed.stdout.strip().splitlines()[-1])["landed"] == events
