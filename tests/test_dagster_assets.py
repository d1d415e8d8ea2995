"""Dagster-native declarations: every ctxdb table is an asset with its column schema, owner and
kinds; materializations carry row counts and what changed; the structural turn-record checks block
embedding; op jobs report the tables they change."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_ops import index_rows, role_rows, write_derived
from conftest_turn_record import NOW
from dagster import AssetKey, DagsterEventType, materialize

from assets.checks_derived import (
    one_turn_log_per_closed_turn,
    quarantine_count,
    role_rows_have_turn_log,
    user_and_final_assistant_rows,
)
from assets.derived import turn_record
from assets.embeddings import role_row_embeddings
from assets.landing import raw_turn_events
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    RAW_TURN_EVENTS,
    RETENTION_REPORT,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    SCHEMAS,
    TURN_LOGS,
)
from pipelines.definitions import defs
from pipelines.ops_jobs import retention_job
from pipelines.resources import build_resources

TURN_RECORD = [
    raw_turn_events,
    turn_record,
    one_turn_log_per_closed_turn,
    quarantine_count,
    role_rows_have_turn_log,
    user_and_final_assistant_rows,
]


def test_every_table_is_an_asset_with_its_schema() -> None:
    graph = defs.get_repository_def().asset_graph
    for table, schema in SCHEMAS.items():
        node = graph.get(AssetKey(table))
        columns = node.metadata["dagster/column_schema"].columns
        assert [c.name for c in columns] == schema.names, table
        assert node.owners == ["team:ctxdb"], table
        assert "delta" in node.kinds, table
        assert node.description, table
    assert "elasticsearch" in graph.get(AssetKey("search_index")).kinds


def test_structural_checks_are_blocking() -> None:
    for check in (
        one_turn_log_per_closed_turn,
        user_and_final_assistant_rows,
        role_rows_have_turn_log,
    ):
        assert all(spec.blocking for spec in check.check_specs)
    assert not any(spec.blocking for spec in quarantine_count.check_specs)


def _materializations(result) -> dict[str, dict]:
    return {
        event.asset_key.path[-1]: event.metadata
        for event in result.get_asset_materialization_events()
        for event in [event.event_specific_data.materialization]
    }


def _sample(tmp_path: Path) -> Path:
    generated = generate_events(users=2, conversations=6, seed=5, now=NOW, malformed_ratio=0.02)
    write_sample(generated, tmp_path / "landing")
    return tmp_path / "landing"


def test_materializations_carry_row_counts_and_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = _sample(tmp_path)
    resources = build_resources(settings.replace(home=tmp_path))
    config = {"ops": {"raw_turn_events": {"config": {"path": str(landing)}}}}
    result = materialize(TURN_RECORD, resources=resources, run_config=config)
    store = DeltaStore(str(tmp_path / "delta"))
    metadata = _materializations(result)
    for table in (
        "raw_turn_events",
        "quarantined_events",
        "landed_files",
        "turn_logs",
        "role_rows",
        "turn_catalog",
        "conversation_timelines",
        "derive_state",
    ):
        assert metadata[table]["dagster/row_count"].value == store.read(table).height, table
    assert metadata[RAW_TURN_EVENTS]["rows_added"].value == store.read(RAW_TURN_EVENTS).height
    assert metadata[ROLE_ROWS]["rows_added"].value == store.read(ROLE_ROWS).height

    again = _materializations(materialize(TURN_RECORD, resources=resources, run_config=config))
    assert again[RAW_TURN_EVENTS]["rows_added"].value == 0
    assert again[ROLE_ROWS]["rows_added"].value == 0
    assert again[ROLE_ROWS]["dagster/row_count"].value == store.read(ROLE_ROWS).height


@pytest.mark.model
def test_a_broken_turn_record_blocks_embedding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    landing = _sample(tmp_path)
    store = DeltaStore(str(tmp_path / "delta"))
    resources = build_resources(settings.replace(home=tmp_path, embedding={"batch_size": 8}))
    config = {"ops": {"raw_turn_events": {"config": {"path": str(landing)}}}}
    assert materialize(TURN_RECORD, resources=resources, run_config=config).success
    # Break the record: drop one TurnLog, so its closed turn has none and its rows are orphans.
    victim = store.read(TURN_LOGS).row(0, named=True)
    store.delete(
        TURN_LOGS,
        f"conversation_id = '{victim['conversation_id']}' AND turn_id = '{victim['turn_id']}'",
    )

    result = materialize(
        [*TURN_RECORD, role_row_embeddings],
        resources=resources,
        run_config=config,
        raise_on_error=False,
    )

    failed = {e.check_name for e in result.get_asset_check_evaluations() if not e.passed}
    assert "one_turn_log_per_closed_turn" in failed
    assert ROW_EMBEDDINGS not in _materializations(result)
    assert not store.exists(ROW_EMBEDDINGS)


@pytest.mark.es
def test_retention_job_reports_the_tables_it_changed(store, es, ops_settings, resources) -> None:
    rows = role_rows(10, expired=3)
    write_derived(store, rows)
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows)
    config = {"ops": {"retention_sweep": {"config": {"dry_run": False}}}}

    result = retention_job.execute_in_process(run_config=config, resources=resources)

    events = [
        e.event_specific_data.materialization
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
    ]
    reported = {m.asset_key.path[-1]: m.metadata for m in events}
    assert reported[ROLE_ROWS]["rows_deleted"].value == 3
    assert reported[ROLE_ROWS]["dagster/row_count"].value == 7
    assert reported[RETENTION_REPORT]["dagster/row_count"].value == 1
