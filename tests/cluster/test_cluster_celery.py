"""Issue 25 item 5 (c): `memory_job` from the Celery code location (`pipelines.celery_definitions`)
with a real Redis broker and result backend and two Celery workers started as docs/scale-out.md
says, on the whole distributed stack: Delta tables and the landing location on S3 (moto), the
indices on the 3-node cluster. It builds the sample memory end to end, every step on a worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest
from celery_executor_files import start_celery_workers
from cluster_stack import ROOT, SCRIPTS, S3Server, build_records, ctxdb, environment, table_rows
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef
from run_shards import steps
from server_processes import RedisServer, start_process, stop_process

from assets.shards import all_shards_tags, shard_count
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROW_EMBEDDINGS, TURN_CATALOG

pytestmark = [pytest.mark.cluster, pytest.mark.es, pytest.mark.model, pytest.mark.slow]
WORKERS = ("w0", "w1")
RUN_TIMEOUT_S = 600


@pytest.fixture
def stack_settings(cluster_settings: Settings, s3_server: S3Server, sample_events: Path):
    """The cluster's settings with Delta and the landing location on S3, the sample landed."""
    settings = s3_server.settings(cluster_settings)
    pafs.copy_files(str(sample_events), settings.landing_uri)
    return settings


def start_workers(
    settings: Settings,
    redis_server: RedisServer,
    folder: Path,
    names: tuple[str, ...],
    **extra: str,
) -> tuple[dict[str, str], list[tuple[subprocess.Popen, Path]]]:
    """`start_celery_workers` on `settings`' environment plus `extra`."""
    return start_celery_workers(environment(settings, **extra), redis_server, folder, names)


@pytest.fixture
def celery_workers(
    stack_settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> Iterator[dict[str, str]]:
    """Two solo-pool workers on the stack's environment; yields the environment that points the
    Celery code location's executor at them."""
    executor_env, workers = start_workers(
        stack_settings, redis_server, tmp_path, WORKERS, **PREFILL_ENV
    )
    try:
        yield executor_env
    finally:
        for process, _ in workers:
            stop_process(process)


def memory_job(env: dict[str, str], home: Path, log: Path) -> subprocess.Popen:
    """`memory_job` from the Celery code location, all shards, its instance in `home`."""
    home.mkdir()
    command = [str(SCRIPTS / "dagster"), "job", "execute", "-m", "pipelines.celery_definitions"]
    command += ["-j", "memory_job", "--tags", json.dumps(all_shards_tags())]
    return start_process(command, log, {**env, "DAGSTER_HOME": str(home)})


# the sample is a few hundred texts: prefill from one text on, so the embedding fans out
PREFILL_ENV = {"CTXDB_EMBEDDING_PREFILL_MIN_TEXTS": "1"}


def test_memory_job_on_two_celery_workers_builds_the_memory(
    stack_settings: Settings, celery_workers: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "dagster_home_run"
    home.mkdir()
    command = [str(SCRIPTS / "dagster"), "job", "execute", "-m", "pipelines.celery_definitions"]
    command += ["-j", "memory_job", "--tags", json.dumps(all_shards_tags())]
    env = environment(stack_settings, **celery_workers, **PREFILL_ENV, DAGSTER_HOME=str(home))
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        (run,) = instance.get_runs(RunsFilter(job_name="memory_job"))
        assert run.status == DagsterRunStatus.SUCCESS
        ran = steps(instance, run.run_id)
    # every step ran on a worker, and both workers ran steps (the checks run side by side);
    # the embedding was prefilled in one step per shard (which worker takes which is Celery's
    # choice: bench_cluster.py measures the two workers sharing them)
    assert ran and {step.get("worker", "").split("@")[0] for step in ran.values()} == set(WORKERS)
    prefill = {key: step for key, step in ran.items() if ".prefill_step[" in key}
    assert len(prefill) == shard_count(), sorted(ran)

    store = DeltaStore.from_settings(stack_settings)
    assert store.root.startswith("s3://")
    rows = table_rows(store, ROLE_ROWS)
    assert rows > 100 and table_rows(store, TURN_CATALOG) > 0
    assert table_rows(store, ROW_EMBEDDINGS) == rows
    verified = ctxdb(stack_settings, "index", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]


KILLED_STEP = "turn_record"  # the derivation
# a short writer lease the fresh run waits out; the derivation in batches of 2 conversations, one
# process: a dozen commits, one after another
KILL_ENV = {
    "CTXDB_ELASTICSEARCH_WRITER_LEASE_TTL_S": "10",
    "CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S": "120",
    "CTXDB_DERIVE_BATCH_CONVERSATIONS": "2",
    "CTXDB_DERIVE_PROCESSES": "1",
}


def step_mentions(log: Path) -> int:
    """How often a worker's log names the derivation step (1: started, 2: finished too)."""
    return log.read_text(errors="replace").count(f'step "{KILLED_STEP}"')


def unique_keys(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`frame`'s `keys`, sorted; asserts no key twice."""
    picked = frame.select(keys)
    assert picked.is_duplicated().sum() == 0, picked.filter(picked.is_duplicated()).head()
    return picked.sort(keys)


def test_a_worker_killed_mid_step_then_a_fresh_run_converges(
    stack_settings: Settings,
    redis_server: RedisServer,
    s3_server: S3Server,
    sample_events: Path,
    tmp_path: Path,
) -> None:
    """A worker SIGKILLed (its process group, by pid) in the middle of memory_job's derivation
    step, once the step committed its first batch of role rows; the run is abandoned, a fresh
    worker joins and a fresh memory_job run on the same tables succeeds: the tables equal a
    clean build's, no key twice, and `ctxdb index verify` passes."""
    first = tmp_path / "first"
    first.mkdir()
    executor_env, workers = start_workers(stack_settings, redis_server, first, WORKERS, **KILL_ENV)
    env = environment(stack_settings, **executor_env, **KILL_ENV)
    run = memory_job(env, first / "dagster_home_run", first / "run.log")
    store = DeltaStore.from_settings(stack_settings)
    victim = None
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while victim is None or table_rows(store, ROLE_ROWS) == 0:
            victim = next(((p, log) for p, log in workers if step_mentions(log)), None)
            assert run.poll() is None, (first / "run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no derivation commit within the run's time"
            time.sleep(0.1)
        os.killpg(victim[0].pid, signal.SIGKILL)
        victim[0].wait()
        assert step_mentions(victim[1]) == 1, "the derivation step was over before the kill"
        committed = store.read(ROLE_ROWS).height
    finally:
        stop_process(run)  # its step's result never comes: the run is abandoned
        for process, _ in workers:
            stop_process(process)

    second = tmp_path / "second"
    second.mkdir()
    executor_env, workers = start_workers(stack_settings, redis_server, second, ("w2",), **KILL_ENV)
    try:
        env = environment(stack_settings, **executor_env, **KILL_ENV)
        rerun = memory_job(env, second / "dagster_home_run", second / "run.log")
        assert rerun.wait(timeout=RUN_TIMEOUT_S) == 0, ((second / "run.log").read_text()[-4000:],)
    finally:
        for process, _ in workers:
            stop_process(process)

    clean = build_records(
        s3_server.settings(stack_settings.replace(home=tmp_path / "clean")), sample_events
    )
    rows = store.read(ROLE_ROWS)
    clean_rows = clean.read(ROLE_ROWS)
    assert 0 < committed < rows.height  # the kill left the derivation half done
    assert unique_keys(rows, ["row_id", "text_hash"]).equals(
        unique_keys(clean_rows, ["row_id", "text_hash"])
    )
    keys = ["tenant", "app", "user_id", "conversation_id", "turn_id"]
    assert unique_keys(store.read(TURN_CATALOG), keys).equals(
        unique_keys(clean.read(TURN_CATALOG), keys)
    )
    embedded = unique_keys(store.read(ROW_EMBEDDINGS), ["row_id"])
    assert embedded.equals(rows.select("row_id").sort("row_id"))
    verified = ctxdb(stack_settings, "index", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
