"""Dagster resource for ctxdb's Delta tables."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore


class DeltaResource(ConfigurableResource):
    """The Delta root (a local path or an s3://, gs://, az:// URI) and its storage options.

    Unset fields keep the settings object's value (CTXDB_DELTA_ROOT, CTXDB_DELTA_STORAGE_OPTIONS);
    object-store credentials are best given as `EnvVar`s inside `storage_options`.
    """

    root: str | None = None
    storage_options: dict[str, str] | None = None

    _store: DeltaStore | None = PrivateAttr(default=None)

    def store(self) -> DeltaStore:
        """The store every asset of the run reads and writes."""
        if self._store is None:
            settings = get_settings()
            options = self.storage_options
            self._store = DeltaStore(
                self.root or settings.delta_uri,
                dict(options if options is not None else settings.delta_storage_options),
            )
        return self._store

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.store()
