"""Erasure of a user or a conversation across Delta, Elasticsearch, storage and landing files."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from conftest_ops import (
    derived,
    index_rows,
    role_rows,
    run_killed_at,
    run_pipeline,
    write_derived,
    write_embeddings,
    write_turn_files,
)
from frozen_listener import frozen_listener
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.contract.identity import Principal
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.lifecycle import retention
from ctxdb.search.models import NotFound
from ctxdb.serve.resolve import Resolver
from ctxdb.storage.tables import (
    EMBEDDINGS,
    PURGED_CONVERSATIONS,
    QUARANTINE_SCHEMA,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
)
from ctxdb.storage.tombstones import conversation_key
from ctxdb.text import text_hash

pytestmark = pytest.mark.es

CONTENT = erasure.CONTENT_TABLES
SHARED_TEXT = "the same sentence typed by two users"


@pytest.fixture
def seeded(store, es, ops_settings):
    """u1 owns conversations c1 and c2, u2 owns c3; one u2 row repeats a u1 text."""
    u1 = pl.concat(
        [
            role_rows(4, user="u1", conversation="c1"),
            role_rows(3, user="u1", conversation="c2"),
        ]
    ).with_columns(
        text=pl.when(pl.col("row_id") == "c1-t0-assistant")
        .then(pl.lit(SHARED_TEXT))
        .otherwise(pl.col("text"))
    )
    u2 = role_rows(4, user="u2", conversation="c3").with_columns(
        text=pl.when(pl.col("row_id") == "c3-t0-assistant")
        .then(pl.lit(SHARED_TEXT))
        .otherwise(pl.col("text"))
    )
    rows = pl.concat([u1, u2]).with_columns(
        text_hash=pl.col("text").map_elements(text_hash, return_dtype=pl.String)
    )
    write_derived(store, rows)
    _landing_and_quarantine(store, ops_settings, rows)
    write_embeddings(store, rows)
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows)
    write_turn_files(ops_settings.files, rows)
    return rows


def _landing_and_quarantine(store, settings, rows: pl.DataFrame) -> None:
    raw = derived(rows)[RAW_TURN_EVENTS]
    landing = Path(settings.landing_uri)
    landing.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "event_id": r["event_id"],
                "user_id": r["user_id"],
                "conversation_id": r["conversation_id"],
                "turn_id": r["turn_id"],
            }
        )
        for r in raw.iter_rows(named=True)
    ]
    (landing / "events.jsonl").write_text("\n".join(lines) + "\n")
    broken = ['{"user_id": "u1", "conversation_id": "c9", "type": 42', '{"user_id": "u2" broken']
    (landing / "bad.jsonl").write_text("\n".join(broken) + "\n")
    store.append(
        QUARANTINED_EVENTS,
        pl.DataFrame(
            {
                "source_file": "bad.jsonl",
                "line_number": [1, 2],
                "raw_line": broken,
                "reason": "invalid",
                "detail": "bad type",
                "event_id": None,
                "conversation_id": pl.Series([None, None], dtype=pl.String),
                "quarantined_at": datetime.now(UTC),
            }
        ),
        schema=QUARANTINE_SCHEMA,
    )


def _es_count(es, prefix: str, kind: str, field: str, value: str) -> int:
    index = alias_name(prefix, kind)
    es.indices.refresh(index=index)
    return es.count(index=index, query={"term": {field: value}})["count"]


def _rows_for(store, table: str, field: str, value: str) -> int:
    frame = store.read(table)
    if not frame.columns:  # never written
        return 0
    if field in frame.columns:
        return frame.filter(pl.col(field) == value).height
    return frame.filter(pl.col("raw_line").str.contains(f'"{value}"')).height


def test_erase_user_leaves_zero_rows_anywhere(store, es, ops_settings, seeded):
    files = Path(ops_settings.files)
    report = erasure.erase(store, es, ops_settings, erasure.Scope("user_id", "u1"))

    assert report.found and report.verified, report.message
    assert "verified zero remaining" in report.message
    assert report.deleted_rows[ROLE_ROWS] == 7
    assert report.landing_lines_removed == 8  # 7 landed events + 1 quarantined line
    for table in CONTENT:
        assert _rows_for(store, table, "user_id", "u1") == 0, table
    assert store.read(ROLE_ROWS).height == 4
    assert store.read(QUARANTINED_EVENTS)["line_number"].to_list() == [2]
    for kind in (ROWS, TURNS):
        assert _es_count(es, ops_settings.elasticsearch.index_prefix, kind, "user_id", "u1") == 0
        assert _es_count(es, ops_settings.elasticsearch.index_prefix, kind, "user_id", "u2") == 4
    assert not (files / "acme/press/u1").exists()
    assert len(list((files / "acme/press/u2").rglob("*.txt"))) == 8
    landing = Path(ops_settings.landing_uri)
    assert '"u1"' not in (landing / "events.jsonl").read_text()
    assert (landing / "events.jsonl").read_text().count('"u2"') == 4
    assert '"u1"' not in (landing / "bad.jsonl").read_text()

    statuses = store.read(ROW_EMBEDDINGS)
    assert sorted(statuses["row_id"]) == sorted(seeded.filter(pl.col("user_id") == "u2")["row_id"])
    cached = set(store.read(EMBEDDINGS)["text_hash"])
    assert cached == set(seeded.filter(pl.col("user_id") == "u2")["text_hash"])
    assert text_hash(SHARED_TEXT) in cached  # still referenced by u2's row

    tombstoned = store.read(PURGED_CONVERSATIONS)
    assert sorted(tombstoned["conversation_key"]) == sorted(
        conversation_key(c) for c in ("c1", "c2")
    )
    assert tombstoned.columns == ["conversation_key", "purged_at"]  # no identifier is kept
    saved = store.read(RETENTION_REPORT).row(0, named=True)
    assert saved["operation"] == "erase" and saved["status"] == "ok"
    assert not any("u1" in str(value) for value in saved.values())
    assert store.read(RETENTION_PENDING).height == 0


def test_erase_conversation_keeps_the_users_other_conversations(store, es, ops_settings, seeded):
    report = erasure.erase(store, es, ops_settings, erasure.Scope("conversation_id", "c2"))

    assert report.verified, report.message
    for table in CONTENT:
        assert _rows_for(store, table, "conversation_id", "c2") == 0, table
    assert store.read(ROLE_ROWS).filter(pl.col("user_id") == "u1").height == 4
    assert (
        _es_count(es, ops_settings.elasticsearch.index_prefix, ROWS, "conversation_id", "c2") == 0
    )
    assert (
        _es_count(es, ops_settings.elasticsearch.index_prefix, ROWS, "conversation_id", "c1") == 4
    )
    files = Path(ops_settings.files) / "acme/press/u1"
    assert not (files / "conv_c2").exists() and (files / "conv_c1").exists()


def test_erased_refs_stop_resolving(store, es, ops_settings, seeded):
    resolver = Resolver(ops_settings, es)
    principal = Principal(user_id="u1", tenant="acme")
    ref = "conv:fi:conv_c2.turn_t1.files/report.txt"
    assert resolver.pull(principal, ref).data == b"t1 files/report.txt"

    erasure.erase(store, es, ops_settings, erasure.Scope("conversation_id", "c2"))

    with pytest.raises(NotFound):
        resolver.pull(principal, ref)
    assert resolver.pull(principal, "conv:fi:conv_c1.turn_t1.files/report.txt").data


def test_unknown_user_is_a_clear_message_not_an_error(store, es, ops_settings, seeded):
    report = erasure.erase(store, es, ops_settings, erasure.Scope("user_id", "nobody"))
    assert not report.found and report.status == "not_found"
    assert report.message == "No data found for user 'nobody'; nothing to erase."
    assert store.read(ROLE_ROWS).height == 11
    assert not store.exists(RETENTION_REPORT)
    again = erasure.erase(store, es, ops_settings, erasure.Scope("conversation_id", "nope"))
    assert again.message.startswith("No data found for conversation 'nope'")


def test_blank_identifier_is_rejected():
    with pytest.raises(ValueError, match="non-empty user_id"):
        erasure.Scope("user_id", "  ")


def test_interrupted_erase_is_finished_by_a_rerun(store, es, ops_settings, seeded, monkeypatch):
    """The injected RuntimeError stands in for the process being killed after Delta was purged
    and before Elasticsearch and storage were touched."""

    scope = erasure.Scope("user_id", "u1")
    run_killed_at(
        monkeypatch,
        erasure,
        "finish_pending",
        lambda: erasure.erase(store, es, ops_settings, scope),
    )
    assert _rows_for(store, ROLE_ROWS, "user_id", "u1") == 0
    assert _es_count(es, ops_settings.elasticsearch.index_prefix, ROWS, "user_id", "u1") == 7

    report = erasure.erase(store, es, ops_settings, scope)
    assert report.verified, report.message
    assert _es_count(es, ops_settings.elasticsearch.index_prefix, TURNS, "user_id", "u1") == 0
    assert not (Path(ops_settings.files) / "acme/press/u1").exists()


def test_erase_with_elasticsearch_down_is_finished_by_the_sweep(store, es, ops_settings, seeded):
    down = ops_settings.replace(elasticsearch={"url": "http://127.0.0.1:9"})
    report = erasure.erase(store, make_client(down), down, erasure.Scope("user_id", "u1"))

    assert report.status == "es_pending" and not report.verified
    assert "incomplete" in report.message
    for table in CONTENT:
        assert _rows_for(store, table, "user_id", "u1") == 0, table
    assert _es_count(es, ops_settings.elasticsearch.index_prefix, ROWS, "user_id", "u1") == 7

    sweep = retention.sweep(store, es, ops_settings)
    assert sweep.status == "ok"
    assert sweep.es_deleted == {ROWS: 7, TURNS: 7}
    for kind in (ROWS, TURNS):
        assert _es_count(es, ops_settings.elasticsearch.index_prefix, kind, "user_id", "u1") == 0


def test_cli_erase(store, es, ops_settings, seeded, monkeypatch):
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", ops_settings.elasticsearch.index_prefix)
    monkeypatch.setenv("ELASTICSEARCH_URL", ops_settings.elasticsearch.url)
    runner = CliRunner()

    neither = runner.invoke(app, ["erase"])
    assert neither.exit_code == 2 and "exactly one of --user or --conversation" in neither.output
    unknown = runner.invoke(app, ["erase", "--user", "ghost"])
    assert unknown.exit_code == 0
    assert "No data found for user 'ghost'" in unknown.output
    done = runner.invoke(app, ["erase", "--conversation", "c3"])
    assert done.exit_code == 0, done.output
    assert "verified zero remaining" in done.output
    assert store.read(ROLE_ROWS).filter(pl.col("conversation_id") == "c3").is_empty()


def test_pipeline_user_erasure_leaves_nothing_in_any_table_file_or_index(store, es, ops_settings):
    """Generated events for two users through the real landing, derivation and indexing."""
    run_pipeline(store, es, ops_settings, {"a": (4, datetime.now(UTC))})
    user = store.read(ROLE_ROWS)["user_id"].sort()[0]
    other = store.read(ROLE_ROWS).filter(pl.col("user_id") != user).height
    landing = Path(ops_settings.landing_uri)
    assert any(p.suffix == ".gz" for p in landing.rglob("*"))
    assert _landing_mentions(landing, user) > 0

    report = erasure.erase(store, es, ops_settings, erasure.Scope("user_id", user))

    assert report.verified, report.message
    for table in CONTENT:
        assert _rows_for(store, table, "user_id", user) == 0, table
    assert store.read(ROLE_ROWS).height == other > 0
    for kind in (ROWS, TURNS):
        assert _es_count(es, ops_settings.elasticsearch.index_prefix, kind, "user_id", user) == 0
    assert not list(Path(ops_settings.files).glob(f"*/*/{user}"))
    assert _landing_mentions(landing, user) == 0
    relanded = land(store, str(landing / "a"))
    assert relanded.landed == 0  # every line left was landed before
    assert _rows_for(store, RAW_TURN_EVENTS, "user_id", user) == 0


def _landing_mentions(root: Path, user: str) -> int:
    total = 0
    for path in root.rglob("*.jsonl*"):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        total += data.decode().count(f'"user_id":"{user}"')
    return total


def test_issue_41_finding_14_erasure_after_the_home_was_copied_edits_the_copy(
    store, es, ops_settings, tmp_path_factory
):
    """Landing records local files by absolute path. A memory whose home was copied elsewhere
    (a backup restored, a move) is erased in its own landing files, not in the old location's:
    the copy keeps no trace of the user, and the original home (another memory now) is left
    as it was."""
    import shutil

    from ctxdb.storage.delta import DeltaStore

    run_pipeline(store, es, ops_settings, {"a": (5, datetime.now(UTC))})
    user = store.read(ROLE_ROWS)["user_id"].sort()[0]
    old_landing = Path(ops_settings.landing_uri)
    before = _landing_mentions(old_landing, user)
    assert before > 0
    copy_home = tmp_path_factory.mktemp("restored") / "home"
    shutil.copytree(ops_settings.home, copy_home)
    restored = ops_settings.replace(home=copy_home)
    assert Path(restored.landing_uri) != old_landing and restored.storage_root is None

    report = erasure.erase(
        DeltaStore(restored.delta_uri), es, restored, erasure.Scope("user_id", user)
    )

    assert report.verified, report.message
    assert _landing_mentions(Path(restored.landing_uri), user) == 0
    assert _landing_mentions(old_landing, user) == before


def test_issue_41_finding_13_an_erasure_elasticsearch_did_not_finish_ends_with_an_error_line(
    store, es, ops_settings, seeded, monkeypatch
):
    """With Elasticsearch down, `ctxdb erase` finishes Delta, files and landing, and says it is
    incomplete as its `error:` line on stderr with exit 1, not on stdout."""
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", ops_settings.elasticsearch.index_prefix)
    monkeypatch.setenv("ELASTICSEARCH_URL", "http://127.0.0.1:9")
    done = CliRunner().invoke(app, ["erase", "--user", "u1"])
    assert done.exit_code == 1
    assert done.stdout == ""
    last = ending_error(done.stderr)
    assert last.startswith("error: Erasure of user 'u1'") and "es_pending" in last
    for table in CONTENT:
        assert _rows_for(store, table, "user_id", "u1") == 0, table


def test_issue_41_finding_13_an_erasure_against_a_frozen_node_stops_asking_it(
    store, es, ops_settings, monkeypatch
):
    """The Elasticsearch here is a frozen stand-in (a loopback listener that accepts and never
    answers, as a SIGSTOPped node does). The erasure's first request times out; it asks nothing
    more of that node (one connection in all: no retry, no later step connecting again), leaves
    the Elasticsearch deletes pending, finishes Delta, and ends with one `error:` line naming
    the node and exit 1. The sweep then finishes the deletes on the real node."""
    run_pipeline(store, es, ops_settings, {"a": (4, datetime.now(UTC))})
    user = store.read(ROLE_ROWS)["user_id"].sort()[0]
    prefix = ops_settings.elasticsearch.index_prefix
    assert _es_count(es, prefix, ROWS, "user_id", user) > 0
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", prefix)
    with frozen_listener() as frozen:
        monkeypatch.setenv("ELASTICSEARCH_URL", frozen.url)
        done = CliRunner().invoke(app, ["erase", "--user", user])
        connections = frozen.connections

    assert connections == 1
    assert done.exit_code == 1 and done.stdout == ""
    last = ending_error(done.stderr)
    assert last.startswith("error: Erasure of user") and "es_pending" in last and frozen.url in last
    for table in CONTENT:
        assert _rows_for(store, table, "user_id", user) == 0, table
    assert store.read(RETENTION_PENDING).height > 0
    assert retention.sweep(store, es, ops_settings).status == "ok"
    for kind in (ROWS, TURNS):
        assert _es_count(es, prefix, kind, "user_id", user) == 0


def ending_error(stderr: str) -> str:
    """The one `error:` line a failing command ends with (warnings logged before it, when an
    earlier test of the process configured the CLI's logging, are not errors)."""
    lines = stderr.splitlines()
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], stderr
    return lines[-1]
