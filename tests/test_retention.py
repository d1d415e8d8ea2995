"""Retention: TTL policy, the sweep over real Delta tables and the real Elasticsearch node."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl
import pytest
from conftest_ops import (
    SimulatedCrash,
    assert_same_tables,
    crash_after_commit,
    es_ids,
    index_rows,
    role_rows,
    run_killed_at,
    run_pipeline,
    write_derived,
    write_embeddings,
    write_turn_files,
)
from frozen_listener import FreezingProxy, frozen_listener
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.contract.identity import Principal
from ctxdb.index.client import make_client
from ctxdb.index.incremental import current_versions, sync_index
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sources import SOURCES
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target
from ctxdb.lifecycle import retention
from ctxdb.record.expiry import expires_at_expr
from ctxdb.search.models import NotFound, SearchRequest
from ctxdb.search.service import SearchService
from ctxdb.settings import RetentionRule, Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    EMBEDDINGS,
    INDEX_STATE,
    LIFECYCLE_JOURNAL,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_CATALOG,
    TURN_LOGS,
)

pytestmark = pytest.mark.es


def _seed(store, es, settings, n=20, expired=5):
    rows = role_rows(n, expired=expired)
    write_derived(store, rows)
    index_rows(es, settings.elasticsearch.index_prefix, rows)
    files = write_turn_files(settings.files, rows)
    return rows, files


def test_ttl_policy_most_specific_rule_wins():
    settings = Settings(
        retention={
            "days": 365,
            "rules": [
                RetentionRule(tenant="acme", days=30),
                RetentionRule(tenant="acme", role="assistant", days=7),
                RetentionRule(app="press", days=90),
            ],
        }
    )
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    frame = pl.DataFrame(
        {
            "tenant": ["acme", "acme", "other", "other"],
            "app": ["x", "x", "press", "x"],
            "role": ["assistant", "user", "user", "user"],
            "ts": [ts] * 4,
        }
    ).with_columns(expires_at_expr(settings))
    assert [(e - ts).days for e in frame["expires_at"]] == [7, 30, 90, 365]
    turn_level = frame.drop("role", "expires_at").with_columns(
        expires_at_expr(settings, role_column=None)
    )
    assert [(e - ts).days for e in turn_level["expires_at"]] == [30, 30, 90, 365]


def test_sweep_purges_delta_es_files_and_reports(store, es, ops_settings):
    rows, files = _seed(store, es, ops_settings)
    write_embeddings(store, rows, extra_hashes=("orphan",))
    expired_ids = set(rows["row_id"][:5])

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert report.deleted_rows[ROLE_ROWS] == 5
    for table in (TURN_LOGS, TURN_CATALOG, REPLAY_ARTIFACTS, RAW_TURN_EVENTS):
        assert report.deleted_rows[table] == 5, table
        assert store.read(table).height == 15, table
    assert report.deleted_rows[CONVERSATION_TIMELINES] == 0  # the conversation is still live
    assert report.deleted_rows[ROW_EMBEDDINGS] == 5
    assert report.deleted_rows[EMBEDDINGS] == 6  # 5 expired rows' vectors + the orphan
    remaining = store.read(ROLE_ROWS)
    assert remaining.height == 15 and not expired_ids & set(remaining["row_id"])
    assert store.read(ROW_EMBEDDINGS).height == 15
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set(remaining["row_id"])
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, TURNS)) == 15
    hits = es.search(
        index=alias_name(ops_settings.elasticsearch.index_prefix, ROWS),
        query={"terms": {"row_id": sorted(expired_ids)}},
    )
    assert hits["hits"]["total"]["value"] == 0
    assert [p.exists() for p in files] == [False] * 10 + [True] * 30
    assert report.files_removed == 5
    assert store.read(RETENTION_PENDING).height == 0
    assert report.oldest_remaining_ts == remaining["ts"].min()

    saved = store.read(RETENTION_REPORT).row(0, named=True)
    assert saved["run_id"] == report.run_id and saved["status"] == "ok"
    assert json.loads(saved["deleted_rows"])[ROLE_ROWS] == 5
    assert json.loads(saved["es_deleted"]) == {ROWS: 5, TURNS: 5}
    assert saved["es_pending"] == 0 and saved["duration_s"] >= 0


def test_sweep_is_idempotent(store, es, ops_settings):
    _seed(store, es, ops_settings)
    retention.sweep(store, es, ops_settings)
    again = retention.sweep(store, es, ops_settings)
    assert again.status == "ok"
    assert again.deleted_rows[ROLE_ROWS] == 0
    assert again.es_deleted == {ROWS: 0, TURNS: 0}
    assert store.read(ROLE_ROWS).height == 15
    assert store.read(RETENTION_REPORT).height == 2


def test_dry_run_changes_nothing(store, es, ops_settings):
    _, files = _seed(store, es, ops_settings)
    report = retention.sweep(store, es, ops_settings, dry_run=True)
    assert report.status == "dry_run"
    assert report.deleted_rows[ROLE_ROWS] == 5
    assert report.es_deleted == {ROWS: 5, TURNS: 5}
    assert store.read(ROLE_ROWS).height == 20
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 20
    assert all(p.exists() for p in files)


def test_es_straggler_is_removed(store, es, ops_settings):
    """A document indexed after its Delta row was purged (a racing indexer) goes next sweep."""
    rows, _ = _seed(store, es, ops_settings)
    retention.sweep(store, es, ops_settings)
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows.head(2))
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 17
    report = retention.sweep(store, es, ops_settings)
    assert report.es_deleted[ROWS] == 2
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 15


def test_interrupted_sweep_is_finished_by_the_next_run(store, es, ops_settings, monkeypatch):
    """A crash after Delta was purged and before Elasticsearch was touched (the injected
    RuntimeError stands in for the process being killed) leaves nothing behind next run."""
    rows, files = _seed(store, es, ops_settings)

    run_killed_at(
        monkeypatch, retention, "finish_pending", lambda: retention.sweep(store, es, ops_settings)
    )

    assert store.read(ROLE_ROWS).height == 15
    assert store.read(RETENTION_PENDING).height == 15  # 5 rows + 5 turns + 5 file paths
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 20

    report = retention.sweep(store, es, ops_settings)
    assert report.status == "ok"
    assert report.run_id == store.read(RETENTION_REPORT)["run_id"][0]  # resumed, same run
    assert report.deleted_rows[ROLE_ROWS] == 5  # deleted by the interrupted attempt
    assert report.es_deleted == {ROWS: 5, TURNS: 5}
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set(
        store.read(ROLE_ROWS)["row_id"]
    )
    assert not any(p.exists() for p in files[:10])
    assert store.read(RETENTION_PENDING).height == 0


def test_elasticsearch_down_leaves_ids_pending_until_next_run(store, es, ops_settings):
    _, files = _seed(store, es, ops_settings)
    down = ops_settings.replace(elasticsearch={"url": "http://127.0.0.1:9"})

    report = retention.sweep(store, make_client(down), down)

    assert report.status == "es_pending"
    assert report.es_pending == 10
    assert report.error
    assert store.read(ROLE_ROWS).height == 15
    assert not any(p.exists() for p in files[:10])
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 20
    saved = store.read(RETENTION_REPORT).row(0, named=True)
    assert saved["status"] == "es_pending" and saved["es_pending"] == 10

    again = retention.sweep(store, es, ops_settings)
    assert again.status == "ok" and again.es_pending == 0
    assert again.es_deleted == {ROWS: 5, TURNS: 5}
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set(
        store.read(ROLE_ROWS)["row_id"]
    )


def test_issue_41_finding_13_a_sweep_against_a_frozen_node_stops_asking_it(store, es, ops_settings):
    """The Elasticsearch here is a frozen stand-in (a loopback listener that accepts and never
    answers). The sweep's first request times out; it opens no other connection, purges Delta
    and the files, and leaves the Elasticsearch ids pending with the node named in its error."""
    _, files = _seed(store, es, ops_settings)
    with frozen_listener() as frozen:
        down = ops_settings.replace(elasticsearch={"url": frozen.url, "request_timeout": 1})
        report = retention.sweep(store, make_client(down), down)
        connections = frozen.connections

    assert connections == 1
    assert report.status == "es_pending" and report.es_pending == 10
    assert frozen.url in (report.error or "")
    assert store.read(ROLE_ROWS).height == 15
    assert not any(p.exists() for p in files[:10])


def test_issue_42_a_sweep_whose_bulk_delete_hangs_fails_after_the_bulk_timeout(
    store, es, ops_settings
):
    """The Elasticsearch here is a fake that freezes mid-bulk (a proxy to the session node that
    answers nothing from the first bulk request on). The sweep's deletes go through
    `bulk_write`, so that request fails after the bulk timeout setting, with its error; the ids
    stay pending, and a sweep against the node deletes them."""
    rows, _ = _seed(store, es, ops_settings)
    proxy = FreezingProxy(("127.0.0.1", urlsplit(ops_settings.elasticsearch.url).port or 9200))
    # the frozen sweep cannot release its lease: the rerun waits for it to expire
    frozen = ops_settings.replace(
        elasticsearch={
            "url": f"http://127.0.0.1:{proxy.port}",
            "bulk_timeout_s": 2,
            "writer_lease_ttl_s": 3,
        }
    )
    try:
        report = retention.sweep(store, make_client(frozen), frozen)
    finally:
        proxy.close()

    assert proxy.frozen_at is not None
    assert report.status == "es_pending" and report.es_pending == 10
    assert "did not answer a bulk request within 2 s" in (report.error or "")
    prefix = ops_settings.elasticsearch.index_prefix
    assert es_ids(es, prefix, ROWS) == set(rows["row_id"])
    thawed = ops_settings.replace(elasticsearch={"writer_lease_wait_s": 60})
    again = retention.sweep(store, es, thawed)
    assert again.status == "ok" and again.es_pending == 0
    assert es_ids(es, prefix, ROWS) == set(store.read(ROLE_ROWS)["row_id"])


def test_rederived_live_row_is_not_deleted_from_es(store, es, ops_settings):
    """A pending id whose row is live again in Delta (re-derived with a new TTL) stays indexed."""
    rows, _ = _seed(store, es, ops_settings)
    retention.record_pending(store, "old-run", {ROWS: [rows["row_id"][10]], TURNS: []})
    retention.sweep(store, es, ops_settings)
    assert rows["row_id"][10] in es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)
    assert store.read(RETENTION_PENDING).height == 0


def test_cli_retention_run(store, es, ops_settings, monkeypatch):
    _seed(store, es, ops_settings)
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", ops_settings.elasticsearch.index_prefix)
    monkeypatch.setenv("ELASTICSEARCH_URL", ops_settings.elasticsearch.url)
    runner = CliRunner()

    dry = runner.invoke(app, ["retention", "run", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["status"] == "dry_run"
    assert store.read(ROLE_ROWS).height == 20
    real = runner.invoke(app, ["retention", "run"])
    assert real.exit_code == 0, real.output
    assert json.loads(real.stdout)["es_pending"] == 0
    assert store.read(ROLE_ROWS).height == 15


@pytest.fixture
def pipeline_data(store, es, ops_settings):
    """The real pipeline over two generated batches (one 400 days old, one recent)."""
    now = datetime.now(UTC)
    run_pipeline(store, es, ops_settings, {"old": (1, now - timedelta(days=400)), "new": (2, now)})
    rows = store.read(ROLE_ROWS)
    old = rows.filter(pl.col("expires_at") <= now)
    assert 0 < old.height < rows.height
    return rows, old


def _raw_es_hits(es, prefix: str, conversation_ids: list[str]) -> int:
    index = alias_name(prefix, ROWS)
    es.indices.refresh(index=index)
    return es.count(index=index, query={"terms": {"conversation_id": conversation_ids}})["count"]


def test_pipeline_rows_past_ttl_are_gone_from_delta_es_search_pull_and_catalog(
    store, es, ops_settings, pipeline_data
):
    rows, old = pipeline_data
    old_convs = old["conversation_id"].unique().to_list()
    assert _raw_es_hits(es, ops_settings.elasticsearch.index_prefix, old_convs) == old.height
    old_files = [
        p
        for p in Path(ops_settings.files).rglob("*")
        if p.is_file() and any(f"conv_{c}" in str(p) for c in old_convs)
    ]

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert report.deleted_rows[ROLE_ROWS] == old.height
    for table in (ROLE_ROWS, TURN_LOGS, TURN_CATALOG, CONVERSATION_TIMELINES, RAW_TURN_EVENTS):
        left = store.read(table).filter(pl.col("conversation_id").is_in(old_convs))
        assert left.is_empty(), table
    assert store.read(ROLE_ROWS).height == rows.height - old.height
    assert _raw_es_hits(es, ops_settings.elasticsearch.index_prefix, old_convs) == 0
    assert old_files and not any(p.exists() for p in old_files)

    service = SearchService(ops_settings, es)
    for user in old["user_id"].unique().to_list():
        principal = Principal(user_id=user)
        listed = service.conversations(principal).conversations
        assert listed and not {c.conversation_id for c in listed} & set(old_convs)
        text = old.filter(pl.col("user_id") == user)["text"][0]
        response = service.search(principal, SearchRequest(query=text[:200], days=3650))
        assert not {h.conversation_id for h in response.hits} & set(old_convs)
        mine = old.filter(pl.col("user_id") == user).row(0, named=True)
        with pytest.raises(NotFound):
            service.turn(principal, mine["conversation_id"], mine["turn_id"])


def test_indexer_racing_the_sweep_cannot_resurrect_documents(store, es, ops_settings):
    """An indexer run that read Delta before the sweep and writes after it (the race the
    single-run limit prevents in Dagster) re-adds expired documents; the next indexer run and
    the next sweep each remove them (and reads never show them: they are expired)."""
    now = datetime.now(UTC)
    run_pipeline(store, es, ops_settings, {"old": (1, now - timedelta(days=400)), "new": (2, now)})
    expired_ids = set(store.read(ROLE_ROWS).filter(pl.col("expires_at") <= now)["row_id"])
    before_sweep = current_versions(store, SOURCES[ROWS].tables)
    index = alias_target(es, alias_name(ops_settings.elasticsearch.index_prefix, ROWS))

    def racing_indexer_write() -> None:
        store.delete(INDEX_STATE, "kind = 'rows'")
        sync_index(
            store,
            es,
            SOURCES[ROWS],
            index,
            model_id=ops_settings.embedding.model,
            versions=before_sweep,
        )
        assert expired_ids <= es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)

    retention.sweep(store, es, ops_settings, vacuum_hours=168)
    live = set(store.read(ROLE_ROWS)["row_id"])
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == live

    racing_indexer_write()
    sync_live(store, es, ops_settings, model_id=ops_settings.embedding.model)
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == live

    racing_indexer_write()
    report = retention.sweep(store, es, ops_settings, vacuum_hours=168)
    assert report.es_deleted[ROWS] == len(expired_ids)
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == live


def _clean_copy(tmp_path: Path, settings: Settings) -> tuple[DeltaStore, Settings]:
    """A copy of the test's Delta tables and files under another home, for a clean run."""
    clean = settings.replace(home=tmp_path / "clean")
    shutil.copytree(settings.delta_uri, clean.delta_uri)
    shutil.copytree(settings.files, clean.files)
    return DeltaStore(clean.delta_uri), clean


def test_finding_15_and_16_a_resumed_sweep_counts_and_cleans_what_the_first_attempt_purged(
    store, es, ops_settings, tmp_path, monkeypatch
):
    """Finding 15: killed after its role_rows DELETE, the resumed sweep reported `role_rows: 0`.
    Finding 16: the purged rows' embedding statuses stayed. The crash is simulated right after
    the role_rows commit; the resumed run must leave the tables a clean run leaves and report
    the same counts."""
    rows, _ = _seed(store, es, ops_settings)
    write_embeddings(store, rows)
    clean_store, clean_settings = _clean_copy(tmp_path, ops_settings)

    crash_after_commit(monkeypatch, "delta:role_rows")
    with pytest.raises(SimulatedCrash):
        retention.sweep(store, es, ops_settings)
    assert store.read(ROLE_ROWS).height == 15
    assert store.read(ROW_EMBEDDINGS).height == 20  # the statuses were not reached
    assert store.read(LIFECYCLE_JOURNAL).height == 1  # the run is recorded as unfinished

    resumed = retention.sweep(store, es, ops_settings)
    clean = retention.sweep(clean_store, None, clean_settings)

    assert resumed.status == "ok" and clean.status == "es_pending"  # the clean run had no ES
    assert resumed.deleted_rows == clean.deleted_rows
    assert resumed.deleted_rows[ROLE_ROWS] == resumed.deleted_rows[ROW_EMBEDDINGS] == 5
    assert set(store.read(ROW_EMBEDDINGS)["row_id"]) == set(store.read(ROLE_ROWS)["row_id"])
    assert store.read(LIFECYCLE_JOURNAL).is_empty()
    saved = store.read(RETENTION_REPORT)
    assert saved.height == 1 and json.loads(saved["deleted_rows"][0])[ROLE_ROWS] == 5
    assert_same_tables(
        store,
        clean_store,
        skip={RETENTION_PENDING, RETENTION_REPORT},
        volatile={"recorded_at", "run_id"},
    )
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set(
        store.read(ROLE_ROWS)["row_id"]
    )


def test_finding_16_statuses_of_rows_purged_while_elasticsearch_was_down_go_next_run(
    store, es, ops_settings, tmp_path, monkeypatch
):
    """A crash right after the role_rows DELETE of a sweep that could not reach Elasticsearch:
    the pending ids are all that is left of the purged rows, and the next run (Elasticsearch
    back) removes their statuses and documents."""
    rows, _ = _seed(store, es, ops_settings)
    write_embeddings(store, rows)
    down = ops_settings.replace(elasticsearch={"url": "http://127.0.0.1:9"})
    crash_after_commit(monkeypatch, "delta:role_rows")
    with pytest.raises(SimulatedCrash):
        retention.sweep(store, make_client(down), down)

    report = retention.sweep(store, es, ops_settings)

    assert report.status == "ok"
    assert report.deleted_rows[ROW_EMBEDDINGS] == 5
    assert store.read(ROW_EMBEDDINGS).height == 15
    assert len(es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)) == 15
