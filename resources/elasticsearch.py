"""Dagster resource for the Elasticsearch connection (embedded node or a user's cluster)."""

from __future__ import annotations

from dagster import ConfigurableResource
from elasticsearch import Elasticsearch

from ctxdb.index.client import make_client
from ctxdb.settings import Settings, get_settings


class ElasticsearchResource(ConfigurableResource):
    """Connection from the settings object (ELASTICSEARCH_URL, API key, basic auth, CA bundle)."""

    index_prefix: str | None = None

    def settings(self) -> Settings:
        settings = get_settings()
        if self.index_prefix:
            settings = settings.replace(elasticsearch={"index_prefix": self.index_prefix})
        return settings

    def client(self) -> Elasticsearch:
        return make_client(self.settings())
