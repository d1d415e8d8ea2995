"""Issue 17 item 4, the distributed configuration: the Celery code location
(`pipelines.celery_definitions`) runs the shard partitions of `shards_job` on two Celery worker
processes at once, started as docs/scale-out.md says (`dagster-celery worker start`), and the
result equals one unpartitioned run. The broker is kombu's filesystem transport and the result
backend Celery's file backend: real Celery, with folders where a deployment has Redis or RabbitMQ
(nothing here can run a broker server). Real Delta tables, the real node and the real model."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery_executor_files import write_executor_config
from test_fanout import (
    ROOT,
    assert_shard_runs_equal_one_run,
    one_run_and_fanned,
    run_two_shard_processes,
    scoped,
    shard_env,
)

from ctxdb.index.client import make_client
from ctxdb.settings import Settings

WORKERS = ("w0", "w1")
READY_S = 120


def celery_config(folder: Path) -> dict:
    """The executor config both sides share: a filesystem broker, a file result backend, and
    one task at a time per worker, acknowledged when done (so no worker holds a second step)."""
    names = ("queue", "processed", "results", "control")
    queue, processed, results, control = (folder / name for name in names)
    for path in (queue, processed, results, control):
        path.mkdir(parents=True)
    return {
        "broker": "filesystem://",
        "backend": f"file://{results}",
        "config_source": {
            "broker_transport_options": {
                "data_folder_in": str(queue),
                "data_folder_out": str(queue),
                "processed_folder": str(processed),
                "control_folder": str(control),  # else `control/` in the working directory
            },
            "task_acks_late": True,
            "worker_prefetch_multiplier": 1,
        },
    }


def wait_ready(log: Path, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if "ready." in log.read_text(errors="replace"):
            return
        assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"worker not ready in {READY_S} s: {log.read_text()[-3000:]}")


@pytest.fixture
def celery_workers(es_settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two solo-pool workers (one step at a time each) on the fanned memory's environment; yields
    the environment that points the Celery code location's executor at them."""
    config = celery_config(tmp_path / "celery")
    config_yaml, executor_env = write_executor_config(config, tmp_path)
    scripts = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"  # `celery` too
    workers = []
    for name in WORKERS:
        log = tmp_path / f"{name}.log"
        # the CLI opens $DAGSTER_HOME's instance to keep its config: one each, as two processes
        # creating one SQLite storage at once race on its schema (the steps use the run's own)
        home = tmp_path / f"dagster_home_{name}"
        home.mkdir()
        command = [str(scripts / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app"]
        command += ["-y", str(config_yaml), "-n", name, "--"]
        command += ["--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={
                **shard_env(scoped(es_settings, "fan")),
                **executor_env,
                "DAGSTER_HOME": str(home),
                "PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}",
            },
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the CLI starts `celery worker` as its child: stop both
        )
        workers.append((process, log))
    try:
        for process, log in workers:
            wait_ready(log, process)
        yield executor_env
    finally:
        for process, _ in workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_two_celery_workers_write_two_shards_at_once(
    es_settings: Settings, embedder, tmp_path: Path, celery_workers: dict[str, str]
) -> None:
    one, fanned = one_run_and_fanned(es_settings)
    runs = run_two_shard_processes(fanned, tmp_path, flags=("--celery",), env=celery_workers)
    assert_shard_runs_equal_one_run(runs, one, fanned, make_client(es_settings))

    # every step ran on a Celery worker, each partition's embedding step on its own worker, and
    # the two partitions' writing steps (embed, then index) were in flight at the same time: two
    # executor processes writing at once. (The ONNX embed step alone can be over in 0.4 s, too
    # short to count on the two of them overlapping on a loaded machine.)
    for run in runs:
        assert run["steps"] and all("worker" in step for step in run["steps"].values()), run
    embeds = [run["steps"]["role_row_embeddings"] for run in runs]
    assert {step["worker"].split("@")[0] for step in embeds} == set(WORKERS)
    writing = sorted(
        (run["steps"]["role_row_embeddings"]["start"], run["steps"]["search_index"]["end"])
        for run in runs
    )
    (_, first_end), (second_start, _) = writing
    assert second_start < first_end, [run["steps"] for run in runs]
