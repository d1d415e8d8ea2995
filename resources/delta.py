"""Dagster resource for ctxdb's Delta tables."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ctxdb.storage.delta import DeltaStore
from resources.settings import SettingsResource


class DeltaResource(ConfigurableResource):
    """The Delta tables at the settings' `delta_uri`, reached with their object-store options."""

    settings: SettingsResource

    _store: DeltaStore | None = PrivateAttr(default=None)

    def store(self) -> DeltaStore:
        """The store every asset of the run reads and writes."""
        if self._store is None:
            self._store = DeltaStore.from_settings(self.settings.get())
        return self._store

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.store()
