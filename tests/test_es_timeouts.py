"""Issue 12, finding 14: every wait on Elasticsearch is bounded by a documented setting, so a
frozen node (SIGSTOP) fails the index writer with a clear error instead of hanging for minutes, and
a rerun after the node thaws converges.

The node here is a second embedded node on a free port (the shared one is never paused).

Issue 24, finding 5: `ctxdb index sync` against a node that freezes mid-bulk fails within the
bound docs/configuration.md states (one bulk timeout, then the lease release; it took 131 s with
the defaults when every queued chunk waited its own timeout), and a frozen or stopped node ends
in one `error:` line, without the client's retry warnings and their tracebacks.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import delete_prefix_indices
from conftest_index import role_rows, turn_tables, write_rows
from conftest_ports import free_port_pair
from frozen_listener import FreezingProxy

import ctxdb.index.bulk as bulk_module
from ctxdb.coordination.lease import KEEP_TIMEOUT_S
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.bulk import ElasticsearchUnavailable
from ctxdb.index.checks import count_mismatches
from ctxdb.index.client import make_client
from ctxdb.index.health import check_cluster
from ctxdb.index.sync import sync_live
from ctxdb.node import distribution, embedded
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

MODEL = "all-MiniLM-L6-v2"
CTXDB = str(Path(sys.executable).with_name("ctxdb"))


@dataclass
class Node:
    settings: Settings
    pid: int


@pytest.fixture(scope="module")
def node(es_base_settings: Settings) -> Iterator[Node]:
    port = free_port_pair()
    settings = Settings(
        elasticsearch={"url": f"http://127.0.0.1:{port}"},
        node={
            "port": port,
            "heap": "512m",
            "cache_dir": distribution.cache_root(es_base_settings),
            "version": es_base_settings.node.version,
        },
    )
    started = embedded.start(settings)
    yield Node(settings, started.pid)
    os.kill(started.pid, signal.SIGCONT)
    embedded.stop(settings)
    shutil.rmtree(embedded.EmbeddedNode.from_settings(settings).instance, ignore_errors=True)


def test_finding_14_client_applies_the_configured_bounds() -> None:
    settings = Settings(
        elasticsearch={"request_timeout": 7.5, "max_retries": 1, "retry_on_timeout": False}
    )
    es = make_client(settings)
    assert (es._request_timeout, es._max_retries, es._retry_on_timeout) == (7.5, 1, False)
    assert Settings().elasticsearch.retry_on_timeout is False  # a frozen node is not waited twice


def test_finding_14_frozen_node_fails_the_writer_and_a_rerun_converges(
    node: Node,
    delta_store: DeltaStore,
    embedder,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = node.settings.replace(
        home=tmp_path,
        elasticsearch={
            "index_prefix": "frozen",
            "request_timeout": 3.0,
            "bulk_timeout_s": 3.0,
            "chunk_size": 4,
            # the frozen writer cannot release its lease: the rerun waits for it to expire
            "writer_lease_ttl_s": 6.0,
            "writer_lease_wait_s": 60.0,
        },
    )
    write_rows(delta_store, role_rows([f"answer about frozen topic {i}" for i in range(12)]))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, embedder, batch_size=16)

    send_chunk = bulk_module._send_chunk
    frozen: list[int] = []

    def freeze_then_send(es, chunk, max_retries, timeout_s):
        """The node freezes (SIGSTOP) as the first bulk request goes out: mid-bulk."""
        if not frozen:
            os.kill(node.pid, signal.SIGSTOP)
            frozen.append(node.pid)
        assert timeout_s == 3.0  # the bulk timeout setting reaches every bulk request
        return send_chunk(es, chunk, max_retries, timeout_s)

    monkeypatch.setattr(bulk_module, "_send_chunk", freeze_then_send)
    es = make_client(settings)
    try:
        # Either way the writer fails with one bounded, clear error: the bulk request times out,
        # or (a loaded machine opening a fresh connection, or a request of the sync other than
        # the bulk reaching the frozen node first) the connect or that request does.
        with pytest.raises(
            ElasticsearchUnavailable,
            match=(
                "did not answer a bulk request within 3 s|unreachable: Connection timed out"
                r"|is unreachable \(ConnectionTimeout\); nothing was swapped"
            ),
        ):
            sync_live(delta_store, es, settings, model_id=MODEL)
    finally:
        os.kill(node.pid, signal.SIGCONT)
    assert frozen

    monkeypatch.setattr(bulk_module, "_send_chunk", send_chunk)
    check_cluster(settings)
    sync_live(delta_store, es, settings, model_id=MODEL)
    mismatches = count_mismatches(delta_store, es, "frozen")
    assert mismatches and all(check.ok for check in mismatches), mismatches


def assert_quiet_client(stderr: str) -> None:
    """The error line last, no traceback and none of the client's own retry or node lines."""
    assert stderr.splitlines()[-1].startswith("error: "), stderr
    for noise in ("Traceback", "Retrying request", "Urllib3HttpNode", "elastic_transport"):
        assert noise not in stderr, stderr


def sync_env(home: Path, url: str, prefix: str, **settings: str) -> dict[str, str]:
    return {
        **os.environ,
        "CTXDB_HOME": str(home),
        "ELASTICSEARCH_URL": url,
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix,
        **settings,
    }


def test_issue_24_finding_5_frozen_node_fails_the_cli_sync_in_the_documented_time_in_one_line(
    es_base_settings: Settings, delta_store: DeltaStore, embedder, tmp_path: Path
) -> None:
    write_rows(delta_store, role_rows([f"answer about a frozen node {i}" for i in range(24)]))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, embedder, batch_size=16)
    url = urlsplit(es_base_settings.elasticsearch.url)
    proxy = FreezingProxy((url.hostname, url.port))
    prefix = f"frz{uuid.uuid4().hex[:10]}"
    bulk_timeout_s, request_timeout_s = 8, 3
    env = sync_env(
        tmp_path,
        f"http://127.0.0.1:{proxy.port}",
        prefix,
        CTXDB_ELASTICSEARCH_REQUEST_TIMEOUT=str(request_timeout_s),
        CTXDB_ELASTICSEARCH_BULK_TIMEOUT_S=str(bulk_timeout_s),
        CTXDB_ELASTICSEARCH_CHUNK_SIZE="2",  # many chunks: more bulk requests queued than in flight
    )
    try:
        done = subprocess.run(
            [CTXDB, "index", "sync", "--no-embed"], env=env, capture_output=True, text=True
        )
        ended = time.monotonic()
    finally:
        proxy.close()
        with make_client(es_base_settings) as es:
            delete_prefix_indices(es, prefix)
    assert proxy.frozen_at is not None, done.stderr
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: Elasticsearch did not answer a bulk request within 8 s; nothing was marked "
        "indexed, rerun to catch up"
    ], done.stderr
    assert_quiet_client(done.stderr)
    # docs/configuration.md: the one hung request's timeout (the chunks queued behind it are
    # never sent), then at most a lease renewal and the lease release (KEEP_TIMEOUT_S each); no
    # renewal is due here (ttl 120 s), so only the release; 4 s for the process to exit
    waited = ended - proxy.frozen_at
    assert waited < bulk_timeout_s + KEEP_TIMEOUT_S + 4, (waited, done.stderr)


def test_issue_24_finding_5_stopped_node_fails_the_cli_sync_in_one_line(
    delta_store: DeltaStore, embedder, tmp_path: Path
) -> None:
    write_rows(delta_store, role_rows(["answer about a stopped node"]))
    embed_role_rows(delta_store, embedder, batch_size=16)
    closed = free_port_pair()  # nothing listens: connections are refused, and retried
    env = sync_env(tmp_path, f"http://127.0.0.1:{closed}", "stopped")
    done = subprocess.run(
        [CTXDB, "index", "sync", "--no-embed"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    expected = f"error: index sync: Elasticsearch at http://127.0.0.1:{closed} is unreachable"
    assert done.stderr.startswith(expected)
