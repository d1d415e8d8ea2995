"""Dagster resource for the Elasticsearch connection (embedded node or a user's cluster)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from elasticsearch import Elasticsearch
from pydantic import PrivateAttr

from ctxdb.index.client import make_client
from resources.settings import SettingsResource


class ElasticsearchResource(ConfigurableResource):
    """The client of the settings' `elasticsearch` group, made once per run in
    `setup_for_execution` and closed after it."""

    settings: SettingsResource

    _client: Elasticsearch | None = PrivateAttr(default=None)

    def client(self) -> Elasticsearch:
        """The run's client (made on first use outside a run, e.g. in a sensor)."""
        if self._client is None:
            self._client = make_client(self.settings.get())
        return self._client

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.client()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
