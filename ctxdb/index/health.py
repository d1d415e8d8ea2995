"""Check that the configured cluster is usable, turning every failure into one clear message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import (
    ApiError,
    AuthenticationException,
    AuthorizationException,
    Elasticsearch,
    UnsupportedProductError,
)
from elasticsearch import __version__ as client_version

from ctxdb.index.client import make_client
from ctxdb.index.errors import (
    ClusterAuthError,
    ClusterError,
    ClusterUnreachableError,
    ClusterVersionError,
)
from ctxdb.settings import Settings

CLIENT_MAJOR = client_version[0]
CHECK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ClusterStatus:
    """What `ctxdb es status` reports about a cluster."""

    url: str
    cluster_name: str
    version: str
    health: str
    nodes: int
    heap_used_bytes: int
    heap_max_bytes: int
    docs: int

    def lines(self) -> list[str]:
        mib = 1024 * 1024
        return [
            f"url:     {self.url}",
            f"cluster: {self.cluster_name} ({self.nodes} node{'s' if self.nodes != 1 else ''})",
            f"version: {self.version}",
            f"health:  {self.health}",
            f"heap:    {self.heap_used_bytes // mib} MiB used of {self.heap_max_bytes // mib} MiB",
            f"docs:    {self.docs}",
        ]


def _quick(client: Elasticsearch) -> Elasticsearch:
    return client.options(request_timeout=CHECK_TIMEOUT_S, max_retries=0, retry_on_timeout=False)


def _call(settings: Settings, action: str, call: Any) -> Any:
    """Run one client call, mapping transport and HTTP failures to ClusterError subclasses."""
    url = settings.elasticsearch.url
    try:
        return call()
    except AuthenticationException as exc:
        raise ClusterAuthError(
            f"{url} rejected the credentials (HTTP 401) while {action}; check "
            "ELASTICSEARCH_API_KEY or ELASTICSEARCH_USERNAME/ELASTICSEARCH_PASSWORD"
        ) from exc
    except AuthorizationException as exc:
        raise ClusterAuthError(
            f"{url} denied the configured user (HTTP 403) while {action}: {exc.message}"
        ) from exc
    except UnsupportedProductError as exc:
        raise ClusterVersionError(f"{url} is not an Elasticsearch cluster: {exc.message}") from exc
    except TlsError as exc:
        raise ClusterUnreachableError(
            f"TLS to {url} failed ({exc.message}); check ELASTICSEARCH_CA_CERTS"
        ) from exc
    except (TransportConnectionError, ConnectionTimeout) as exc:
        raise ClusterUnreachableError(
            f"cannot reach Elasticsearch at {url} ({exc.message}); is it running? "
            "`ctxdb es start` starts the embedded node, or set ELASTICSEARCH_URL"
        ) from exc
    except ApiError as exc:
        raise ClusterError(f"{url} answered HTTP {exc.status_code} while {action}: {exc}") from exc


def check_cluster(settings: Settings) -> str:
    """The server version at `settings.elasticsearch_url`; ClusterError if it cannot be used.

    Reads the version from `_nodes/_local`: the root endpoint (`client.info()`) lives in the
    rest-root module, which the embedded test distribution does not include.
    """
    client = _quick(make_client(settings))
    info = _call(
        settings,
        "reading the node version",
        lambda: client.nodes.info(node_id="_local", metric="_none", filter_path="nodes.*.version"),
    )
    versions = [node["version"] for node in info.get("nodes", {}).values()]
    if not versions:
        raise ClusterVersionError(f"{settings.elasticsearch.url} did not report a node version")
    version = versions[0]
    if int(version.split(".")[0]) != CLIENT_MAJOR:
        raise ClusterVersionError(
            f"{settings.elasticsearch.url} runs Elasticsearch {version}, but ctxdb's client is "
            f"{'.'.join(map(str, client_version))}; use an Elasticsearch {CLIENT_MAJOR}.x cluster"
        )
    return version


def cluster_status(settings: Settings) -> ClusterStatus:
    """Version, health, heap and document count of the configured cluster."""
    version = check_cluster(settings)
    client = _quick(make_client(settings))
    health = _call(settings, "reading cluster health", client.cluster.health)
    stats = _call(settings, "reading node stats", lambda: client.nodes.stats(metric="jvm"))
    count = _call(settings, "counting documents", client.count)
    heaps = [node["jvm"]["mem"] for node in stats["nodes"].values()]
    return ClusterStatus(
        url=settings.elasticsearch.url,
        cluster_name=health["cluster_name"],
        version=version,
        health=health["status"],
        nodes=health["number_of_nodes"],
        heap_used_bytes=sum(heap["heap_used_in_bytes"] for heap in heaps),
        heap_max_bytes=sum(heap["heap_max_in_bytes"] for heap in heaps),
        docs=count["count"],
    )
