"""Dagster resource for the Elasticsearch connection (embedded node or a user's cluster)."""

from __future__ import annotations

import os
from typing import Any

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from elasticsearch import Elasticsearch
from pydantic import PrivateAttr, SecretStr

from ctxdb.index.client import make_client
from ctxdb.settings import ElasticsearchSettings, Settings, env_name, get_settings

CONNECTION_FIELDS = (
    "url",
    "api_key",
    "username",
    "password",
    "ca_certs",
    "index_prefix",
    "request_timeout",
    "max_retries",
    "retry_on_timeout",
)
"""The `elasticsearch` settings fields the resource carries (same names, same meaning)."""


class ElasticsearchResource(ConfigurableResource):
    """The cluster connection and index prefix: the `elasticsearch` settings group's fields of the
    same names. `from_settings` fills every one from the settings (the code location does, when
    it loads), binding the secrets as `EnvVar`s so run config and the UI show only their names.

    A field left unset keeps the process settings' value, read when the run starts. The client is
    made once per run in `setup_for_execution` and closed after it.
    """

    url: str | None = None
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    index_prefix: str | None = None
    request_timeout: float | None = None
    max_retries: int | None = None
    retry_on_timeout: bool | None = None

    _settings: Settings | None = PrivateAttr(default=None)
    _client: Elasticsearch | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: ElasticsearchSettings) -> ElasticsearchResource:
        """Every connection field from `settings`; a secret (api key, password) as the `EnvVar`
        of its variable, resolved when a run starts (never its value)."""
        fields: dict[str, Any] = {}
        for field in CONNECTION_FIELDS:
            value = getattr(settings, field)
            if isinstance(value, SecretStr):
                name = env_name(ElasticsearchSettings, field)
                if os.environ.get(name):
                    fields[field] = EnvVar(name)
            elif value is not None:
                fields[field] = value
        return cls(**fields)

    def settings(self) -> Settings:
        """The settings object with this resource's fields applied."""
        if self._settings is None:
            overrides = {
                field: getattr(self, field)
                for field in CONNECTION_FIELDS
                if getattr(self, field) is not None
            }
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
