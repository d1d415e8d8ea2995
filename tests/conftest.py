"""Shared fixtures: one real Elasticsearch node per session, a unique index prefix per test.

The session node is the cluster at ELASTICSEARCH_URL when it answers; otherwise, when that URL is
the embedded default, the embedded node is started (or reused) through `ctxdb.node.embedded`.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_components import REDIS, skip_missing
from elasticsearch import Elasticsearch
from server_processes import RedisServer, redis_server_running

from ctxdb.index.client import make_client
from ctxdb.index.errors import ClusterUnreachableError
from ctxdb.index.health import check_cluster
from ctxdb.node import embedded
from ctxdb.settings import Settings, clear_settings_cache, get_settings
from ctxdb.storage.delta import DeltaStore

# Support modules whose fixtures every test module sees (their helpers are imported by name).
pytest_plugins = [
    "conftest_components",
    "conftest_index",
    "conftest_ops",
    "conftest_search",
    "pytester",
]


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    """Each test reads the settings anew (`get_settings()` caches them for the process)."""
    clear_settings_cache()
    yield
    clear_settings_cache()


@pytest.fixture(scope="session")
def es_base_settings() -> Settings:
    """Settings of the session's real node (external if reachable, else the embedded one)."""
    settings = get_settings()
    try:
        check_cluster(settings)
    except ClusterUnreachableError:
        if not settings.embedded:
            raise
        embedded.start(settings)
        check_cluster(settings)
    return settings


@pytest.fixture(scope="session")
def es_url(es_base_settings: Settings) -> str:
    return es_base_settings.elasticsearch.url


def delete_prefix_indices(client: Elasticsearch, prefix: str) -> list[str]:
    """Delete every index named `<prefix>-*` by name (wildcard deletes are refused by default)."""
    found = client.indices.get(
        index=f"{prefix}-*", expand_wildcards="all", allow_no_indices=True, ignore_unavailable=True
    )
    names = sorted(found.body)
    if names:
        client.options(ignore_status=404).indices.delete(index=",".join(names))
    return names


@pytest.fixture
def settings(es_base_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    """The session node's settings with home=tmp_path and a unique index prefix (cleaned after)."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    test_settings = es_base_settings.replace(home=tmp_path, elasticsearch={"index_prefix": prefix})
    yield test_settings
    with make_client(test_settings) as client:
        delete_prefix_indices(client, prefix)


@pytest.fixture
def es_settings(settings: Settings) -> Settings:
    """Alias of `settings` for tests that name it after Elasticsearch."""
    return settings


@pytest.fixture
def es(settings: Settings) -> Iterator[Elasticsearch]:
    """A client for the session node, scoped to the test (its indices use settings.index_prefix)."""
    with make_client(settings) as client:
        yield client


@pytest.fixture
def delta_store(tmp_path: Path) -> DeltaStore:
    """A DeltaStore over tmp_path/delta (the same root as `settings.delta_uri`)."""
    return DeltaStore(str(tmp_path / "delta"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Debian's redis-server on a free loopback port (the Celery broker and result backend)."""
    if shutil.which("redis-server") is None:
        skip_missing(REDIS)
    with redis_server_running(tmp_path_factory.mktemp("redis")) as server:
        yield server
