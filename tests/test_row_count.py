"""The one row count (`storage.changes.row_count`): from the files' statistics, exact after
appends and deletes, and still exact for a file another writer added without statistics.

Real Delta tables.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl

from ctxdb.storage.changes import row_count
from ctxdb.storage.delta import DeltaStore


def test_the_count_follows_appends_and_deletes(delta_store: DeltaStore) -> None:
    assert row_count(delta_store, "things") == 0  # no table yet
    delta_store.append("things", pl.DataFrame({"id": [1, 2, 3]}))
    delta_store.append("things", pl.DataFrame({"id": [4, 5]}))
    assert row_count(delta_store, "things") == 5
    delta_store.delete("things", "id = 2")
    assert row_count(delta_store, "things") == delta_store.read("things").height == 4


def test_a_file_without_statistics_is_counted_by_reading_it(delta_store: DeltaStore) -> None:
    """A commit by a writer that records no numRecords (statistics are optional in Delta): the
    statistics alone would say 2 rows where the table holds 5."""
    delta_store.append("things", pl.DataFrame({"id": [1, 2]}))
    root = Path(delta_store.uri("things"))
    pl.DataFrame({"id": [3, 4, 5]}).write_parquet(root / "no-stats.parquet")
    add = {
        "path": "no-stats.parquet",
        "partitionValues": {},
        "size": (root / "no-stats.parquet").stat().st_size,
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
    }
    commit = {"commitInfo": {"operation": "WRITE", "timestamp": add["modificationTime"]}}
    log = root / "_delta_log" / f"{1:020d}.json"
    log.write_text(json.dumps(commit) + "\n" + json.dumps({"add": add}) + "\n")
    assert delta_store.read("things").height == 5
    assert row_count(delta_store, "things") == 5
