"""Issue 12, finding 19: with run monitoring on (dagster.yaml) a run whose worker was SIGKILLed is
marked failed and stops holding its slot in the run queue, instead of staying STARTED forever.

The instance is the project's dagster.yaml in a temporary DAGSTER_HOME; the run worker is a real
`dagster job execute` process running a step that blocks (tests/run_monitoring_job.py). The test
calls the monitoring daemon's own per-run function instead of running the daemon for a poll
interval.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from pipelines.launcher import LocalRunLauncher, process_alive

ROOT = Path(__file__).resolve().parents[1]
IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.QUEUED]


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DagsterInstance:
    shutil.copy(ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with DagsterInstance.get() as instance:
        yield instance


def wait_for(path: Path, worker: subprocess.Popen, limit_s: float = 120.0) -> None:
    """Until the blocking step has started (its file appears)."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, "the run worker did not start its step"
        time.sleep(0.2)


def test_finding_19_monitoring_is_enabled_with_start_and_cancel_timeouts(
    instance: DagsterInstance,
) -> None:
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_start_timeout_seconds == 300
    assert instance.run_monitoring_cancel_timeout_seconds == 180
    assert instance.run_monitoring_max_resume_run_attempts == 0
    assert isinstance(instance.run_launcher, LocalRunLauncher)
    assert instance.run_launcher.supports_check_run_worker_health
    limits = instance.get_concurrency_config().run_queue_config
    assert limits.max_concurrent_runs == 5  # shard runs side by side (issue 17)
    by_key = {limit["key"]: limit for limit in limits.tag_concurrency_limits}
    assert by_key["ctxdb/writer"]["limit"] == 1  # global writer runs stay one at a time
    assert by_key["dagster/partition"] == {
        "key": "dagster/partition",
        "value": {"applyLimitPerUniqueValue": True},
        "limit": 1,
    }


def test_finding_19_a_killed_run_worker_frees_the_queue(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    env = {
        **os.environ,
        "CTXDB_TEST_STARTED": str(started),
        "CTXDB_TEST_RELEASE": str(release),
        "PYTHONPATH": str(ROOT / "tests"),
    }
    dagster = str(Path(sys.executable).with_name("dagster"))
    command = [dagster, "job", "execute", "-f", str(ROOT / "tests/run_monitoring_job.py")]
    worker = subprocess.Popen(
        [*command, "-j", "blocking_job"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(started, worker)
        [record] = instance.get_run_records(filters=RunsFilter(statuses=IN_PROGRESS))
        run = record.dagster_run
        assert run.status == DagsterRunStatus.STARTED
        health = instance.run_launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.RUNNING, health

        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    finally:
        release.touch()
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    # the worker is gone but the run still holds the queue's only slot
    record = instance.get_run_record_by_id(run.run_id)
    assert record.dagster_run.status == DagsterRunStatus.STARTED
    assert not process_alive(worker.pid, record.create_timestamp.timestamp())

    monitor_started_run(instance, None, record, logging.getLogger("run-monitoring-test"))

    failed = instance.get_run_by_id(run.run_id)
    assert failed.status == DagsterRunStatus.FAILURE
    assert instance.get_run_records(filters=RunsFilter(statuses=IN_PROGRESS)) == []
    [failure] = instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
    assert f"worker process {worker.pid} is gone" in failure.dagster_event.message
