"""Retention in every store: after a sweep no expired event's text is readable in Delta (any
file of any version, change data included), Elasticsearch, file storage or the landing files;
and the table registry gives every table a maintenance policy."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest_ops import run_killed_at, run_pipeline
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.incremental import read_state, write_state
from ctxdb.landing.run import land
from ctxdb.lifecycle import retention
from ctxdb.lifecycle.compaction import maintain_state, table_files
from ctxdb.record.run import STATE_NAME, last_derived_version
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    DEFAULT_TTL,
    DERIVE_STATE,
    DERIVE_STATE_SCHEMA,
    EXPIRES_AT,
    INDEX_STATE,
    LANDED_FILES,
    LIFECYCLE_JOURNAL,
    POLICIES,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    RETENTION_REPORT,
    ROLE_ROWS,
    SCHEMAS,
    TURN_LOGS,
    policy,
)

WRITERS = {"landing", "derivation", "embedding", "indexing", "lifecycle"}
STATE_FILE_BOUND = 6
"""A maintained state table: one data file, its last commit, the checkpoint and its pointer."""


def test_every_table_has_a_policy_that_fits_its_schema():
    assert set(POLICIES) == set(SCHEMAS), set(SCHEMAS) ^ set(POLICIES)
    for table, schema in SCHEMAS.items():
        rule = policy(table)
        assert rule.writer in WRITERS, table
        if rule.expires_by == EXPIRES_AT:
            assert "expires_at" in schema.names, table
        if rule.expires_by == DEFAULT_TTL:
            assert rule.clock in schema.names, table
        if rule.keep_latest is not None:
            assert set(rule.keep_latest) <= set(schema.names), table
    with pytest.raises(KeyError, match="no policy"):
        policy("not_a_table")


def _pipeline(store, es, settings) -> list[str]:
    """Two generated batches through the real landing, derivation and indexing: one 400 days
    old (expired at the real now), one recent. Returns strings only the expired events hold:
    their event ids and the texts of their role rows that no live event or row also has (the
    generator reuses sentences across conversations)."""
    now = datetime.now(UTC)
    run_pipeline(store, es, settings, {"old": (1, now - timedelta(days=400)), "new": (2, now)})
    raw = store.read(RAW_TURN_EVENTS)
    rows = store.read(ROLE_ROWS)
    old = pl.col("occurred_at") < now - timedelta(days=365)
    expired = pl.col("expires_at") <= now
    live = "\n".join(
        [*raw.filter(~old)["payload"].to_list(), *rows.filter(~expired)["text"].to_list()]
    )
    texts = [t[:60] for t in rows.filter(expired)["text"].to_list() if len(t) >= 30]
    needles = [*raw.filter(old)["event_id"].to_list(), *(t for t in texts if t not in live)]
    assert raw.filter(old).height and len(needles) > raw.filter(old).height
    return needles


def _landing_text(root: Path) -> str:
    """Every landing file's content (gunzipped)."""
    parts = []
    for path in sorted(root.rglob("*.*")):
        if path.is_file():
            data = path.read_bytes()
            parts.append((gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode())
    return "\n".join(parts)


def _delta_text(delta_root: Path) -> str:
    """The string cells of every data file under the Delta root: every table, every version,
    change data included."""
    parts = []
    for path in sorted(delta_root.rglob("*.parquet")):
        if "_delta_log" not in path.parts:
            frame = pl.from_arrow(pq.read_table(path))
            for column in frame.select(pl.col(pl.String)).columns:
                parts.extend(v for v in frame[column].to_list() if v)
    return "\n".join(parts)


def _es_hits(es, prefix: str, needles: list[str]) -> int:
    es.indices.refresh(index=f"{prefix}*")
    query = {
        "bool": {
            "should": [
                {"multi_match": {"query": n, "type": "phrase", "lenient": True}}
                for n in needles[-20:]
            ]
            + [{"ids": {"values": needles}}],
            "minimum_should_match": 1,
        }
    }
    return es.count(index=f"{prefix}*", query=query)["count"]


def _found(text: str, needles: list[str]) -> list[str]:
    return [n for n in needles if n in text]


@pytest.mark.es
def test_after_a_sweep_no_expired_event_is_readable_in_any_store(store, es, ops_settings):
    needles = _pipeline(store, es, ops_settings)
    landing = Path(ops_settings.landing_uri)
    delta = Path(ops_settings.delta_uri)
    prefix = ops_settings.elasticsearch.index_prefix
    assert _found(_landing_text(landing), needles)
    assert _found(_delta_text(delta), needles)
    assert _es_hits(es, prefix, needles)
    events = store.read(RAW_TURN_EVENTS).height
    quarantined = store.read(QUARANTINED_EVENTS).height

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert _found(_landing_text(landing), needles) == []
    assert _found(_delta_text(delta), needles) == []
    assert _es_hits(es, prefix, needles) == 0
    expired_events = report.deleted_rows[RAW_TURN_EVENTS]
    assert expired_events and store.read(RAW_TURN_EVENTS).height == events - expired_events
    assert report.landing["lines_removed"] >= expired_events
    saved = json.loads(store.read(RETENTION_REPORT)["landing"][0])
    assert saved == report.landing
    # What is left in the landing files is exactly what is still live: landing it again adds
    # nothing, and the quarantined lines not expired yet (the recent batch's) keep their numbers.
    again = land(store, str(landing))
    assert again.landed == 0
    kept = quarantined - report.deleted_rows[QUARANTINED_EVENTS]
    assert 0 < kept == store.read(QUARANTINED_EVENTS).height


@pytest.mark.es
def test_a_sweep_past_every_ttl_empties_the_landing_location(store, es, ops_settings):
    """A year and more later every event, quarantined line and landed-file row has expired:
    the landing files are deleted and their bookkeeping rows go with them."""
    _pipeline(store, es, ops_settings)
    landing = Path(ops_settings.landing_uri)
    later = datetime.now(UTC) + timedelta(days=800)

    report = retention.sweep(store, es, ops_settings, now=later)

    assert not [p for p in landing.rglob("*.jsonl*") if p.is_file()]
    assert report.landing["files_removed"] > 0
    for table in (RAW_TURN_EVENTS, QUARANTINED_EVENTS, LANDED_FILES, ROLE_ROWS, TURN_LOGS):
        assert store.read(table).is_empty(), table
    assert report.deleted_rows[QUARANTINED_EVENTS] > 0
    assert report.deleted_rows[LANDED_FILES] > 0


@pytest.mark.es
def test_fully_expired_files_are_archived_then_deleted(store, es, ops_settings):
    settings = ops_settings.replace(retention={"vacuum_hours": 0, "archive_days": 3})
    _pipeline(store, es, settings)
    landing = Path(settings.landing_uri)
    files = sorted(p.relative_to(landing) for p in landing.rglob("*.jsonl*") if p.is_file())
    later = datetime.now(UTC) + timedelta(days=800)

    report = retention.sweep(store, es, settings, now=later)

    archive = Path(settings.archive_uri) / later.strftime("%Y-%m-%d")
    assert report.landing["files_archived"] == len(files)
    assert sorted(p.relative_to(archive) for p in archive.rglob("*") if p.is_file()) == files
    assert not [p for p in landing.rglob("*.jsonl*") if p.is_file()]
    kept = retention.sweep(store, es, settings, now=later + timedelta(days=2))
    assert kept.landing["archive_days_removed"] == 0 and archive.exists()
    gone = retention.sweep(store, es, settings, now=later + timedelta(days=4))
    assert gone.landing["archive_days_removed"] == 1 and not archive.exists()


@pytest.mark.es
def test_a_sweep_killed_after_the_landing_rewrite_is_finished_by_the_next(
    store, es, ops_settings, monkeypatch
):
    """Killed after the landing files were rewritten and before Delta was purged (the injected
    error stands in for the process dying): the next run finishes every store."""
    needles = _pipeline(store, es, ops_settings)
    landing = Path(ops_settings.landing_uri)

    run_killed_at(
        monkeypatch, retention, "purge_expired", lambda: retention.sweep(store, es, ops_settings)
    )
    assert _found(_landing_text(landing), needles) == []
    assert _found(_delta_text(Path(ops_settings.delta_uri)), needles)
    assert store.read(LIFECYCLE_JOURNAL).height == 1  # the run is recorded as unfinished

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert _found(_landing_text(landing), needles) == []
    assert _found(_delta_text(Path(ops_settings.delta_uri)), needles) == []
    assert _es_hits(es, ops_settings.elasticsearch.index_prefix, needles) == 0
    assert report.run_id == store.read(RETENTION_REPORT)["run_id"][0]  # resumed, same run
    assert store.read(LIFECYCLE_JOURNAL).is_empty()


def test_state_table_histories_stay_bounded_over_many_syncs(tmp_path: Path):
    """200 index syncs (a MERGE of index_state each, through the indexer's own writer) and 200
    derivation runs (a derive_state row each) with the sweep's state maintenance after every 50:
    the files of each table (data and log) after a maintenance stay under a bound that does not
    grow with the number of runs, and the state the next run reads is unchanged."""
    settings = Settings(home=tmp_path, retention={"state_history_hours": 0})
    store = DeltaStore(settings.delta_uri)
    after: dict[str, list[int]] = {INDEX_STATE: [], DERIVE_STATE: []}
    for run in range(1, 201):
        for kind in ("rows", "turns"):
            write_state(store, f"idx-{kind}", "uuid-1", kind, {ROLE_ROWS: run}, docs=run)
        store.append(
            DERIVE_STATE,
            pl.DataFrame(
                {
                    "name": [STATE_NAME],
                    "landed_version": [run],
                    "conversations": [1],
                    "turns": [1],
                    "derived_at": [datetime.now(UTC)],
                }
            ),
            DERIVE_STATE_SCHEMA,
        )
        if run % 50 == 0:
            files = maintain_state(store, settings)
            for table, counts in after.items():
                counts.append(files[table])
    before_maintenance = table_files(store, INDEX_STATE)
    assert all(n <= STATE_FILE_BOUND for counts in after.values() for n in counts), after
    assert after[INDEX_STATE][0] == after[INDEX_STATE][-1]
    assert after[DERIVE_STATE][0] == after[DERIVE_STATE][-1]
    assert before_maintenance == after[INDEX_STATE][-1]
    assert read_state(store, "idx-rows", "uuid-1") == ({ROLE_ROWS: 200}, 200)
    assert last_derived_version(store) == 200
    assert store.read(DERIVE_STATE).height == 1


def test_cli_tables_lists_every_table_with_its_policy(tmp_path: Path, monkeypatch):
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    shown = CliRunner().invoke(app, ["tables"])
    assert shown.exit_code == 0, shown.output
    lines = {line.split("┆")[0].strip("│ "): line for line in shown.output.splitlines()}
    for table in SCHEMAS:
        assert policy(table).writer in lines[table], table
