"""Compaction of real Delta tables in tmp_path: fewer files, same rows, bounded small files."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from conftest_ops import role_rows

from ctxdb.lifecycle.compaction import compact_all, compact_table, file_stats, unbounded
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA


def _many_commits(store: DeltaStore, commits: int = 12) -> pl.DataFrame:
    for i in range(commits):
        store.append(ROLE_ROWS, role_rows(3, conversation=f"c{i}"), schema=ROLE_ROWS_SCHEMA)
    return store.read(ROLE_ROWS)


def test_compaction_merges_small_files_and_keeps_rows(tmp_path: Path):
    store = DeltaStore(str(tmp_path / "delta"))
    before = _many_commits(store)
    settings = Settings(home=tmp_path)

    results = compact_all(store, None, settings)

    assert [r.table for r in results] == [ROLE_ROWS]  # missing tables are skipped
    result = results[0]
    assert result.files_before == 12 and result.small_before == 12
    assert result.files_after == 1 and result.files_removed == 12 and result.files_added == 1
    assert result.bounded and unbounded(results) == []
    after = store.read(ROLE_ROWS)
    assert after.sort("row_id").equals(before.sort("row_id"))

    again = compact_table(store, ROLE_ROWS, target_bytes=1 << 27, small_bytes=1 << 24, max_small=8)
    assert again.files_removed == 0 and again.files_after == 1


def test_small_file_bound_is_reported(tmp_path: Path):
    store = DeltaStore(str(tmp_path / "delta"))
    _many_commits(store, commits=4)
    # A target smaller than each file leaves every file in place: the check must notice.
    result = compact_table(store, ROLE_ROWS, target_bytes=1, small_bytes=1 << 24, max_small=2)
    assert result.small_after == 4 and not result.bounded
    assert unbounded([result]) == [ROLE_ROWS]
    assert file_stats(store.table(ROLE_ROWS), 1 << 24).files == 4
