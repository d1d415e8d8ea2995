"""Build the Elasticsearch client from the one settings object (embedded node or own cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxdb.settings import Settings

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


def make_client(settings: Settings) -> Elasticsearch:
    """A client for the configured URL with optional API key, basic auth and CA bundle; every
    request waits at most `request_timeout` seconds (times 1 + `max_retries` when
    `retry_on_timeout` is set). The package is imported here, so a caller that only may need a
    client (the token store's `connect`) does not load it."""
    from elasticsearch import Elasticsearch

    kwargs: dict = {
        "request_timeout": settings.elasticsearch.request_timeout,
        "retry_on_timeout": settings.elasticsearch.retry_on_timeout,
        "max_retries": settings.elasticsearch.max_retries,
    }
    if settings.elasticsearch.api_key is not None:
        kwargs["api_key"] = settings.elasticsearch.api_key.get_secret_value()
    elif settings.elasticsearch.username:
        password = settings.elasticsearch.password
        kwargs["basic_auth"] = (
            settings.elasticsearch.username,
            password.get_secret_value() if password else "",
        )
    if settings.elasticsearch.ca_certs:
        kwargs["ca_certs"] = settings.elasticsearch.ca_certs
    return Elasticsearch(settings.elasticsearch.url, **kwargs)
