"""Work proportional to change: table changes from the change data feed or from the files the
Delta log changed, scoped index syncs, the embedding stage's watermarks and the cheap count
check, on real Delta tables, the real node and model.

Tests about reading changes run twice, with the feed (tables created now) and without it (tables
created before the feed was turned on). Several delete from disk the data files a run must not
read: the run then succeeds only if it really reads nothing else."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from conftest_index import role_rows, turn_tables, write_rows
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.embedding.stage import (
    OK,
    SKIPPED,
    covered_mark,
    embed_role_rows,
    retry_mark,
    status_frame,
)
from ctxdb.index.changed_docs import changed_bases
from ctxdb.index.checks import count_mismatches, verify_ids
from ctxdb.index.client import make_client
from ctxdb.index.documents import FINGERPRINT, ID
from ctxdb.index.incremental import (
    build_base,
    current_versions,
    index_uuid,
    plan_changes,
    read_state,
)
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sources import ROWS_SOURCE, TURNS_SOURCE
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target
from ctxdb.settings import clear_settings_cache
from ctxdb.storage import changes as changes_module
from ctxdb.storage.changes import (
    READ_ATTEMPTS,
    ChangesUnavailable,
    ChangesUnreadable,
    table_changes,
    watermark,
)
from ctxdb.storage.tables import (
    CHANGE_FEED_PROPERTY,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
    TURN_CATALOG,
    TURN_CATALOG_SCHEMA,
    TURN_LOGS,
)

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(params=[True, False], ids=["feed", "file-diff"])
def feed(request: pytest.FixtureRequest) -> bool:
    return request.param


def set_feed(store, tables, feed: bool) -> None:
    """Turn the change data feed off on existing tables (as on tables created before it)."""
    if not feed:
        for table in tables:
            DeltaTable(store.uri(table)).alter.set_table_properties({CHANGE_FEED_PROPERTY: "false"})


def statuses(frame: pl.DataFrame, status: str = OK, model: str = MODEL) -> pl.DataFrame:
    """Embedding status rows for the role rows in `frame`, one attempt each, as the embedding
    stage writes them (no model needed for diff tests)."""
    before = frame.select(
        "row_id", "text_hash", "expires_at", attempts=pl.lit(int(status in (OK, SKIPPED)))
    )
    return status_frame(before, model, status, None, datetime.now(UTC))


def write_statuses(store, frame: pl.DataFrame) -> None:
    store.upsert(ROW_EMBEDDINGS, frame, keys=["row_id"], schema=ROW_EMBEDDINGS_SCHEMA)


def data_files(store, table: str) -> set[str]:
    return {os.path.basename(uri) for uri in DeltaTable(store.uri(table)).file_uris()}


def remove_files(store, table: str, names: set[str]) -> None:
    """Delete data files from disk: a run that still reads them fails."""
    for name in names:
        os.remove(Path(store.uri(table)) / name)


def same_plan(store, source, old_versions, new_versions) -> None:
    """The scoped bases plan exactly the changes full bases plan."""
    full_new = build_base(store, source, new_versions, MODEL)
    full_old = build_base(store, source, old_versions, MODEL)
    want_changed, want_gone = plan_changes(full_new, full_old, None)
    new, old = changed_bases(store, source, old_versions, new_versions, MODEL)
    changed, gone = plan_changes(new, old, None)
    assert changed.sort(ID).equals(want_changed.sort(ID))
    assert sorted(gone.to_list()) == sorted(want_gone.to_list())
    in_scope = full_new.join(new.select(ID), on=ID, how="semi")
    assert new.sort(ID).select(ID, FINGERPRINT).equals(in_scope.sort(ID).select(ID, FINGERPRINT))


def test_table_changes_read_only_what_the_log_changed(delta_store, feed) -> None:
    write_rows(delta_store, role_rows([f"first {i}" for i in range(4)]))
    set_feed(delta_store, [ROLE_ROWS], feed)
    write_rows(delta_store, role_rows([f"second {i}" for i in range(3)], conversation="c2"))
    since = delta_store.version(ROLE_ROWS)
    untouched = data_files(delta_store, ROLE_ROWS)
    write_rows(delta_store, role_rows(["brand new"], conversation="c3"))
    remove_files(delta_store, ROLE_ROWS, untouched)
    changes = table_changes(delta_store, ROLE_ROWS, since, schema=ROLE_ROWS_SCHEMA)
    assert changes.feed == feed
    new, old = changes.changed()
    assert new["row_id"].to_list() == ["c3-r0"] and old.is_empty()


def test_rewrites_cancel_and_updates_and_deletes_show_on_both_sides(delta_store, feed) -> None:
    write_rows(delta_store, role_rows([f"text {i}" for i in range(5)]))
    set_feed(delta_store, [ROLE_ROWS], feed)
    since = delta_store.version(ROLE_ROWS)
    write_rows(delta_store, role_rows(["text 2 edited"], start=2))
    write_rows(delta_store, role_rows(["text 3"], start=3))  # rewritten with the same text
    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r4'")
    changes = table_changes(delta_store, ROLE_ROWS, since, columns=["row_id", "text"])
    # the feed holds just the written rows; a rewritten file carries unchanged rows too
    assert changes.added.height == (2 if feed else 4)
    new, old = changes.changed()
    assert new.rows() == [("c1-r2", "text 2 edited")]
    assert sorted(old.rows()) == [("c1-r2", "text 2"), ("c1-r4", "text 4")]
    assert changes.current(pl.DataFrame({"row_id": ["c1-r0", "c1-r4"]})).rows() == [
        ("c1-r0", "text 0")
    ]


def test_compaction_changes_no_row_and_vacuum_leaves_only_the_feed(delta_store, feed) -> None:
    write_rows(delta_store, role_rows(["row 0"]))
    set_feed(delta_store, [ROLE_ROWS], feed)
    for i in range(1, 3):
        write_rows(delta_store, role_rows([f"row {i}"], start=i))
    since = delta_store.version(ROLE_ROWS)
    DeltaTable(delta_store.uri(ROLE_ROWS)).optimize.compact()
    new, old = table_changes(delta_store, ROLE_ROWS, since).changed()
    assert new.is_empty() and old.is_empty()
    DeltaTable(delta_store.uri(ROLE_ROWS)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    if feed:  # the feed keeps its own change files: VACUUM of data files leaves them
        new, _ = table_changes(delta_store, ROLE_ROWS, since - 1, columns=["row_id"]).changed()
        assert new["row_id"].to_list() == ["c1-r2"]
    else:  # the last write's file was compacted away and vacuumed
        with pytest.raises(ChangesUnavailable):
            table_changes(delta_store, ROLE_ROWS, since - 1)


def test_scoped_row_bases_plan_what_full_bases_plan(delta_store, feed) -> None:
    rows = role_rows([f"answer {i}" for i in range(6)]).vstack(
        role_rows(["other"], conversation="c2")
    )
    write_rows(delta_store, rows)
    write_statuses(delta_store, statuses(rows.head(5)).vstack(statuses(rows[5:], "pending")))
    set_feed(delta_store, ROWS_SOURCE.tables, feed)
    before = current_versions(delta_store, ROWS_SOURCE.tables)
    write_rows(delta_store, role_rows(["answer 1 edited", "answer 2"], start=1))
    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r3'")
    write_rows(delta_store, role_rows(["fresh"], conversation="c3"))
    write_statuses(delta_store, statuses(rows[5:6]))  # a pending row embedded later
    same_plan(delta_store, ROWS_SOURCE, before, current_versions(delta_store, ROWS_SOURCE.tables))


def test_new_rows_are_indexed_without_reading_untouched_files(delta_store, feed) -> None:
    rows = role_rows([f"answer {i}" for i in range(4)])
    write_rows(delta_store, rows)
    write_statuses(delta_store, statuses(rows))
    set_feed(delta_store, ROWS_SOURCE.tables, feed)
    before = current_versions(delta_store, ROWS_SOURCE.tables)
    untouched = {t: data_files(delta_store, t) for t in ROWS_SOURCE.tables}
    fresh = role_rows(["a new answer"], conversation="c9")
    write_rows(delta_store, fresh)
    write_statuses(delta_store, statuses(fresh))
    for table, names in untouched.items():
        remove_files(delta_store, table, names)
    after = current_versions(delta_store, ROWS_SOURCE.tables)
    new, old = changed_bases(delta_store, ROWS_SOURCE, before, after, MODEL)
    assert new[ID].to_list() == ["c9-r0"] and old.is_empty()
    assert new["embedding_status"].to_list() == ["ok"]


def test_scoped_turn_bases_look_up_unchanged_rows_of_a_changed_conversation(
    delta_store, feed
) -> None:
    turn_tables(delta_store, 3)
    set_feed(delta_store, TURNS_SOURCE.tables, feed)
    turn_tables(delta_store, 2, conversation="c2")
    before = current_versions(delta_store, TURNS_SOURCE.tables)
    catalog = delta_store.read(TURN_CATALOG).filter(
        (pl.col("conversation_id") == "c1") & (pl.col("turn_id") == "turn0")
    )
    edited = catalog.with_columns(pl.lit("a renamed conversation").alias("title"))
    delta_store.upsert(
        TURN_CATALOG, edited, keys=["conversation_id", "turn_id"], schema=TURN_CATALOG_SCHEMA
    )
    after = current_versions(delta_store, TURNS_SOURCE.tables)
    assert after[TURN_LOGS] == before[TURN_LOGS]  # turn logs of c1 come from a lookup
    same_plan(delta_store, TURNS_SOURCE, before, after)
    new, _ = changed_bases(delta_store, TURNS_SOURCE, before, after, MODEL)
    assert set(new["conversation_id"]) == {"c1"} and new.height == 3


def test_embedding_runs_read_only_new_rows_and_skip_when_nothing_changed(
    delta_store, embedder
) -> None:
    write_rows(delta_store, role_rows(["first text", "second text"]))
    assert embed_role_rows(delta_store, embedder, batch_size=8).embedded == 2
    version = delta_store.version(ROLE_ROWS)
    assert watermark(delta_store, ROW_EMBEDDINGS, covered_mark(MODEL)) == version
    assert watermark(delta_store, ROW_EMBEDDINGS, retry_mark(MODEL)) == 0
    old_files = data_files(delta_store, ROLE_ROWS)
    write_rows(delta_store, role_rows(["third text"], conversation="c2"))
    remove_files(delta_store, ROLE_ROWS, old_files)  # rows already covered are never read again
    second = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (second.to_process, second.embedded, second.total_rows) == (1, 1, 3)
    assert delta_store.scan(ROW_EMBEDDINGS).collect().height == 3
    remove_files(delta_store, ROLE_ROWS, data_files(delta_store, ROLE_ROWS) - old_files)
    third = embed_role_rows(delta_store, embedder, batch_size=8)  # no role row left to read
    assert (third.to_process, third.embedded) == (0, 0)


def test_embedding_after_a_delete_an_update_and_vacuum(delta_store, embedder) -> None:
    write_rows(delta_store, role_rows(["keep me", "drop me", "change me"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r1'")
    write_rows(delta_store, role_rows(["changed text"], start=2))
    DeltaTable(delta_store.uri(ROLE_ROWS)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    report = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (report.to_process, report.embedded) == (1, 1)
    frame = delta_store.read(ROW_EMBEDDINGS).sort("row_id")
    assert frame["row_id"].to_list() == ["c1-r0", "c1-r2"]
    assert set(frame["embedding_status"]) == {"ok"}


@pytest.mark.es
def test_count_check_counts_and_verify_compares_every_id(
    delta_store, embedder, es_settings, monkeypatch
) -> None:
    es = make_client(es_settings)
    prefix = es_settings.elasticsearch.index_prefix
    write_rows(delta_store, role_rows([f"answer {i}" for i in range(5)]))
    turn_tables(delta_store, 2)
    embed_role_rows(delta_store, embedder, batch_size=8)
    reports = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    write_rows(delta_store, role_rows(["one more"], conversation="c2"))
    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r0'")
    embed_role_rows(delta_store, embedder, batch_size=8)
    second = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (second[ROWS].full, second[ROWS].indexed, second[ROWS].deleted) == (False, 1, 1)
    assert second[ROWS].docs == reports[ROWS].docs == 5
    assert all(c.ok for c in count_mismatches(delta_store, es, prefix))

    # A missing document hidden by an extra one: equal counts, different ids.
    rows_alias = alias_name(prefix, ROWS)
    es.delete(index=rows_alias, id="c1-r1", refresh=True)
    es.index(index=rows_alias, id="stray", document={"text": "stray"}, refresh=True)
    counted = {c.kind: c for c in count_mismatches(delta_store, es, prefix)}
    assert counted[ROWS].ok and counted[TURNS].ok
    verified = {c.kind: c for c in verify_ids(delta_store, es, prefix)}
    assert (verified[ROWS].missing, verified[ROWS].extra) == (["c1-r1"], ["stray"])
    monkeypatch.setenv("ELASTICSEARCH_URL", es_settings.elasticsearch.url)
    monkeypatch.setenv("CTXDB_HOME", str(es_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", prefix)
    clear_settings_cache()
    _register_all()
    result = CliRunner().invoke(app, ["index", "verify"])
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["kind"]: line["ok"] for line in lines} == {ROWS: False, TURNS: True}


def vacuum_after_compaction(store, table: str) -> None:
    """Compact `table` and VACUUM the files compaction replaced (no retention window)."""
    DeltaTable(store.uri(table)).optimize.compact()
    DeltaTable(store.uri(table)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )


def expire_log(store, table: str) -> None:
    """Checkpoint `table` and clean up every log entry before the checkpoint."""
    DeltaTable(store.uri(table)).create_checkpoint()
    DeltaTable(store.uri(table)).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"}
    )
    DeltaTable(store.uri(table)).cleanup_metadata()


def test_changes_after_a_vacuumed_or_expired_version_are_unavailable(delta_store, feed) -> None:
    write_rows(delta_store, role_rows(["first"]))
    set_feed(delta_store, [ROLE_ROWS], feed)
    since = delta_store.version(ROLE_ROWS)
    delta_store.append(ROLE_ROWS, role_rows(["appended"], conversation="c2"), ROLE_ROWS_SCHEMA)
    assert table_changes(delta_store, ROLE_ROWS, since).changed()[0]["row_id"].to_list() == [
        "c2-r0"
    ]
    # the append's file (which the feed of an append reads too) compacted away and vacuumed
    vacuum_after_compaction(delta_store, ROLE_ROWS)
    with pytest.raises(ChangesUnavailable, match="a file was vacuumed"):
        table_changes(delta_store, ROLE_ROWS, since)
    expire_log(delta_store, ROLE_ROWS)
    with pytest.raises(ChangesUnavailable, match="log entries were cleaned up"):
        table_changes(delta_store, ROLE_ROWS, since)


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes_module, "READ_BACKOFF_S", 0.01)


def failing_feed(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make the first `failures` change data feed reads fail as a throttled S3 call would
    (the failure injected by wrapping `DeltaTable.load_cdf`); returns the list of attempts."""
    real = DeltaTable.load_cdf
    attempts: list[int] = []

    def load_cdf(self, *args, **kwargs):
        attempts.append(len(attempts) + 1)
        if len(attempts) <= failures:
            raise DeltaError(
                "Generic S3 error: Error performing GET s3://memory/role_rows/_delta_log/"
                '00000000000000000002.json: response error "SlowDown", after 10 retries\n'
                "  caused by: Server returned non-2xx status code: 503 Service Unavailable"
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "load_cdf", load_cdf)
    return attempts


def test_a_transient_feed_failure_is_retried_and_succeeds(
    delta_store, monkeypatch, fast_retries, caplog
) -> None:
    """A failure test of the change feed read: the fault is injected by wrapping
    `DeltaTable.load_cdf` (the feed itself is real), failing twice and then reading."""
    write_rows(delta_store, role_rows(["first"]))
    since = delta_store.version(ROLE_ROWS)
    write_rows(delta_store, role_rows(["second"], start=1))
    attempts = failing_feed(monkeypatch, failures=2)
    with caplog.at_level(logging.WARNING, logger="ctxdb.storage.changes"):
        changes = table_changes(delta_store, ROLE_ROWS, since)
    assert changes.feed and changes.changed()[0]["row_id"].to_list() == ["c1-r1"]
    assert attempts == [1, 2, 3]
    retried = [
        r.getMessage()
        for r in caplog.records
        if r.name == "ctxdb.storage.changes" and r.levelno == logging.WARNING
    ]
    assert len(retried) == 2 and "SlowDown" in retried[0] and "try 2 of 4" in retried[0]


@pytest.mark.es
def test_a_persistent_feed_failure_is_raised_with_its_cause_and_no_full_pass(
    delta_store, embedder, es_settings, monkeypatch, fast_retries, caplog
) -> None:
    """A failure test of the change feed read: every `DeltaTable.load_cdf` call fails (the fault
    injected by wrapping it). The sync and the embedding stage raise it after the retries; the
    index, its state and the embedding statuses stay as they were."""
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["first answer", "second answer"]))
    turn_tables(delta_store, 1)
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    rows_index = alias_name(es_settings.elasticsearch.index_prefix, ROWS)
    name = alias_target(es, rows_index)
    state = read_state(delta_store, name, index_uuid(es, name))
    write_rows(delta_store, role_rows(["third answer"], conversation="c2"))
    statuses_before = delta_store.read(ROW_EMBEDDINGS).sort("row_id")

    attempts = failing_feed(monkeypatch, failures=10**6)
    with pytest.raises(ChangesUnreadable) as embedding_error:
        embed_role_rows(delta_store, embedder, batch_size=8)
    assert len(attempts) == READ_ATTEMPTS
    assert delta_store.read(ROW_EMBEDDINGS).sort("row_id").equals(statuses_before)
    with caplog.at_level(logging.WARNING), pytest.raises(ChangesUnreadable) as sync_error:
        sync_live(delta_store, es, es_settings, model_id=MODEL)
    for error in (embedding_error.value, sync_error.value):
        assert "\n" not in str(error)
        assert str(error).startswith("cannot read the changes after version")
        assert f"({READ_ATTEMPTS} attempts): DeltaError: Generic S3 error" in str(error)
        assert isinstance(error.__cause__, DeltaError)
    assert read_state(delta_store, name, index_uuid(es, name)) == state
    assert es.count(index=rows_index)["count"] == 2
    assert "full sync" not in caplog.text and "full pass" not in caplog.text


@pytest.mark.es
def test_a_sync_whose_version_was_vacuumed_is_a_full_pass_that_says_why(
    delta_store, es_settings, feed, caplog
) -> None:
    es = make_client(es_settings)
    rows = role_rows(["first answer", "second answer"])
    write_rows(delta_store, rows)
    write_statuses(delta_store, statuses(rows))
    turn_tables(delta_store, 1)
    set_feed(delta_store, [*ROWS_SOURCE.tables, *TURNS_SOURCE.tables], feed)
    first = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert first[ROWS].docs == 2
    fresh = role_rows(["third answer"], conversation="c2")
    delta_store.append(ROLE_ROWS, fresh, ROLE_ROWS_SCHEMA)
    write_statuses(delta_store, statuses(fresh))
    vacuum_after_compaction(delta_store, ROLE_ROWS)
    with caplog.at_level(logging.WARNING, logger="ctxdb.index.incremental"):
        second = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (second[ROWS].full, second[ROWS].docs, second[ROWS].indexed) == (True, 3, 3)
    assert second[TURNS].skipped
    warned = [
        r
        for r in caplog.records
        if r.name == "ctxdb.index.incremental" and r.levelno >= logging.WARNING
    ]
    assert [r.levelno for r in warned] == [logging.WARNING]
    assert warned[0].getMessage().startswith("full sync of ")
    assert "role_rows: the changes after version" in warned[0].getMessage()
    assert "cannot be read any more: a file was vacuumed" in warned[0].getMessage()
