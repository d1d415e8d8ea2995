"""Dagster resource for ctxdb's Delta tables."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ctxdb.settings import Settings, get_settings
from ctxdb.storage.delta import DeltaStore


class DeltaResource(ConfigurableResource):
    """The Delta root (a local path or an s3://, gs://, az:// URI) and its storage options.

    `from_settings` sets the root from the settings (CTXDB_DELTA_ROOT, else <home>/delta). The
    storage options may hold object-store credentials, so they are not copied into the
    resource's config: unset, they are the settings' CTXDB_DELTA_STORAGE_OPTIONS, read when the
    run starts; set them here only as `EnvVar`s.
    """

    root: str | None = None
    storage_options: dict[str, str] | None = None

    _store: DeltaStore | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> DeltaResource:
        return cls(root=settings.delta_uri)

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
