"""The Celery group (`CTXDB_CELERY_*`): settings of the Celery code location only, so they live
on the Dagster side, beside the executor that reads them when a run starts."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ctxdb.settings import GroupSettings
from ctxdb.settings.base import group_config


class CelerySettings(GroupSettings):
    """The Celery app of `pipelines.celery_definitions`; the broker and backend URLs are read
    from CTXDB_CELERY_BROKER / CTXDB_CELERY_BACKEND by Dagster when a run starts."""

    model_config = group_config("CTXDB_CELERY_")

    config_source: dict[str, Any] = Field(
        default_factory=dict,
        description="Further Celery app settings (JSON), e.g. broker_transport_options.",
    )
