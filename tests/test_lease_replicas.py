"""Issue 25 item 2: the writer-lease indices and the shared token index follow the configured
replicas (`CTXDB_ELASTICSEARCH_REPLICAS`), and an index created earlier with other replicas is
brought to the setting in place, on the real node."""

from __future__ import annotations

import pytest

from ctxdb.auth.es_tokens import ElasticsearchTokenStore, token_index
from ctxdb.coordination.lease import (
    lease_index,
    shard_lease_index,
    writer_lease,
    writer_lease_for,
)
from ctxdb.elastic.replicas import replica_state
from ctxdb.settings import Settings
from ctxdb.storage.shards import Shard

pytestmark = pytest.mark.es

AUTO = {"number_of_replicas": "0", "auto_expand_replicas": "0-1"}
FIXED = {"number_of_replicas": "0", "auto_expand_replicas": None}
ALL = {"number_of_replicas": "0", "auto_expand_replicas": "0-all"}


def with_replicas(settings: Settings, replicas: str) -> Settings:
    return settings.replace(elasticsearch={"replicas": replicas})


def test_lease_indices_are_created_with_the_configured_replicas(es, settings: Settings) -> None:
    fixed = with_replicas(settings, "0")
    prefix = settings.elasticsearch.index_prefix
    with writer_lease_for(es, fixed, "index sync"):
        pass
    with writer_lease_for(es, fixed, "index sync shard", Shard(0, 2)):
        pass
    for index in (lease_index(prefix), shard_lease_index(prefix)):
        assert replica_state(es, index) == FIXED, index
        assert es.cluster.health(index=index)["status"] == "green", index


def test_an_existing_lease_index_is_brought_to_the_setting(es, settings: Settings) -> None:
    prefix = settings.elasticsearch.index_prefix
    with writer_lease(es, prefix, "retention", ttl_s=30):  # created with the default (0-1)
        pass
    assert replica_state(es, lease_index(prefix)) == AUTO
    with writer_lease_for(es, with_replicas(settings, "0"), "retention"):
        assert replica_state(es, lease_index(prefix)) == FIXED
    with writer_lease_for(es, with_replicas(settings, "0-all"), "retention"):
        pass
    assert replica_state(es, lease_index(prefix)) == ALL
    assert replica_state(es, shard_lease_index(prefix)) == ALL  # looked up by the global lease


def test_the_token_index_follows_the_setting_and_is_updated_in_place(
    es, settings: Settings
) -> None:
    index = token_index(settings.elasticsearch.index_prefix)
    first = ElasticsearchTokenStore.from_settings(with_replicas(settings, "0"), es)
    token = first.issue("alice", tenant="t1")
    assert replica_state(es, index) == FIXED
    assert es.cluster.health(index=index)["status"] == "green"
    second = ElasticsearchTokenStore.from_settings(with_replicas(settings, "0-all"), es)
    second.ensure_index()
    assert replica_state(es, index) == ALL
    assert second.verify(token).user_id == "alice"  # the records stay where they were
