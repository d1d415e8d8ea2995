"""A local multi-node Elasticsearch cluster on loopback, from the embedded node's distribution.

Each node is an `EmbeddedNode` of its own HTTP port (its own config, data and logs under the
cache, transport port = HTTP port + 100), run as the same system user under root; the nodes find
each other through `discovery.seed_hosts` and elect the first master among
`cluster.initial_master_nodes`. Test support (here, not in ctxdb: only the cluster test stack and
bench/bench_cluster.py use it) to prove replicas, fail-over and the index sync on more than one
node; loopback only, security off.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ctxdb.node import embedded
from ctxdb.node.distribution import cache_root, ensure_home
from ctxdb.node.embedded import EmbeddedNode
from ctxdb.node.errors import NodeStartError, PortInUseError
from ctxdb.node.java import find_jdk
from ctxdb.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalCluster:
    """The nodes of one local cluster, in start order (the first one's port names the cluster)."""

    nodes: tuple[EmbeddedNode, ...]

    @property
    def name(self) -> str:
        return f"ctxdb-cluster-{self.nodes[0].port}"

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def node_name(self, node: EmbeddedNode) -> str:
        return f"{self.name}-n{self.nodes.index(node)}"

    def node_settings(self, settings: Settings, node: EmbeddedNode) -> Settings:
        """`settings` with the embedded node's port set to `node`'s (for `embedded.stop`)."""
        return settings.replace(node={"port": node.port})


def node_extra_config(cluster: LocalCluster, node: EmbeddedNode) -> dict[str, str]:
    """The elasticsearch.yml settings that make `node` one of `cluster`'s nodes."""
    return {
        "cluster.name": cluster.name,
        "node.name": cluster.node_name(node),
        "discovery.type": "multi-node",
        "discovery.seed_hosts": ",".join(f"127.0.0.1:{n.transport_port}" for n in cluster.nodes),
        "cluster.initial_master_nodes": ",".join(cluster.node_name(n) for n in cluster.nodes),
    }


def cluster_health(url: str, nodes: int, status: str, timeout: float) -> dict | None:
    """`_cluster/health` once `nodes` nodes have joined at `status` (None while unanswered or
    not there within `timeout` seconds)."""
    query = f"wait_for_nodes={nodes}&wait_for_status={status}&timeout={max(1, int(timeout))}s"
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health?{query}", timeout=timeout + 5) as r:
            health = json.load(r)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return None if health.get("timed_out") else health


def start_cluster(
    settings: Settings, ports: Sequence[int], timeout_s: float, status: str = "green"
) -> LocalCluster:
    """Start a fresh cluster of one node per HTTP port in `ports` (their data wiped first) and
    wait until every node has joined and the cluster is `status`; NodeStartError (with the
    nodes' last log lines) when that takes longer than `timeout_s`."""
    cluster = LocalCluster(
        tuple(EmbeddedNode(cache_root(settings), settings.node.version, port) for port in ports)
    )
    for node in cluster.nodes:
        for port in (node.port, node.transport_port):
            if embedded.port_busy(port):
                raise PortInUseError(f"port {port} on 127.0.0.1 is in use by another process")
    jdk = find_jdk(settings)
    home = ensure_home(settings, cluster.nodes[0].cache)
    deadline = time.monotonic() + timeout_s
    for node in cluster.nodes:
        shutil.rmtree(node.instance, ignore_errors=True)
        embedded.prepare_instance(node, home, node_extra_config(cluster, node))
    log.info("starting a %d-node cluster %s on %s", len(ports), cluster.name, cluster.urls)
    # the nodes elect a master only once a majority runs: launch them side by side
    with ThreadPoolExecutor(max_workers=len(cluster.nodes)) as pool:
        launches = [
            pool.submit(
                embedded.launch, node, home, jdk, cluster.node_settings(settings, node), deadline
            )
            for node in cluster.nodes
        ]
        errors = [future.exception() for future in launches]
    failed = next((error for error in errors if error is not None), None)
    if failed is None and wait_for_cluster(cluster, status, deadline) is not None:
        return cluster
    stop_cluster(settings, cluster)
    if failed is not None:
        raise failed
    lines = [f"{n.url}: {line}" for n in cluster.nodes for line in embedded.failure_lines(n, 4)]
    raise NodeStartError(
        f"cluster {cluster.name} not {status} with {len(ports)} nodes after {timeout_s:.0f} s"
        + ("\n--- last log lines ---\n" + "\n".join(lines) if lines else "")
    )


def wait_for_cluster(cluster: LocalCluster, status: str, deadline: float) -> dict | None:
    """The health of `cluster` once all its nodes joined at `status`, or None at `deadline`."""
    while time.monotonic() < deadline:
        for url in cluster.urls:
            wait = min(10.0, max(1.0, deadline - time.monotonic()))
            health = cluster_health(url, len(cluster.nodes), status, wait)
            if health is not None:
                return health
        time.sleep(0.5)
    return None


def kill_node(node: EmbeddedNode) -> int | None:
    """SIGKILL `node`'s server process (a crash, not a shutdown); its pid, None if not running."""
    pid = embedded.running_pid(node)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        while embedded.pid_alive(pid):
            time.sleep(0.1)
    return pid


def restart_node(
    settings: Settings, cluster: LocalCluster, node: EmbeddedNode, timeout_s: float
) -> None:
    """Start a stopped (or killed) node of `cluster` again on its data, and wait until every node
    is back and the cluster green; NodeStartError with the node's last log lines after
    `timeout_s`."""
    home = ensure_home(settings, node.cache)
    deadline = time.monotonic() + timeout_s
    embedded.prepare_instance(node, home, node_extra_config(cluster, node))
    node_settings = cluster.node_settings(settings, node)
    embedded.launch(node, home, find_jdk(settings), node_settings, deadline)
    if wait_for_cluster(cluster, "green", deadline) is None:
        lines = "\n".join(embedded.failure_lines(node))
        raise NodeStartError(f"{node.url} did not rejoin {cluster.name} green:\n{lines}")


def stop_cluster(settings: Settings, cluster: LocalCluster) -> None:
    """Stop every node (in parallel) and delete their instance directories."""
    with ThreadPoolExecutor(max_workers=len(cluster.nodes)) as pool:
        list(
            pool.map(
                lambda node: embedded.stop(cluster.node_settings(settings, node)), cluster.nodes
            )
        )
    for node in cluster.nodes:
        shutil.rmtree(node.instance, ignore_errors=True)
