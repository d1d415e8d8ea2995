"""Issue 25: two `ctxdb serve` replicas (separate processes, separate homes, each on another node
of the 3-node cluster, `CTXDB_AUTH_TOKEN_STORE=elasticsearch`) answer the same searches of the
memory built on the stack with one token, and a revocation issued on one replica's home is
refused by both within the token cache bound (`CTXDB_AUTH_TOKEN_CACHE_S`, default 5 s)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest
from cluster_stack import SCRIPTS, build_records, ctxdb, environment, free_ports
from local_cluster import LocalCluster
from server_processes import start_process, stop_process, wait_ready

from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS

pytestmark = [pytest.mark.cluster, pytest.mark.es, pytest.mark.model, pytest.mark.slow]
REPLICAS = ("a", "b")
SERVE_READY_S = 120.0
CACHE_S = 5.0  # the default of CTXDB_AUTH_TOKEN_CACHE_S, set explicitly
SLACK_S = 5.0


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def replica_settings(settings: Settings, home: Path, url: str) -> Settings:
    """`settings` on another home and another node of the cluster, the token store shared."""
    return settings.replace(home=home, elasticsearch={"url": url})


@pytest.fixture
def built(cluster_settings: Settings, sample_events: Path) -> Settings:
    """The sample memory derived and indexed on the cluster."""
    build_records(cluster_settings, sample_events)
    synced = ctxdb(cluster_settings, "index", "sync")
    assert synced.returncode == 0, synced.stderr[-3000:]
    return cluster_settings


@pytest.fixture
def replicas(
    built: Settings, es_cluster: LocalCluster, tmp_path: Path
) -> Iterator[list[tuple[str, dict[str, str]]]]:
    """Two `ctxdb serve` processes, replica i on the cluster's node i, each with its own home;
    yields each one's URL and environment."""
    processes, replicas = [], []
    extra = {"CTXDB_AUTH_TOKEN_STORE": "elasticsearch", "CTXDB_AUTH_TOKEN_CACHE_S": str(CACHE_S)}
    ports = free_ports(len(REPLICAS))
    try:
        for name, port, node_url in zip(REPLICAS, ports, es_cluster.urls, strict=False):
            settings = replica_settings(built, tmp_path / f"home-{name}", node_url)
            env = environment(settings, **extra, CTXDB_EMBEDDING_THREADS="1")
            log = tmp_path / f"serve-{name}.log"
            command = [str(SCRIPTS / "ctxdb"), "serve", "--port", str(port)]
            processes.append((start_process(command, log, env), log))
            replicas.append((f"http://127.0.0.1:{port}", env))
        for (url, _), (process, log) in zip(replicas, processes, strict=True):
            ready = lambda url=url: healthy(url)  # noqa: E731
            wait_ready(f"ctxdb serve on {url}", ready, process, log, SERVE_READY_S)
        yield replicas
    finally:
        for process, _ in processes:
            stop_process(process)


def search(url: str, token: str, query: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{url}/v1/search", json={"query": query}, headers=headers, timeout=120)


def refused_by_all(urls: list[str], token: str, query: str, deadline_s: float) -> list[int]:
    """Poll every replica until each refuses `token` (401) or `deadline_s` passes; the last
    status of each."""
    end = time.monotonic() + deadline_s
    while True:
        statuses = [search(url, token, query).status_code for url in urls]
        if set(statuses) == {401} or time.monotonic() > end:
            return statuses
        time.sleep(0.2)


def tokens(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`ctxdb tokens ...` in a replica's environment (its home, its node, the shared store)."""
    command = [str(SCRIPTS / "ctxdb"), "tokens", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_two_serve_replicas_share_a_token_and_its_revocation(
    built: Settings, replicas: list[tuple[str, dict[str, str]]]
) -> None:
    rows = DeltaStore.from_settings(built).read(ROLE_ROWS)
    # the sample user with the most rows, and words of one of their user turns
    user, tenant = rows.group_by("user_id", "tenant").len().sort("len").row(-1)[:2]
    mine = rows.filter(pl.col("user_id") == user, pl.col("role") == "user")
    query = " ".join(mine.sort("row_id")["text"][0].split()[:6])
    (url_a, env_a), (url_b, _) = replicas
    assert env_a["CTXDB_HOME"] != replicas[1][1]["CTXDB_HOME"]
    assert env_a["ELASTICSEARCH_URL"] != replicas[1][1]["ELASTICSEARCH_URL"]

    issued = tokens(env_a, "issue", "--user", user, "--tenant", tenant)
    assert issued.returncode == 0, issued.stderr[-2000:]
    token = issued.stdout.strip()
    answers = []
    for url, _ in replicas:
        response = search(url, token, query)
        assert response.status_code == 200, response.text[:2000]
        answers.append([(h["conversation_id"], h["turn_id"]) for h in response.json()["hits"]])
    assert answers[0] and answers[0] == answers[1]
    users_turns = rows.filter(pl.col("user_id") == user).select("conversation_id", "turn_id")
    assert set(answers[0]) <= set(users_turns.iter_rows())  # the token's user's turns only

    revoked = tokens(env_a, "revoke", token.split("_")[1])
    assert revoked.returncode == 0, revoked.stderr[-2000:]
    revoked_at = time.monotonic()
    statuses = refused_by_all([url_a, url_b], token, query, CACHE_S + SLACK_S)
    assert statuses == [401, 401], (statuses, time.monotonic() - revoked_at)
