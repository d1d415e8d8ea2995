"""Issue 12, finding 10: every operational writer (erasure, retention, compaction, reindex) takes
the writer lease wherever it starts (the CLI, `execute_in_process`, `dagster job execute`), so
none of them runs beside a landing run (or any other writer) holding it; Dagster's run queue
alone does not see runs started outside it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_ops import es_ids, index_rows, role_rows, write_derived

from ctxdb.cli import main
from ctxdb.coordination.lease import Lease, acquire, release
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS
from pipelines.ops_jobs import compaction_job, erase_job, retention_job
from pipelines.reindex import reindex_job

pytestmark = pytest.mark.es

CLI_COMMANDS = [
    ["erase", "--user", "u1"],
    ["retention", "run"],
    ["compact"],
    ["index", "reindex"],
]


@pytest.fixture
def landing_run(ops_settings: Settings) -> Iterator[Lease]:
    """The writer lease, held as a landing run in another process would hold it."""
    lease = acquire(
        make_client(ops_settings), ops_settings.elasticsearch.index_prefix, "land", ttl_s=120
    )
    yield lease
    release(lease)


@pytest.fixture
def data(store: DeltaStore, es, ops_settings: Settings) -> set[str]:
    """u1's rows in Delta (in several small files) and Elasticsearch; returns the indexed ids."""
    rows = role_rows(6, user="u1")
    write_derived(store, rows)
    for i in range(3):
        store.append(ROLE_ROWS, role_rows(2, user="u2", conversation=f"extra{i}"))
    index_rows(es, ops_settings.elasticsearch.index_prefix, rows)
    return es_ids(es, ops_settings.elasticsearch.index_prefix, ROWS)


def untouched(store: DeltaStore, es, settings: Settings, ids: set[str], files: int) -> None:
    assert store.read(ROLE_ROWS).filter(user_id="u1").height == 6
    assert len(store.table(ROLE_ROWS).file_uris()) == files
    assert es_ids(es, settings.elasticsearch.index_prefix, ROWS) == ids


@pytest.mark.parametrize("args", CLI_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_finding_10_cli_writers_refuse_beside_a_landing_run(
    args: list[str],
    store: DeltaStore,
    es,
    ops_settings: Settings,
    data: set[str],
    landing_run: Lease,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", ops_settings.elasticsearch.index_prefix)
    files = len(store.table(ROLE_ROWS).file_uris())
    with pytest.raises(SystemExit) as exited:
        main(args)
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    assert stderr.startswith("error: land (") and "holds the writer lease" in stderr
    untouched(store, es, ops_settings, data, files)


def test_finding_10_dagster_writers_refuse_beside_a_landing_run(
    store: DeltaStore,
    es,
    ops_settings: Settings,
    data: set[str],
    resources: dict,
    landing_run: Lease,
) -> None:
    files = len(store.table(ROLE_ROWS).file_uris())
    runs = {
        erase_job: {"ops": {"erase_data": {"config": {"user_id": "u1"}}}},
        retention_job: {"ops": {"retention_sweep": {"config": {"dry_run": False}}}},
        compaction_job: {"ops": {"compact_tables": {"config": {"fail_on_unbounded": False}}}},
        reindex_job: {},
    }
    for job, config in runs.items():
        result = job.execute_in_process(
            run_config=config,
            resources=resources,
            raise_on_error=False,
        )
        assert not result.success, job.name
        cause = result.get_step_failure_events()[0].step_failure_data.error.cause
        assert cause.cls_name == "LeaseHeld" and "LeaseHeld: land (" in cause.message, job.name
    untouched(store, es, ops_settings, data, files)


def test_finding_10_dagster_job_execute_refuses_beside_a_landing_run(
    store: DeltaStore,
    es,
    ops_settings: Settings,
    data: set[str],
    landing_run: Lease,
    tmp_path: Path,
) -> None:
    config = tmp_path / "erase.yaml"
    config.write_text("ops:\n  erase_data:\n    config:\n      user_id: u1\n")
    env = {
        **os.environ,
        "CTXDB_HOME": str(ops_settings.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": ops_settings.elasticsearch.index_prefix,
        "DAGSTER_HOME": str(tmp_path),
    }
    files = len(store.table(ROLE_ROWS).file_uris())
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ctxdb")), "jobs", "run", "erase_job", "-c", config],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "LeaseHeld" in done.stdout + done.stderr
    untouched(store, es, ops_settings, data, files)
    release(landing_run)
    assert main_status(["erase", "--user", "u1"], env) == 0
    assert store.read(ROLE_ROWS).filter(user_id="u1").height == 0


def main_status(args: list[str], env: dict[str, str]) -> int:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ctxdb")), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode
