"""Issue 17 item 4, the distributed configuration: the Celery code location
(`pipelines.celery_definitions`) runs the shard partitions of `shards_job` on two Celery worker
processes at once, started as docs/scale-out.md says (`dagster-celery worker start`), and the
result equals one unpartitioned run. That the two runs write at once is shown by stopping a
worker (SIGSTOP) in the middle of its step: the other partition's run must still run to the end
on the other worker, with no clock compared. Broker and result backend: a real Redis server
(Debian's `redis-server`). Real Delta tables, the real node and the real model."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery_executor_files import start_celery_workers
from server_processes import RedisServer, stop_process
from test_fanout import (
    assert_shard_runs_equal_one_run,
    one_run_and_fanned,
    scoped,
    shard_env,
    shard_runs,
    start_two_shard_processes,
)

from ctxdb.index.client import make_client
from ctxdb.settings import Settings

WORKERS = ("w0", "w1")
STEP_S = 600  # the longest a step or a run is waited for
EMBED_STARTED = 'STEP_START - Started execution of step "role_row_embeddings"'


@dataclass(frozen=True)
class CeleryWorkers:
    env: dict[str, str]  # points the Celery code location's executor at the workers
    processes: dict[str, subprocess.Popen]  # by worker name
    logs: dict[str, Path]


@pytest.fixture
def celery_workers(
    es_settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> Iterator[CeleryWorkers]:
    """Two solo-pool workers (one step at a time each) on the fanned memory's environment."""
    env = shard_env(scoped(es_settings, "fan"))
    executor_env, workers = start_celery_workers(env, redis_server, tmp_path, WORKERS)
    processes = {name: process for name, (process, _) in zip(WORKERS, workers, strict=True)}
    try:
        yield CeleryWorkers(
            env=executor_env,
            processes=processes,
            logs={name: log for name, (_, log) in zip(WORKERS, workers, strict=True)},
        )
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)  # a worker the test left stopped
            stop_process(process)


def worker_in_step(workers: CeleryWorkers, marker: str) -> str:
    """The first worker whose log shows `marker` (Dagster's console log of a step it runs)."""
    deadline = time.monotonic() + STEP_S
    while time.monotonic() < deadline:
        for name, log in workers.logs.items():
            if marker in log.read_text(errors="replace"):
                return name
        time.sleep(0.05)
    raise AssertionError(f"no worker started the step in {STEP_S} s")


def first_to_exit(processes: list[subprocess.Popen]) -> int:
    """The index of the first of `processes` to exit."""
    deadline = time.monotonic() + STEP_S
    while time.monotonic() < deadline:
        for n, process in enumerate(processes):
            if process.poll() is not None:
                return n
        time.sleep(0.1)
    raise AssertionError(f"neither run ended in {STEP_S} s while one worker was stopped")


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_two_celery_workers_write_two_shards_at_once(
    es_settings: Settings, embedder, tmp_path: Path, celery_workers: CeleryWorkers
) -> None:
    one, fanned = one_run_and_fanned(es_settings)
    processes = start_two_shard_processes(
        fanned, tmp_path, flags=("--celery",), env=celery_workers.env
    )
    # stop the first worker to start an embedding step, in that step: the other partition's run
    # must then run to its end on the other worker while the stopped step is still in flight
    # (a shard lease, a table lock or a shared queue slot would keep it waiting instead)
    stopped = worker_in_step(celery_workers, EMBED_STARTED)
    os.killpg(celery_workers.processes[stopped].pid, signal.SIGSTOP)
    try:
        done = first_to_exit(processes)
        waiting = processes[1 - done]
        assert waiting.poll() is None  # its step is on the stopped worker: it cannot have ended
    finally:
        os.killpg(celery_workers.processes[stopped].pid, signal.SIGCONT)
    runs = shard_runs(processes)
    assert_shard_runs_equal_one_run(runs, one, fanned, make_client(es_settings))

    # every step ran on a Celery worker: the run that ended first wholly on the other worker,
    # the one that waited had its embedding step on the stopped worker
    for run in runs:
        assert run["steps"] and all("worker" in step for step in run["steps"].values()), run
    ran_on = [{step["worker"].split("@")[0] for step in run["steps"].values()} for run in runs]
    (other,) = set(WORKERS) - {stopped}
    assert ran_on[done] == {other}, runs
    embed_worker = runs[1 - done]["steps"]["role_row_embeddings"]["worker"]
    assert embed_worker.split("@")[0] == stopped, runs
