"""Build the Elasticsearch client from the one settings object (embedded node or own cluster),
and the fail-fast view of a client that the erasure and the retention sweep use."""

from __future__ import annotations

from typing import Any, cast

from elastic_transport import Transport
from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import ConnectionTimeout, Elasticsearch

from ctxdb.settings import Settings


def make_client(settings: Settings) -> Elasticsearch:
    """A client for the configured URL with optional API key, basic auth and CA bundle; every
    request waits at most `request_timeout` seconds (times 1 + `max_retries` when
    `retry_on_timeout` is set)."""
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


class ElasticsearchOutage(ESConnectionError):
    """Elasticsearch failed to connect or timed out once in this run; its text names the node."""

    def __str__(self) -> str:
        return str(self.message)


class _OutageLatch:
    """A transport that remembers the first request that failed to connect or timed out, and
    fails every later request at once with that outage (naming the node), without connecting."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.outage: ElasticsearchOutage | None = None

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        if self.outage is not None:
            raise ElasticsearchOutage(self.outage.message)
        try:
            return self._transport.perform_request(*args, **kwargs)
        except (ESConnectionError, ConnectionTimeout) as exc:
            nodes = ", ".join(node.base_url for node in self._transport.node_pool.all())
            self.outage = ElasticsearchOutage(
                f"Elasticsearch at {nodes} is unreachable ({exc}); not asked again in this run"
            )
            raise self.outage from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def failing_fast(es: Elasticsearch | None) -> Elasticsearch | None:
    """A view of `es` (same node, options and connections) that stops talking to Elasticsearch
    after its first connection failure or timeout: every later request, the lease heartbeat's
    included, fails at once. A run using it waits on an unreachable cluster for one request's
    bound at most (`request_timeout`, or the lease's 10 s when that request comes first)."""
    if es is None:
        return None
    client = es.options()
    client._transport = cast(Transport, _OutageLatch(es.transport))
    return client
