"""Issue 25 item 5 (d): a node of the 3-node cluster killed (SIGKILL) in the middle of an index
sync loses nothing: the sync completes, every document is there (`ctxdb index verify`), searches
answer all along, and the two nodes left are green again (each index's replica re-created). The
killed node is started again afterwards and rejoins."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from cluster_stack import SCRIPTS, build_records, ctxdb, environment
from elasticsearch import Elasticsearch
from local_cluster import LocalCluster, kill_node, restart_node
from server_processes import start_process, stop_process

from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.node.embedded import EmbeddedNode
from ctxdb.settings import Settings

pytestmark = [pytest.mark.cluster, pytest.mark.es, pytest.mark.model, pytest.mark.slow]
SYNC_START_S = 240.0
RESTART_S = 240.0


def victim(es: Elasticsearch, cluster: LocalCluster, alias: str) -> EmbeddedNode:
    """The node to kill: the one holding the primary of `alias`' shard, unless that is the node
    the client talks to (then the one holding its replica)."""
    nodes = {cluster.node_name(node): node for node in cluster.nodes}
    copies = es.cat.shards(index=alias, format="json", h="prirep,state,node")
    holders = [c["node"] for c in sorted(copies, key=lambda c: c["prirep"]) if c["node"]]
    return next(nodes[name] for name in holders if nodes[name] != cluster.nodes[0])


class Searcher(threading.Thread):
    """Searches `alias` every 0.1 s until stopped; keeps each answer's hit count and each
    error."""

    def __init__(self, url: str, alias: str) -> None:
        super().__init__(daemon=True)
        self.es = Elasticsearch(url, request_timeout=60)
        self.alias = alias
        self.stopped = threading.Event()
        self.answers: list[int] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                found = self.es.search(index=self.alias, query={"match_all": {}}, size=1)
                self.answers.append(found["hits"]["total"]["value"])
            except Exception as exc:  # noqa: BLE001 - every failure counts, whatever its kind
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.1)


def test_a_node_killed_mid_sync_loses_nothing(
    cluster_settings: Settings,
    cluster_node_settings: Settings,
    es_cluster: LocalCluster,
    sample_events: Path,
    tmp_path: Path,
) -> None:
    build_records(cluster_settings, sample_events)
    alias = alias_name(cluster_settings.elasticsearch.index_prefix, ROWS)
    # small bulks, one at a time: the sync lasts long enough to lose a node under it
    env = environment(
        cluster_settings, CTXDB_ELASTICSEARCH_CHUNK_SIZE="2", CTXDB_ELASTICSEARCH_BULK_THREADS="1"
    )
    log = tmp_path / "sync.log"
    sync = start_process([str(SCRIPTS / "ctxdb"), "index", "sync"], log, env)
    es = make_client(cluster_settings)
    killed = None
    searcher = Searcher(es_cluster.urls[0], alias)
    try:
        deadline = time.monotonic() + SYNC_START_S
        while not es.indices.exists_alias(name=alias):
            assert sync.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the sync never created its index"
            time.sleep(0.05)
        waiting = es.options(request_timeout=150)  # health waits on the server side
        waiting.cluster.health(index=alias, wait_for_status="green", timeout="60s")
        killed = victim(es, es_cluster, alias)
        searcher.start()
        kill_node(killed)
        assert sync.poll() is None, "the sync was over before the node died"
        assert sync.wait(timeout=600) == 0, log.read_text()[-3000:]
        time.sleep(1)  # a few searches after the sync
        searcher.stopped.set()
        searcher.join(timeout=60)
        assert searcher.errors == [] and searcher.answers, searcher.errors[:3]

        verified = ctxdb(cluster_settings, "index", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
        health = waiting.cluster.health(wait_for_nodes="2", wait_for_status="green", timeout="120s")
        assert (health["number_of_nodes"], health["status"]) == (2, "green"), health
    finally:
        searcher.stopped.set()
        stop_process(sync)
        if killed is not None:  # the next tests find three nodes again
            restart_node(cluster_node_settings, es_cluster, killed, RESTART_S)
