"""Issue 12, findings 12 and 13: two `ctxdb land` (or two `ctxdb derive`) started at once on the
same store do not duplicate anything. Each is a real process; both are released together from a
start line once their imports are done, so their runs overlap. Every writer takes the writer
lease, so the second waits for the first (`CTXDB_WRITER_LEASE_WAIT_S`) and then finds nothing
left to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import NOW

from ctxdb.landing.run import land
from ctxdb.record.turn_logs import KEYS as TURN_LOG_KEYS
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, RAW_TURN_EVENTS, ROLE_ROWS, TURN_LOGS

pytestmark = pytest.mark.es

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
        "CTXDB_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_WRITER_LEASE_WAIT_S": "120",
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
