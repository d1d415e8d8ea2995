"""What a Celery worker and the Celery code location's executor both read, written for the Celery
tests (tests/test_celery_executor.py, tests/cluster/test_cluster_celery.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagster_shared.yaml_utils import dump_run_config_yaml
from server_processes import RedisServer


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
