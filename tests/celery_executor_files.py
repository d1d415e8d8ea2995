"""What a Celery worker and the Celery code location's executor both read, written for the Celery
tests (tests/test_celery_executor.py, tests/cluster/test_cluster_celery.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from dagster_shared.yaml_utils import dump_run_config_yaml
from server_processes import SCRIPTS, RedisServer, start_process, stop_process, wait_ready

WORKER_READY_S = 120.0


def redis_executor_config(redis_server: RedisServer) -> dict[str, Any]:
    """Broker and backend on Redis; one step at a time per worker, acknowledged when done (so no
    worker holds a second step)."""
    return {
        "broker": redis_server.url(0),
        "backend": redis_server.url(1),
        "config_source": {"task_acks_late": True, "worker_prefetch_multiplier": 1},
    }


def write_executor_config(config: dict[str, Any], folder: Path) -> tuple[Path, dict[str, str]]:
    """The executor `config` as `folder/celery.yaml` (the run config `dagster-celery worker
    start -y` reads), and the environment that points the executor at the same broker, backend
    and app settings."""
    config_yaml = folder / "celery.yaml"
    config_yaml.write_text(dump_run_config_yaml({"execution": {"config": config}}))
    executor_env = {
        "CTXDB_CELERY_BROKER": config["broker"],
        "CTXDB_CELERY_BACKEND": config["backend"],
        "CTXDB_CELERY_CONFIG_SOURCE": json.dumps(config["config_source"]),
    }
    return config_yaml, executor_env


def start_celery_workers(
    env: dict[str, str], redis_server: RedisServer, folder: Path, names: tuple[str, ...]
) -> tuple[dict[str, str], list[tuple[subprocess.Popen, Path]]]:
    """Solo-pool workers (one step at a time each) started as docs/scale-out.md says, on `env`
    with Redis as broker and backend, each ready; the environment that points the Celery code
    location's executor at them, and each worker's process (a session of its own: the CLI
    starts `celery worker` as its child, stopped together) and log."""
    config_yaml, executor_env = write_executor_config(redis_executor_config(redis_server), folder)
    workers: list[tuple[subprocess.Popen, Path]] = []
    try:
        for name in names:
            # the CLI opens $DAGSTER_HOME's instance to keep its config: one each, as two processes
            # creating one SQLite storage at once race on its schema (the steps use the run's own)
            home = folder / f"dagster_home_{name}"
            home.mkdir()
            command = [str(SCRIPTS / "dagster-celery"), "worker", "start"]
            command += ["-A", "dagster_celery.app", "-y", str(config_yaml), "-n", name]
            command += ["--", "--pool=solo"]
            # the steps resolve the executor's config again on the worker: the same values
            worker_env = {**env, **executor_env, "DAGSTER_HOME": str(home)}
            worker_env["PATH"] = f"{SCRIPTS}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
            log = folder / f"{name}.log"
            workers.append((start_process(command, log, worker_env), log))
        for process, log in workers:
            ready = lambda log=log: "ready." in log.read_text(errors="replace")  # noqa: E731
            wait_ready("celery worker", ready, process, log, WORKER_READY_S)
    except BaseException:
        for process, _ in workers:
            stop_process(process)
        raise
    return executor_env, workers
