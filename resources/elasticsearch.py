"""Dagster resource for the Elasticsearch connection (embedded node or a user's cluster)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from elasticsearch import Elasticsearch
from pydantic import PrivateAttr

from ctxdb.index.client import make_client
from ctxdb.settings import Settings, get_settings


class ElasticsearchResource(ConfigurableResource):
    """The cluster connection. Unset fields keep the settings object's value (ELASTICSEARCH_URL,
    ELASTICSEARCH_API_KEY, ELASTICSEARCH_USERNAME/PASSWORD, ELASTICSEARCH_CA_CERTS,
    CTXDB_INDEX_PREFIX); secrets are given as `EnvVar`s so they never show in run config.

    The client is made once per run in `setup_for_execution` and closed after it.
    """

    url: str | None = None
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    index_prefix: str | None = None
    request_timeout: float | None = None

    _settings: Settings | None = PrivateAttr(default=None)
    _client: Elasticsearch | None = PrivateAttr(default=None)

    def settings(self) -> Settings:
        """The settings object with this resource's fields applied."""
        if self._settings is None:
            fields = (
                "url",
                "api_key",
                "username",
                "password",
                "ca_certs",
                "index_prefix",
                "request_timeout",
            )
            overrides = {f: getattr(self, f) for f in fields if getattr(self, f) is not None}
            settings = get_settings()
            self._settings = settings.replace(elasticsearch=overrides) if overrides else settings
        return self._settings

    def client(self) -> Elasticsearch:
        """The run's client (made on first use outside a run, e.g. in a sensor)."""
        if self._client is None:
            self._client = make_client(self.settings())
        return self._client

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.client()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
