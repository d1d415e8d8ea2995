"""Issue 12, indexing: one document Elasticsearch cannot take no longer fails every index build
and live sync (finding 7), and a bug while reading the previous version is raised instead of
turning into a silent full resync (finding 11). Real Delta tables, the real node."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from conftest_index import role_rows, write_rows
from conftest_turn_record import NOW, Turn, write_jsonl
from deltalake import DeltaTable

from ctxdb.index.client import make_client
from ctxdb.index.incremental import sync_index
from ctxdb.index.index_failures import failures_report
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sources import SOURCES
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target
from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.record.expiry import LATEST_EXPIRY
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import INDEX_FAILURES, INDEX_STATE, ROLE_ROWS, TURN_LOGS

pytestmark = pytest.mark.es

MODEL = "all-MiniLM-L6-v2"


def rows_report(store: DeltaStore, settings: Settings):
    reports = sync_live(store, make_client(settings), settings, model_id=MODEL)
    return {r.kind: r for r in reports}[ROWS]


def far_future(rows: pl.DataFrame, row_id: str) -> pl.DataFrame:
    """`rows` with `expires_at` of `row_id` in the year 10000, as derivation wrote it for an
    event dated 9999-12-31 before the contract bounded timestamps."""
    year_10000 = pl.datetime(10000, 1, 1, time_zone="UTC").dt.cast_time_unit("us")
    return rows.with_columns(
        pl.when(pl.col("row_id") == row_id)
        .then(year_10000)
        .otherwise(pl.col("expires_at"))
        .alias("expires_at")
    )


def test_finding_7_a_rejected_document_is_recorded_and_the_sync_goes_on(
    delta_store: DeltaStore, es_settings: Settings
) -> None:
    es = make_client(es_settings)
    write_rows(delta_store, far_future(role_rows(["one", "year ten thousand", "two"]), "c1-r1"))

    report = rows_report(delta_store, es_settings)  # before: BulkWriteFailed, nothing advanced

    assert (report.indexed, report.rejected) == (2, 1)
    failure = delta_store.read(INDEX_FAILURES).row(0, named=True)
    assert (failure["kind"], failure["doc_id"], failure["status"]) == (ROWS, "c1-r1", 400)
    assert (failure["tenant"], failure["user_id"], failure["conversation_id"]) == ("t1", "u1", "c1")
    assert "expires_at" in failure["error"] and "\n" not in failure["error"]
    assert es.count(index=alias_name(es_settings.elasticsearch.index_prefix, ROWS))["count"] == 2
    assert rows_report(delta_store, es_settings).skipped  # the state advanced
    assert failures_report(delta_store)["offenders"][0].startswith("rows/c1-r1: ")

    rederived = role_rows(["year ten thousand"], start=1)  # derived again, expiry capped
    write_rows(delta_store, rederived)
    fixed = rows_report(delta_store, es_settings)
    assert (fixed.indexed, fixed.rejected) == (1, 0)
    assert delta_store.read(INDEX_FAILURES).is_empty()  # the fix cleared the entry
    assert es.count(index=alias_name(es_settings.elasticsearch.index_prefix, ROWS))["count"] == 3


def test_an_erasure_clears_the_rejections_of_what_it_erased(
    delta_store: DeltaStore, es_settings: Settings
) -> None:
    write_rows(delta_store, far_future(role_rows(["one", "year ten thousand"]), "c1-r1"))
    rows_report(delta_store, es_settings)
    assert delta_store.read(INDEX_FAILURES).height == 1
    erasure.erase(
        delta_store, make_client(es_settings), es_settings, erasure.Scope("user_id", "u1")
    )
    assert delta_store.read(INDEX_FAILURES).is_empty()


def test_finding_7_expiry_is_capped_where_elasticsearch_reads_it(
    tmp_path: Path, es_settings: Settings
) -> None:
    settings = es_settings.replace(retention={"days": 10_000_000})
    turn = Turn("c1", "t1", start=datetime(2199, 12, 31, 23, 0, tzinfo=UTC)).basic()
    write_jsonl(tmp_path / "landing" / "a.jsonl", turn.events)
    store = DeltaStore(settings.delta_uri)
    land(store, str(tmp_path / "landing"), now=NOW)
    derive(store, settings, now=NOW)
    assert set(store.read(ROLE_ROWS)["expires_at"]) == {LATEST_EXPIRY}
    assert set(store.read(TURN_LOGS)["expires_at"]) == {LATEST_EXPIRY}

    reports = {r.kind: r for r in sync_live(store, make_client(settings), settings, model_id=MODEL)}

    assert reports[ROWS].rejected == reports[TURNS].rejected == 0
    assert reports[ROWS].indexed == store.read(ROLE_ROWS).height
    assert reports[TURNS].indexed == 1


def test_finding_11_a_bug_reading_the_previous_version_is_raised_not_a_full_resync(
    delta_store: DeltaStore, es_settings: Settings
) -> None:
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["one", "two"]))
    rows_report(delta_store, es_settings)
    write_rows(delta_store, role_rows(["three"], start=2))
    calls = []

    def base_with_a_bug(frames, model_id):  # a fake: this test is about the sync's own faults
        calls.append(model_id)
        if len(calls) == 2:  # the second base built: the previous version's
            raise TypeError("a bug in building documents")
        return SOURCES[ROWS].base(frames, model_id)

    buggy = dataclasses.replace(SOURCES[ROWS], base=base_with_a_bug)
    index = alias_target(es, alias_name(es_settings.elasticsearch.index_prefix, ROWS))
    state_before = delta_store.read(INDEX_STATE)

    with pytest.raises(TypeError, match="a bug"):  # before: logged, then a full resync
        sync_index(delta_store, es, buggy, index, model_id=MODEL)

    assert delta_store.read(INDEX_STATE).equals(state_before)


def test_a_vacuumed_previous_version_is_still_synced(
    delta_store: DeltaStore, es_settings: Settings
) -> None:
    """The expected condition the narrowed handler keeps: the previous version's files are gone
    (the sync reads what changed another way, or falls back to a full sync)."""
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["one", "two"]))
    rows_report(delta_store, es_settings)
    write_rows(delta_store, role_rows(["two again"], start=1))
    DeltaTable(delta_store.uri(ROLE_ROWS)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    report = rows_report(delta_store, es_settings)
    assert (report.docs, report.rejected) == (2, 0)
    alias = alias_name(es_settings.elasticsearch.index_prefix, ROWS)
    assert es.get(index=alias, id="c1-r1")["_source"]["text"] == "two again"
