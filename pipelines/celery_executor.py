"""The executor of the Celery code location: dagster-celery's, with the Celery app settings
(`CelerySettings`, CTXDB_CELERY_CONFIG_SOURCE) read when a run starts, never at import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    ExecutorDefinition,
    InitExecutorContext,
    executor,
    multiple_process_executor_requirements,
)
from dagster._core.execution.retries import RetryMode
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

from pipelines.celery_settings import CelerySettings


@executor(
    name="celery",
    config_schema=CELERY_CONFIG,
    requirements=multiple_process_executor_requirements(),
)
def _celery_executor(init_context: InitExecutorContext) -> CeleryExecutor:
    """dagster-celery's executor, its Celery app settings from `CelerySettings`."""
    config: Mapping[str, Any] = init_context.executor_config
    return CeleryExecutor(
        broker=config.get("broker"),
        backend=config.get("backend"),
        include=config.get("include"),
        config_source=CelerySettings().config_source,
        retries=RetryMode.from_config(config["retries"]),
    )


CELERY_EXECUTOR: ExecutorDefinition = _celery_executor.configured(
    {"broker": {"env": "CTXDB_CELERY_BROKER"}, "backend": {"env": "CTXDB_CELERY_BACKEND"}},
    name="ctxdb_celery",
)
"""Steps on Celery workers; broker and backend URLs from the environment when a run starts."""
