"""Dagster resource for ctxdb's Delta tables."""

from __future__ import annotations

from dagster import ConfigurableResource

from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore


class DeltaResource(ConfigurableResource):
    """Delta table root; unset fields fall back to the settings object (CTXDB_DELTA_ROOT)."""

    root: str | None = None
    storage_options: dict[str, str] | None = None

    def store(self) -> DeltaStore:
        settings = get_settings()
        options = self.storage_options if self.storage_options is not None else None
        return DeltaStore(
            self.root or settings.delta_uri,
            dict(options if options is not None else settings.delta_storage_options),
        )
