"""Cluster checks: the real node passes; unreachable, secured, foreign and wrong-major servers fail
with one clear message.

The failing servers are tiny local HTTP servers standing in for a secured cluster (401), an 8.x
cluster and a non-Elasticsearch service: they exist only to make those failures happen.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest_ports import free_port_pair
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.errors import ClusterAuthError, ClusterUnreachableError, ClusterVersionError
from ctxdb.index.health import check_cluster, cluster_status
from ctxdb.settings import Settings

_register_all()
runner = CliRunner()


class StandIn(BaseHTTPRequestHandler):
    """Answers every GET with the class's canned status, headers and JSON body."""

    status = 200
    headers_out: dict[str, str] = {}
    body: dict = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        payload = json.dumps(self.body).encode()
        self.send_response(self.status)
        for name, value in {"Content-Type": "application/json", **self.headers_out}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return


def serve(handler: type[StandIn]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def secured_cluster() -> Iterator[str]:
    """Stands in for a secured cluster: every request is answered 401."""

    class Secured(StandIn):
        status = 401
        headers_out = {"WWW-Authenticate": 'Basic realm="security"'}
        body = {"error": {"type": "security_exception", "reason": "unable to authenticate"}}

    yield from serve(Secured)


@pytest.fixture
def old_cluster() -> Iterator[str]:
    """Stands in for an Elasticsearch 8 cluster (right product header, wrong major)."""

    class Old(StandIn):
        headers_out = {"X-Elastic-Product": "Elasticsearch"}
        body = {"nodes": {"n1": {"version": "8.15.0"}}}

    yield from serve(Old)


@pytest.fixture
def not_elasticsearch() -> Iterator[str]:
    """Stands in for some other HTTP service listening on the configured URL."""

    class Other(StandIn):
        body = {"hello": "world"}

    yield from serve(Other)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port_pair()}"


def test_real_node_passes(es_base_settings: Settings) -> None:
    assert check_cluster(es_base_settings).startswith("9.")
    status = cluster_status(es_base_settings)
    assert status.health in {"green", "yellow"}
    assert status.heap_max_bytes > status.heap_used_bytes > 0
    assert status.docs >= 0
    assert any(line.startswith("version: 9.") for line in status.lines())


def test_unreachable_cluster() -> None:
    url = closed_port_url()
    with pytest.raises(ClusterUnreachableError, match=f"cannot reach Elasticsearch at {url}"):
        check_cluster(Settings(elasticsearch={"url": url}))


def test_wrong_credentials(secured_cluster: str) -> None:
    settings = Settings(
        elasticsearch={"url": secured_cluster, "username": "elastic", "password": "wrong"}
    )
    with pytest.raises(ClusterAuthError, match="rejected the credentials"):
        check_cluster(settings)


def test_wrong_major_version(old_cluster: str) -> None:
    with pytest.raises(ClusterVersionError, match="runs Elasticsearch 8.15.0"):
        check_cluster(Settings(elasticsearch={"url": old_cluster}))


def test_not_elasticsearch(not_elasticsearch: str) -> None:
    with pytest.raises(ClusterVersionError, match="is not an Elasticsearch cluster"):
        check_cluster(Settings(elasticsearch={"url": not_elasticsearch}))


def test_cli_start_on_external_cluster_checks_it(es_base_settings: Settings) -> None:
    env = {"ELASTICSEARCH_URL": es_base_settings.elasticsearch.url, "CTXDB_ES_PORT": "1"}
    result = runner.invoke(app, ["es", "start"], env=env)
    assert result.exit_code == 0
    assert "(external)" in result.output and "Elasticsearch 9." in result.output


def test_cli_reports_unreachable_and_bad_credentials(secured_cluster: str) -> None:
    url = closed_port_url()
    unreachable = runner.invoke(app, ["es", "status"], env={"ELASTICSEARCH_URL": url})
    assert unreachable.exit_code == 1
    assert unreachable.output.startswith(f"error: cannot reach Elasticsearch at {url}")
    env = {
        "ELASTICSEARCH_URL": secured_cluster,
        "ELASTICSEARCH_API_KEY": "bad-key",
        "CTXDB_ES_PORT": "1",
    }
    refused = runner.invoke(app, ["es", "start"], env=env)
    assert refused.exit_code == 1
    assert refused.output.startswith(f"error: {secured_cluster} rejected the credentials")
    assert len(refused.output.strip().splitlines()) == 1
