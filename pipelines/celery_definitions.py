"""The ctxdb code location for a Celery deployment (`dagster-celery`, the `celery` extra): the
same assets, jobs, schedules and sensors as `pipelines.definitions`, every step sent to Celery
workers. Load it with `-m pipelines.celery_definitions` and start the workers with the same
broker and backend (docs/scale-out.md):

- `CTXDB_CELERY_BROKER`, `CTXDB_CELERY_BACKEND`: the broker and result backend URLs, read from the
  environment when a run starts (Dagster `StringSource`), so credentials stay out of run config;
- `CTXDB_CELERY_CONFIG_SOURCE`: further Celery app settings as JSON (`CelerySettings`, read when a
  run starts, `pipelines.celery_executor`).
"""

from __future__ import annotations

from pipelines.celery_executor import CELERY_EXECUTOR
from pipelines.definitions import build_definitions

defs = build_definitions(CELERY_EXECUTOR)
