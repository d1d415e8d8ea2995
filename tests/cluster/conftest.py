"""The cluster stack (`make test-cluster`): real servers on free loopback ports, one of each per
session, started on first use and stopped when the session ends.

- `es_cluster`: three Elasticsearch nodes from the embedded node's distribution
  (`local_cluster.py`), run as the embedded node's system user under root;
- `s3_server`: `moto_server`, an S3 endpoint, with one bucket; each test's Delta tables and
  landing location live under `s3://<bucket>/<unique>/`;
- `redis_server` (tests/conftest.py): Debian's `redis-server` (nothing persisted), the Celery
  broker and backend.

Each start waits for readiness under a deadline and fails with the server's last log lines.
The servers and helpers are in tests/cluster/cluster_stack.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_stack import S3Server, free_ports, start_s3_server
from local_cluster import LocalCluster, start_cluster, stop_cluster
from server_processes import SERVER_START_S, stop_process

from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings, get_settings

CLUSTER_NODES = 3
CLUSTER_HEAP = "512m"  # three nodes beside the suite's own node on a 2-core, 23 GiB machine
CLUSTER_START_S = 300.0
BUCKET = "ctxdb-cluster"
SAMPLE_USERS, SAMPLE_CONVERSATIONS, SAMPLE_PER_FILE = 3, 24, 400


@pytest.fixture(scope="session")
def cluster_node_settings() -> Settings:
    """The settings the cluster's nodes start with (the embedded node's, a smaller heap)."""
    return get_settings().replace(node={"heap": CLUSTER_HEAP})


@pytest.fixture(scope="session")
def es_cluster(cluster_node_settings: Settings) -> Iterator[LocalCluster]:
    """Three nodes, each master-eligible and data, green; stopped (data deleted) after."""
    ports = free_ports(CLUSTER_NODES)
    cluster = start_cluster(cluster_node_settings, ports, CLUSTER_START_S)
    yield cluster
    stop_cluster(cluster_node_settings, cluster)


@pytest.fixture
def cluster_settings(es_cluster: LocalCluster, tmp_path: Path) -> Settings:
    """Settings on the cluster's first node with home=tmp_path and a unique index prefix (the
    cluster's data goes with it at the end of the session)."""
    return get_settings().replace(
        home=tmp_path,
        elasticsearch={"url": es_cluster.urls[0], "index_prefix": f"t{uuid.uuid4().hex[:12]}"},
    )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """`moto_server` on a free loopback port with the bucket created, and the AWS environment
    set in this process for the session (pyarrow's S3 filesystem takes it from there)."""
    server = start_s3_server(tmp_path_factory.mktemp("moto"), BUCKET, SERVER_START_S)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in server.env.items():
                patch.setenv(name, value)
            yield server
    finally:
        stop_process(server.process)


@pytest.fixture(scope="session")
def sample_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of generated sample event files (JSONL parts, every second one gzipped)."""
    folder = tmp_path_factory.mktemp("sample")
    generated = generate_events(users=SAMPLE_USERS, conversations=SAMPLE_CONVERSATIONS, seed=7)
    write_sample(generated, folder, per_file=SAMPLE_PER_FILE)
    return folder
