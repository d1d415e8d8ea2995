"""Issue 25 item 5 (c): `memory_job` from the Celery code location (`pipelines.celery_definitions`)
with a real Redis broker and result backend and two Celery workers started as docs/scale-out.md
says, on the whole distributed stack: Delta tables and the landing location on S3 (moto), the
indices on the 3-node cluster. It builds the sample memory end to end, every step on a worker."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from cluster_stack import (
    ROOT,
    SCRIPTS,
    RedisServer,
    S3Server,
    ctxdb,
    environment,
    start_process,
    stop_process,
    table_rows,
    wait_ready,
)
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef
from dagster_shared.yaml_utils import dump_run_config_yaml
from run_shards import steps

from assets.shards import ALL_SHARDS_TAGS
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROW_EMBEDDINGS, TURN_CATALOG

pytestmark = [pytest.mark.cluster, pytest.mark.es, pytest.mark.model, pytest.mark.slow]
WORKERS = ("w0", "w1")
WORKER_READY_S = 120.0
RUN_TIMEOUT_S = 600


@pytest.fixture
def stack_settings(cluster_settings: Settings, s3_server: S3Server, sample_events: Path):
    """The cluster's settings with Delta and the landing location on S3, the sample landed."""
    settings = s3_server.settings(cluster_settings)
    pafs.copy_files(str(sample_events), settings.landing_uri)
    return settings


def executor_config(redis_server: RedisServer) -> dict:
    """Broker and backend on Redis; one step at a time per worker, acknowledged when done."""
    return {
        "broker": redis_server.url(0),
        "backend": redis_server.url(1),
        "config_source": {"task_acks_late": True, "worker_prefetch_multiplier": 1},
    }


@pytest.fixture
def celery_workers(
    stack_settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> Iterator[dict[str, str]]:
    """Two solo-pool workers on the stack's environment; yields the environment that points the
    Celery code location's executor at them."""
    config = executor_config(redis_server)
    config_yaml = tmp_path / "celery.yaml"
    config_yaml.write_text(dump_run_config_yaml({"execution": {"config": config}}))
    executor_env = {
        "CTXDB_CELERY_BROKER": config["broker"],
        "CTXDB_CELERY_BACKEND": config["backend"],
        "CTXDB_CELERY_CONFIG_SOURCE": json.dumps(config["config_source"]),
    }
    workers = []
    for name in WORKERS:
        home = tmp_path / f"dagster_home_{name}"  # one instance each (see test_celery_executor)
        home.mkdir()
        command = [str(SCRIPTS / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app"]
        command += ["-y", str(config_yaml), "-n", name, "--", "--pool=solo"]
        # the steps resolve the executor's config again on the worker: they read the same values
        env = environment(stack_settings, **executor_env, DAGSTER_HOME=str(home))
        log = tmp_path / f"{name}.log"
        workers.append((start_process(command, log, env), log))
    try:
        for process, log in workers:
            ready = lambda log=log: "ready." in log.read_text(errors="replace")  # noqa: E731
            wait_ready("celery worker", ready, process, log, WORKER_READY_S)
        yield executor_env
    finally:
        for process, _ in workers:
            stop_process(process)


def test_memory_job_on_two_celery_workers_builds_the_memory(
    stack_settings: Settings, celery_workers: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "dagster_home_run"
    home.mkdir()
    command = [str(SCRIPTS / "dagster"), "job", "execute", "-m", "pipelines.celery_definitions"]
    command += ["-j", "memory_job", "--tags", json.dumps(ALL_SHARDS_TAGS)]
    env = environment(stack_settings, **celery_workers, DAGSTER_HOME=str(home))
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        (run,) = instance.get_runs(RunsFilter(job_name="memory_job"))
        assert run.status == DagsterRunStatus.SUCCESS
        ran = steps(instance, run.run_id)
    # every step ran on a worker, and both workers ran steps (the checks run side by side)
    assert ran and {step.get("worker", "").split("@")[0] for step in ran.values()} == set(WORKERS)

    store = DeltaStore.from_settings(stack_settings)
    assert store.root.startswith("s3://")
    rows = table_rows(store, ROLE_ROWS)
    assert rows > 100 and table_rows(store, TURN_CATALOG) > 0
    assert table_rows(store, ROW_EMBEDDINGS) == rows
    verified = ctxdb(stack_settings, "index", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
