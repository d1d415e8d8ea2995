"""The retention sweep's delete of embedding statuses (issue 44 item 3): keyed by the statuses'
`expires_at`, so it reads only the files that may hold expired rows' statuses, and exact whatever
the statuses' age: written before the column existed (null), or carrying an expiry the row's
re-derivation has since moved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow as pa
from conftest_ops import role_rows, write_rows

from ctxdb.embedding.stage import embed_role_rows
from ctxdb.lifecycle import retention
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA

LEGACY_SCHEMA = pa.schema([f for f in ROW_EMBEDDINGS_SCHEMA if f.name != "expires_at"])
"""`role_row_embeddings` as written before statuses carried their row's expiry."""


def derived_days_ago(rows: pl.DataFrame, days: int) -> pl.DataFrame:
    """`rows` as derived `days` ago (a sweep purges rows derived long before)."""
    stamp = datetime.now(UTC) - timedelta(days=days)
    return rows.with_columns(pl.lit(stamp).dt.cast_time_unit("us").alias("derived_at"))


def status_ids(store: DeltaStore) -> set[str]:
    return set(store.read(ROW_EMBEDDINGS).get_column("row_id"))


def last_merge_metrics(store: DeltaStore, operation_run: str) -> list[dict]:
    """Operation metrics of the sweep's MERGE deletes on the statuses (newest first)."""
    history = store.table(ROW_EMBEDDINGS).history()
    return [
        c["operationMetrics"]
        for c in history
        if c.get("ctxdb.run_id") == operation_run and c.get("operation") == "MERGE"
    ]


def test_sweep_deletes_expired_rows_statuses_skipping_files_of_live_rows(
    store, es, ops_settings, embedder
):
    old = derived_days_ago(role_rows(8, conversation="c1", expired=4), 30)
    write_rows(store, old)
    embed_role_rows(store, embedder)  # statuses of c1: one file, four of them expired
    for conversation in ("c2", "c3"):  # later runs: files of live rows' statuses only
        write_rows(store, role_rows(6, conversation=conversation))
        embed_role_rows(store, embedder)
    statuses = store.read(ROW_EMBEDDINGS)
    assert statuses.get_column("expires_at").null_count() == 0
    assert statuses.height == 20

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert report.deleted_rows[ROW_EMBEDDINGS] == 4
    assert status_ids(store) == set(store.read(ROLE_ROWS).get_column("row_id"))
    assert len(status_ids(store)) == 16
    merges = last_merge_metrics(store, report.run_id)
    assert len(merges) == 1  # no rows purged earlier: no delete by key alone
    assert merges[0]["num_target_files_skipped_during_scan"] >= 2
    assert merges[0]["num_target_files_scanned"] == 1


def test_sweep_deletes_legacy_and_stale_statuses_of_expired_rows(store, es, ops_settings, embedder):
    legacy = derived_days_ago(role_rows(6, conversation="c0", expired=3), 30)
    write_rows(store, legacy)
    store.append(  # statuses written before the column existed: the table lacks it
        ROW_EMBEDDINGS,
        legacy.select(
            "row_id",
            "text_hash",
            model_id=pl.lit(embedder.model_id),
            embedding_status=pl.lit("ok"),
            error=pl.lit(None, pl.String),
            attempts=pl.lit(1, pl.Int32),
            updated_at=pl.col("derived_at"),
        ),
        schema=LEGACY_SCHEMA,
    )
    fresh = role_rows(6, conversation="c1", expired=2)
    write_rows(store, derived_days_ago(fresh, 2))
    embed_role_rows(store, embedder)  # evolves the table: c1's statuses carry their expiry
    assert set(store.read(ROW_EMBEDDINGS).columns) == set(ROW_EMBEDDINGS_SCHEMA.names)
    # a rule shortened since: c1's last live row is re-derived already expired; its status,
    # whose text did not change, keeps the later expiry it was written with
    moved = fresh.tail(1).with_columns(
        expires_at=pl.lit(datetime.now(UTC) - timedelta(minutes=5)).dt.cast_time_unit("us")
    )
    write_rows(store, moved)
    embed_role_rows(store, embedder)
    stale = store.read(ROW_EMBEDDINGS).filter(pl.col("row_id") == moved["row_id"][0])
    assert stale["expires_at"][0] > datetime.now(UTC)

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert report.deleted_rows[ROLE_ROWS] == 3 + 2 + 1
    assert report.deleted_rows[ROW_EMBEDDINGS] == 6
    live = set(store.read(ROLE_ROWS).get_column("row_id"))
    assert len(live) == 6
    assert status_ids(store) == live
