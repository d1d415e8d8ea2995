"""Issue 25 item 5 (a): a real 3-node Elasticsearch cluster forms and is green, and `ctxdb index
sync` builds the sample memory's indices on it, each shard with a replica on another node."""

from __future__ import annotations

import pytest
from cluster_stack import build_records, ctxdb, table_rows
from elasticsearch import Elasticsearch
from local_cluster import LocalCluster

from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.settings import Settings
from ctxdb.storage.tables import ROLE_ROWS

pytestmark = [pytest.mark.cluster, pytest.mark.es, pytest.mark.model]


def test_three_nodes_form_one_green_cluster(es_cluster: LocalCluster) -> None:
    names = {es_cluster.node_name(node) for node in es_cluster.nodes}
    masters = set()
    for url in es_cluster.urls:  # every node answers for the same cluster and master
        with Elasticsearch(url) as es:
            health = es.cluster.health()
            assert (health["cluster_name"], health["status"]) == (es_cluster.name, "green")
            assert health["number_of_nodes"] == health["number_of_data_nodes"] == 3
            assert {node["name"] for node in es.nodes.info()["nodes"].values()} == names
            masters.add(es.cat.master(format="json")[0]["node"])
    assert len(masters) == 1 and masters <= names


def test_index_sync_builds_the_memory_on_the_cluster(
    cluster_settings: Settings, es_cluster: LocalCluster, sample_events
) -> None:
    store = build_records(cluster_settings, sample_events)
    assert table_rows(store, ROLE_ROWS) > 100

    synced = ctxdb(cluster_settings, "index", "sync")
    assert synced.returncode == 0, synced.stderr[-3000:]
    verified = ctxdb(cluster_settings, "index", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]

    prefix = cluster_settings.elasticsearch.index_prefix
    with make_client(cluster_settings) as es:
        for kind in (ROWS, TURNS):
            alias = alias_name(prefix, kind)
            assert es.count(index=alias)["count"] > 0
            waiting = es.options(request_timeout=90)  # the health call waits on the server
            health = waiting.cluster.health(index=alias, wait_for_status="green", timeout="60s")
            assert health["status"] == "green", health
            live = es.indices.get_settings(index=alias, flat_settings=True)
            (index,) = live.body
            assert live[index]["settings"]["index.auto_expand_replicas"] == "0-1"
            shards = es.cat.shards(index=alias, format="json", h="shard,prirep,state,node")
            # every shard twice (primary and replica), started, never both on one node
            by_shard: dict[str, list[dict]] = {}
            for shard in shards:
                by_shard.setdefault(shard["shard"], []).append(shard)
            for copies in by_shard.values():
                assert sorted(c["prirep"] for c in copies) == ["p", "r"], copies
                assert {c["state"] for c in copies} == {"STARTED"}, copies
                assert len({c["node"] for c in copies}) == 2, copies
