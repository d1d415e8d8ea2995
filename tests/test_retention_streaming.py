"""Issue 26 item 3, the retention sweep: telling which pending Elasticsearch ids are still live
and which cached vectors no role row references reads only what it needs. The live check pushes
the pending ids into the scans (a bounded number at a time, files ruled out by their statistics
skipped); the cache prune compares the cache with the role rows part by part. Each is checked
against the whole-table computation it replaces, on real Delta tables, with the rows every scan
kept counted by wrapping polars' `collect` (which still runs the real scan).

No Elasticsearch: the sweep runs with `es=None`, so its ids stay pending (compared as such)."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from conftest_ops import conform, role_rows, write_derived, write_embeddings
from retention_whole_table import whole_table_stale

from ctxdb.index.mappings import ROWS, TURNS
from ctxdb.lifecycle import purge, retention
from ctxdb.lifecycle.retention import drop_live_ids, find_expired, prune_embedding_cache, sweep
from ctxdb.record.expiry import ttl_days_expr
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    EMBEDDINGS,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
    RETENTION_PENDING,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_LOGS,
)

CONVERSATIONS = ("ca", "cb", "cc", "cd")


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every frame a query over a table scan collects from here on (queries
    over frames in memory, which eager polars methods run too, are not counted)."""
    heights: list[int] = []
    collect = pl.LazyFrame.collect

    def counted(self: pl.LazyFrame, *args: object, **kwargs: object) -> pl.DataFrame:
        frame = collect(self, *args, **kwargs)
        if "SCAN" in self.explain(optimized=False):
            heights.append(frame.height)
        return frame

    monkeypatch.setattr(pl.LazyFrame, "collect", counted)
    return heights


def seed(store: DeltaStore, rows: int = 60, expired: int = 20) -> pl.DataFrame:
    """Role rows, turns and cached vectors of four conversations, one Delta file each (their row
    ids and conversation ids in disjoint ranges), plus 30 cached vectors no row uses."""
    frames = []
    for conversation in CONVERSATIONS:
        frame = role_rows(rows, conversation=conversation, expired=expired)
        write_derived(store, frame)
        frames.append(frame)
    everything = pl.concat(frames)
    write_embeddings(store, everything, extra_hashes=tuple(f"unused-{i}" for i in range(30)))
    return everything


def whole_table_live(store: DeltaStore, pending: pl.DataFrame) -> pl.DataFrame:
    """The computation `drop_live_ids` replaces: every live id read, then an anti-join."""
    rows = store.scan(ROLE_ROWS).select(doc_id="row_id", kind=pl.lit(ROWS))
    turns = store.scan(TURN_LOGS).select(
        doc_id=pl.concat_str("conversation_id", pl.lit(":"), "turn_id"), kind=pl.lit(TURNS)
    )
    live = pl.concat([rows, turns]).collect()
    return pending.join(live, on=["kind", "doc_id"], how="anti")


def pending_ids(live: pl.DataFrame) -> pl.DataFrame:
    """Ids of both kinds, some of live rows and some gone, plus storage paths."""
    row_ids = [*live["row_id"].head(25).to_list(), *(f"gone-{i}" for i in range(25))]
    turn_ids = [f"ca:t{i}" for i in range(10)] + [f"ca:gone{i}" for i in range(10)]
    return pl.DataFrame(
        {
            "kind": [ROWS] * len(row_ids) + [TURNS] * len(turn_ids) + ["files", "files"],
            "doc_id": [*row_ids, *turn_ids, "conv_ca/t1", "conv_ca/t2"],
        }
    )


def test_the_live_check_reads_only_the_pending_ids(
    delta_store: DeltaStore, kept: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = seed(delta_store)
    pending = pending_ids(everything.filter(pl.col("conversation_id") == "ca"))
    expected = whole_table_live(delta_store, pending)
    kept.clear()
    monkeypatch.setattr(purge, "LOOKUP_IDS", 7)

    actionable = drop_live_ids(delta_store, pending)

    assert actionable.sort("kind", "doc_id").equals(expected.sort("kind", "doc_id"))
    assert actionable.height == 25 + 10 + 2  # the gone rows, the gone turns, the files
    assert len(kept) == -(-50 // 7) + -(-20 // 7)  # one scan per 7 pending ids of each kind
    assert max(kept) <= 7 < everything.height  # a scan keeps at most its ids' rows


def test_the_pending_ids_are_pushed_into_the_scan(
    delta_store: DeltaStore, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = seed(delta_store)
    pending = pending_ids(everything.filter(pl.col("conversation_id") == "ca"))
    monkeypatch.setattr(purge, "LOOKUP_IDS", 25)
    capfd.readouterr()
    with pl.Config(verbose=True):
        drop_live_ids(delta_store, pending)
    skipped = re.findall(r"skipping (\d+) / (\d+) files", capfd.readouterr().err)
    # polars' own log of the scans: the 25 live row ids (sorted first) read one of the four
    # role_rows files, the 25 gone ones none (both skipped by the files' row-id ranges); turn
    # ids are computed from two columns, so the turn lookup reads every turn_logs file
    assert skipped == [("3", "4"), ("4", "4"), ("0", "4")]


def test_the_cache_prune_in_parts_deletes_what_one_pass_deletes(
    delta_store: DeltaStore, kept: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(delta_store)
    delta_store.delete(ROLE_ROWS, "conversation_id = 'cb'")  # 60 more vectors now unused
    before = datetime.now(UTC)
    expected = whole_table_stale(delta_store, before)
    keys = ["model_id", "text_hash"]
    remaining = delta_store.read(EMBEDDINGS).join(expected, on=keys, how="anti")
    kept.clear()
    monkeypatch.setattr(retention, "CACHE_PART_ROWS", 40)  # 270 cached vectors: 7 parts

    deleted = prune_embedding_cache(delta_store, before)

    assert deleted == expected.height == 90
    after = delta_store.read(EMBEDDINGS)
    assert after.sort("text_hash").equals(remaining.sort("text_hash"))
    assert len(kept) == 2 * 7  # per part: the role-row hashes, the cache entries
    assert max(kept) < 40 * 2 < delta_store.read(EMBEDDINGS).height + deleted


def test_a_sweep_in_small_parts_purges_what_a_whole_table_sweep_purges(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = DeltaStore(str(tmp_path / "first"))
    seed(first)
    second = DeltaStore(str(tmp_path / "second"))
    shutil.copytree(first.root, second.root)
    now = datetime.now(UTC) + timedelta(minutes=1)
    whole = sweep(first, None, settings, now=now, vacuum_hours=0)
    monkeypatch.setattr(purge, "LOOKUP_IDS", 5)
    monkeypatch.setattr(retention, "CACHE_PART_ROWS", 25)
    parted = sweep(second, None, settings, now=now, vacuum_hours=0)

    assert parted.deleted_rows == whole.deleted_rows
    assert whole.deleted_rows[ROLE_ROWS] == 80 and whole.deleted_rows[EMBEDDINGS] == 110
    for table, key in (
        (ROLE_ROWS, "row_id"),
        (TURN_LOGS, "turn_id"),
        (EMBEDDINGS, "text_hash"),
        (ROW_EMBEDDINGS, "row_id"),
    ):
        columns = ["conversation_id", key] if table == TURN_LOGS else [key]
        assert (
            second.read(table)
            .select(columns)
            .sort(columns)
            .equals(first.read(table).select(columns).sort(columns))
        ), table
    pending = [
        s.read(RETENTION_PENDING).select("kind", "doc_id").sort("kind", "doc_id")
        for s in (first, second)
    ]
    assert pending[0].height > 0 and pending[1].equals(pending[0])


def test_expired_raw_events_are_found_without_reading_recent_files(
    delta_store: DeltaStore, settings: Settings, capfd: pytest.CaptureFixture[str]
) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    short = settings.replace(retention={"days": 30, "rules": [{"app": "short", "days": 4}]})
    for n, (age, app) in enumerate([(100, "chat"), (5, "short"), (3, "short"), (1, "chat")]):
        events = pl.DataFrame(
            {
                "event_id": [f"f{n}-{i}" for i in range(10)],
                "app": app,
                "occurred_at": now - timedelta(days=age),
                "ingested_at": now - timedelta(days=age),  # landed as it happened
                "source_file": f"f{n}.jsonl",
                "landed_version": n,
            }
        ).with_columns(pl.col("occurred_at", "ingested_at").dt.cast_time_unit("us"))
        delta_store.append(RAW_TURN_EVENTS, conform(events, RAW_EVENTS_SCHEMA), RAW_EVENTS_SCHEMA)
    days = ttl_days_expr(short.retention.rules, short.retention.days, role_column=None)
    exact = delta_store.read(RAW_TURN_EVENTS).filter(
        pl.col("occurred_at") + pl.duration(days=days) <= now
    )

    capfd.readouterr()
    with pl.Config(verbose=True):
        expired = find_expired(delta_store, now, short)

    assert expired.raw_ids is not None
    assert sorted(expired.raw_ids["event_id"]) == sorted(exact["event_id"])
    assert expired.sources == ["f0.jsonl", "f1.jsonl"] and expired.counts[RAW_TURN_EVENTS] == 20
    # no event younger than the shortest TTL (4 days) can have expired: the two files of events
    # 3 and 1 days old are skipped by their occurred_at statistics
    assert re.findall(r"skipping (\d+) / (\d+) files", capfd.readouterr().err) == [("2", "4")]
