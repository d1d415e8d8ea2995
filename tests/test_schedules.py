"""Retention, erasure and compaction jobs, schedules and sensor in the Definitions, run for real."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest_ops import es_ids, index_rows, role_rows, write_derived
from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
)
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.mappings import ROWS
from ctxdb.lifecycle.retention import record_pending
from ctxdb.storage.tables import RETENTION_REPORT, ROLE_ROWS
from pipelines.definitions import defs
from pipelines.ops_jobs import (
    compaction_job,
    compaction_weekly,
    erase_job,
    retention_daily,
    retention_job,
    retention_pending_sensor,
)
from pipelines.resources import build_resources


def _output_metadata(result) -> dict:
    outputs = [e for e in result.all_node_events if e.is_successful_output]
    return outputs[0].step_output_data.metadata


def test_schedules_and_sensor_are_in_the_definitions():
    repository = defs.get_repository_def()
    assert {"retention_job", "erase_job", "compaction_job"} <= set(repository.job_names)
    schedules = {s.name: s for s in repository.schedule_defs}
    assert schedules["retention_daily"].cron_schedule == "0 3 * * *"
    assert schedules["retention_daily"].job_name == "retention_job"
    assert schedules["compaction_weekly"].cron_schedule == "0 4 * * 0"
    assert schedules["compaction_weekly"].job_name == "compaction_job"
    assert all(s.default_status == DefaultScheduleStatus.RUNNING for s in schedules.values())
    assert "retention_pending_sensor" in {s.name for s in repository.sensor_defs}


def test_retention_schedule_requests_an_explicit_keyed_run():
    context = build_schedule_context(scheduled_execution_time=datetime(2026, 12, 2, 3, tzinfo=UTC))
    request = retention_daily(context)
    assert isinstance(request, RunRequest)
    assert request.run_key == "retention-2026-12-02"
    assert request.run_config == {"ops": {"retention_sweep": {"config": {"dry_run": False}}}}
    assert request.tags["ctxdb/writer"] == "delta-es"


def test_compaction_schedule_keys_runs_by_iso_week():
    context = build_schedule_context(scheduled_execution_time=datetime(2026, 12, 6, 4, tzinfo=UTC))
    request = compaction_weekly(context)
    assert request.run_key == "compaction-2026-W49"


@pytest.mark.es
def test_scheduled_retention_run_purges_expired_rows(store, es, ops_settings, resources):
    rows = role_rows(10, expired=3)
    write_derived(store, rows)
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows)
    request = retention_daily(build_schedule_context(scheduled_execution_time=datetime.now(UTC)))

    result = retention_job.execute_in_process(run_config=request.run_config, resources=resources)

    assert result.success
    assert store.read(ROLE_ROWS).height == 7
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set(
        store.read(ROLE_ROWS)["row_id"]
    )
    metadata = _output_metadata(result)
    assert metadata["status"].value == "ok"
    assert store.read(RETENTION_REPORT).height == 1


@pytest.mark.es
def test_erase_job_needs_explicit_config_then_erases(store, es, ops_settings, resources):
    rows = role_rows(4, user="u1")
    write_derived(store, rows)
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows)

    refused = erase_job.execute_in_process(resources=resources, raise_on_error=False)
    assert not refused.success
    assert store.read(ROLE_ROWS).height == 4

    both = {"ops": {"erase_data": {"config": {"user_id": "u1", "conversation_id": "c1"}}}}
    assert not erase_job.execute_in_process(
        run_config=both, resources=resources, raise_on_error=False
    ).success

    config = {"ops": {"erase_data": {"config": {"user_id": "u1"}}}}
    done = erase_job.execute_in_process(run_config=config, resources=resources)
    assert done.success
    assert store.read(ROLE_ROWS).height == 0
    assert es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS) == set()

    unknown = {"ops": {"erase_data": {"config": {"user_id": "ghost"}}}}
    assert erase_job.execute_in_process(run_config=unknown, resources=resources).success


def test_compaction_job_reports_table_metadata(store, ops_settings, resources):
    for i in range(5):
        store.append(ROLE_ROWS, role_rows(2, conversation=f"c{i}"))
    request = compaction_weekly(build_schedule_context(scheduled_execution_time=datetime.now(UTC)))

    result = compaction_job.execute_in_process(run_config=request.run_config, resources=resources)

    assert result.success
    metadata = _output_metadata(result)
    assert metadata["files_removed"].value == 5
    assert metadata["unbounded_tables"].value == []
    assert len(store.table(ROLE_ROWS).file_uris()) == 1


def test_pending_sensor_retries_while_ids_are_pending(store, resources, ops_settings):
    with build_sensor_context(resources=resources) as context:
        assert isinstance(retention_pending_sensor(context), SkipReason)

    record_pending(store, "run-1", {ROWS: ["r1"]})
    with build_sensor_context(resources=resources) as context:
        request = retention_pending_sensor(context)
    assert isinstance(request, RunRequest)
    version = store.version("retention_pending")
    assert request.run_key.startswith(f"retention-pending-v{version}-")
    assert request.run_config == {"ops": {"retention_sweep": {"config": {"dry_run": False}}}}

    down = build_resources(ops_settings.replace(elasticsearch={"url": "http://127.0.0.1:9"}))
    with build_sensor_context(resources=down) as context:
        skipped = retention_pending_sensor(context)
    assert isinstance(skipped, SkipReason)
    assert "Elasticsearch unreachable" in skipped.skip_message


def test_cli_launches_a_job_through_dagster(store, ops_settings, tmp_path, monkeypatch):
    for i in range(3):
        store.append(ROLE_ROWS, role_rows(2, conversation=f"c{i}"))
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    config = tmp_path / "run.yaml"
    config.write_text("ops:\n  compact_tables:\n    config:\n      fail_on_unbounded: true\n")
    _register_all()

    result = CliRunner().invoke(app, ["jobs", "run", "compaction_job", "-c", str(config)])

    assert result.exit_code == 0, result.output
    assert len(store.table(ROLE_ROWS).file_uris()) == 1
