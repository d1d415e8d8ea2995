"""The ctxdb code location for a Celery deployment (`dagster-celery`, the `celery` extra): the
same assets, jobs, schedules and sensors as `pipelines.definitions`, every step sent to Celery
workers. Load it with `-m pipelines.celery_definitions` and start the workers with the same
broker and backend (docs/scale-out.md):

- `CTXDB_CELERY_BROKER`, `CTXDB_CELERY_BACKEND`: the broker and result backend URLs, read from the
  environment when a run starts (Dagster `StringSource`), so credentials stay out of run config;
- `CTXDB_CELERY_CONFIG_SOURCE`: further Celery app settings as JSON (settings.celery).
"""

from __future__ import annotations

from dagster_celery import celery_executor

from ctxdb.settings import get_settings
from pipelines.definitions import build_definitions

CELERY_EXECUTOR = celery_executor.configured(
    {
        "broker": {"env": "CTXDB_CELERY_BROKER"},
        "backend": {"env": "CTXDB_CELERY_BACKEND"},
        "config_source": get_settings().celery.config_source,
    },
    name="ctxdb_celery",
)

defs = build_definitions(CELERY_EXECUTOR)
