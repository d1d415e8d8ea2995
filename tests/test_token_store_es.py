"""Issue 25 item 3: a token store that servers on several machines share (`<prefix>-tokens`).

Every test runs against the real node; the unreachable-cluster tests point the store at a closed
loopback port instead (a real refused connection, no mock).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from conftest_ops import ensure_indices
from conftest_ports import free_port_pair
from fastapi.testclient import TestClient

from ctxdb.auth.authenticate import Authenticator, open_token_store
from ctxdb.auth.credentials import (
    BAD_TOKEN,
    AuthError,
    TokenStore,
    TokenStoreUnavailable,
)
from ctxdb.auth.es_tokens import MAPPING, ElasticsearchTokenStore, migrate, token_index
from ctxdb.capture.claude_code.mcp_config import ensure_token, server_entry
from ctxdb.index.client import make_client
from ctxdb.serve.http import create_app
from ctxdb.settings import Settings

pytestmark = pytest.mark.es

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
TENANT = "acme"


def es_store_settings(settings: Settings, cache_s: float = 1.0) -> Settings:
    return settings.replace(auth={"token_store": "elasticsearch", "token_cache_s": cache_s})


def token_id(token: str) -> str:
    return token.split("_")[1]


def refused_within(check: Callable[[], bool], deadline_s: float) -> bool:
    """Whether `check()` turns true before `deadline_s` seconds pass (polled every 0.1 s)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_issue_verify_revoke_and_only_hashes_are_stored(settings: Settings) -> None:
    es_settings = es_store_settings(settings)
    store = open_token_store(es_settings, make_client)
    assert isinstance(store, ElasticsearchTokenStore)
    token = store.issue("alice", tenant=TENANT, label="laptop")
    principal = Authenticator(es_settings, make_client).authenticate(token)
    assert (principal.user_id, principal.tenant, principal.token_id) == (
        "alice",
        TENANT,
        token_id(token),
    )
    client = make_client(settings)
    index = token_index(settings.elasticsearch.index_prefix)
    client.indices.refresh(index=index)
    hits = client.search(index=index, query={"match_all": {}})["hits"]["hits"]
    secret = token.split("_", 2)[2]
    assert len(hits) == 1 and secret not in str(hits[0]) and len(hits[0]["_source"]["digest"]) == 64
    stored = client.indices.get(index=index)[index]
    assert stored["mappings"]["dynamic"] == "strict"
    assert stored["mappings"]["properties"].keys() == MAPPING["properties"].keys()
    assert stored["settings"]["index"]["auto_expand_replicas"] == "0-1"
    assert store.revoke(token_id(token)) is True
    with pytest.raises(AuthError, match=BAD_TOKEN):
        store.verify(token)
    assert store.revoke("0" * 16) is False


def test_unknown_tokens_are_refused_before_and_after_the_index_exists(settings: Settings) -> None:
    store = open_token_store(es_store_settings(settings), make_client)
    unknown = f"ctxdb_{'0' * 16}_{'x' * 43}"
    with pytest.raises(AuthError, match=BAD_TOKEN):  # no index yet
        store.verify(unknown)
    alice = store.issue("alice", tenant=TENANT)
    for bad in (unknown, f"ctxdb_{token_id(alice)}_{'x' * 43}", "ctxdb_nosecret"):
        with pytest.raises(AuthError, match=BAD_TOKEN):
            store.verify(bad)


def test_issue_41_finding_7_odd_ids_are_bad_tokens_and_a_damaged_record_is_unavailable(
    settings: Settings,
) -> None:
    """A 5,000-character token id is a bad token (401), not a store fault (503); revoking a
    600-character id finds no token; a stored record that fails validation is the store's
    fault (503), not a 500."""
    es_settings = es_store_settings(settings)
    store = open_token_store(es_settings, make_client)
    alice = store.issue("alice", tenant=TENANT)
    with pytest.raises(AuthError, match=BAD_TOKEN):
        store.verify(f"ctxdb_{'a' * 5000}_{'x' * 43}")
    assert store.revoke("b" * 600) is False
    client = make_client(settings)
    index = token_index(settings.elasticsearch.index_prefix)
    damaged = "c" * 16
    client.index(index=index, id=damaged, document={"token_id": damaged}, refresh=True)
    with pytest.raises(TokenStoreUnavailable):
        store.verify(f"ctxdb_{damaged}_{'x' * 43}")
    with TestClient(create_app(es_settings, load_model=False)) as http:
        headers = {"Authorization": f"Bearer ctxdb_{'a' * 5000}_{'x' * 43}"}
        assert http.get("/v1/conversations", headers=headers).status_code == 401
        headers = {"Authorization": f"Bearer ctxdb_{damaged}_{'x' * 43}"}
        assert http.get("/v1/conversations", headers=headers).status_code == 503
    assert store.verify(alice).user_id == "alice"


def test_two_stores_share_tokens_and_a_revocation_reaches_the_other_within_the_cache_time(
    settings: Settings,
) -> None:
    """Two stores (two servers' worth of caches) over one index: a token issued through one
    verifies on the other, and a revocation through one is refused by the other once its cached
    record expires (polled against a deadline of the cache time plus slack)."""
    one = ElasticsearchTokenStore.from_settings(
        es_store_settings(settings, cache_s=1.0), make_client(settings)
    )
    other = ElasticsearchTokenStore.from_settings(
        es_store_settings(settings, cache_s=1.0), make_client(settings)
    )
    token = one.issue("alice", tenant=TENANT)
    assert other.verify(token).user_id == "alice"  # now cached by `other`
    assert one.revoke(token_id(token)) is True
    with pytest.raises(AuthError):  # the revoking store forgets its own record at once
        one.verify(token)

    def refused() -> bool:
        try:
            other.verify(token)
        except AuthError:
            return True
        return False

    assert refused_within(refused, deadline_s=1.0 + 5.0)


def test_migrate_copies_hashes_keeps_revocations_and_runs_again_as_a_no_op(
    settings: Settings,
) -> None:
    files = TokenStore(settings.tokens_path)
    kept, revoked = files.issue("alice", tenant=TENANT), files.issue("bob", tenant=TENANT)
    files.revoke(token_id(revoked))
    store = ElasticsearchTokenStore.from_settings(
        es_store_settings(settings), make_client(settings)
    )
    assert migrate(files.tokens(), store) == (2, 0)
    assert store.verify(kept).user_id == "alice"
    with pytest.raises(AuthError, match=BAD_TOKEN):
        store.verify(revoked)
    after = files.issue("carol", tenant=TENANT)
    files.revoke(token_id(kept))  # revoked in the file after the first copy: carried over
    assert migrate(files.tokens(), store) == (1, 2)
    assert store.verify(after).user_id == "carol"
    with pytest.raises(AuthError, match=BAD_TOKEN):
        store.verify(kept)


def test_claude_code_token_goes_to_the_configured_store(settings: Settings) -> None:
    """The MCP registration of Claude Code issues its token into the shared store, and the server
    entry it writes tells `ctxdb mcp` to read that store."""
    capture = es_store_settings(settings).replace(claude_code={"user_id": "ann", "tenant": "t1"})
    path = ensure_token(capture)
    token = path.read_text().strip()
    principal = ElasticsearchTokenStore.from_settings(capture, make_client(capture)).verify(token)
    assert (principal.user_id, principal.tenant) == ("ann", "t1")
    assert not capture.tokens_path.exists()
    assert ensure_token(capture) == path and path.read_text().strip() == token  # kept while valid
    assert server_entry(capture, path)["env"]["CTXDB_AUTH_TOKEN_STORE"] == "elasticsearch"


def _cli_env(settings: Settings, home: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "CTXDB_HOME": str(home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_AUTH_TOKEN_STORE": "elasticsearch",
        "CTXDB_AUTH_TOKEN_CACHE_S": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **extra,
    }


def _ctxdb(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([CTXDB, *args], env=env, capture_output=True, text=True, timeout=120)


def test_cli_migrate_then_issue_and_revoke_against_elasticsearch(
    settings: Settings, tmp_path: Path
) -> None:
    files = TokenStore(tmp_path / "auth" / "tokens.json")
    old = files.issue("alice", tenant=TENANT)
    env = _cli_env(settings, tmp_path)
    migrated = _ctxdb(["tokens", "migrate"], env)
    assert migrated.returncode == 0, migrated.stderr
    assert "copied 1 token(s)" in migrated.stdout and "(0 already there)" in migrated.stdout
    elsewhere = _cli_env(settings, tmp_path / "other-machine")  # no file store there
    issued = _ctxdb(["tokens", "issue", "--user", "bob", "--tenant", TENANT], elsewhere)
    assert issued.returncode == 0, issued.stderr
    new = issued.stdout.strip()
    # No cache: the revocation below is made by another process and must be seen at once.
    store = ElasticsearchTokenStore.from_settings(
        es_store_settings(settings, cache_s=0), make_client(settings)
    )
    assert (store.verify(old).user_id, store.verify(new).user_id) == ("alice", "bob")
    assert not (tmp_path / "other-machine" / "auth" / "tokens.json").exists()
    revoked = _ctxdb(["tokens", "revoke", token_id(old)], elsewhere)
    assert revoked.returncode == 0, revoked.stderr
    with pytest.raises(AuthError):
        store.verify(old)
    assert files.verify(old).user_id == "alice"  # the file is left as it was


def _closed_port_settings(settings: Settings) -> Settings:
    url = f"http://127.0.0.1:{free_port_pair()}"
    return es_store_settings(settings).replace(
        elasticsearch={"url": url, "max_retries": 0, "request_timeout": 5.0}
    )


def test_unreachable_cluster_is_a_503_never_an_accept_or_a_401(settings: Settings) -> None:
    """The token store on a closed port (a real refused connection): the Authenticator raises
    TokenStoreUnavailable, the HTTP API answers 503 with its one-line error body, and the CLI
    exits 3 with one `error:` line; nothing is accepted or refused as a bad token."""
    token = ElasticsearchTokenStore.from_settings(
        es_store_settings(settings), make_client(settings)
    ).issue("alice", tenant=TENANT)
    down = _closed_port_settings(settings)
    with pytest.raises(TokenStoreUnavailable, match="token store unavailable"):
        Authenticator(down, make_client).authenticate(token)
    with TestClient(create_app(down, load_model=False)) as http:
        answer = http.get("/v1/conversations", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 503
        assert answer.json()["error"] == "search_unavailable"
        mcp = http.post(
            "/mcp",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
        assert mcp.status_code == 503
    env = _cli_env(down, settings.home)
    env.update(ELASTICSEARCH_URL=down.elasticsearch.url, CTXDB_ELASTICSEARCH_MAX_RETRIES="0")
    issued = _ctxdb(["tokens", "issue", "--user", "bob", "--tenant", TENANT], env)
    assert issued.returncode == 3 and issued.stdout == ""
    assert issued.stderr.strip().startswith("error: token store unavailable")
    assert len(issued.stderr.strip().splitlines()) == 1, issued.stderr


def test_jwts_verify_without_the_token_store(settings: Settings) -> None:
    """With the Elasticsearch store configured, a JWT is still verified by its key alone: it
    works while the store's cluster is unreachable."""
    key = "s3cret-key-for-tests-only-0123456789"
    down = _closed_port_settings(settings).replace(auth={"jwt_key": key})
    claims = {"sub": "carol", "tenant": TENANT, "exp": int(time.time()) + 60}
    principal = Authenticator(down, make_client).authenticate(
        jwt.encode(claims, key, algorithm="HS256")
    )
    assert (principal.user_id, principal.tenant) == ("carol", TENANT)


@pytest.fixture
def two_servers(settings: Settings, tmp_path: Path) -> Iterator[list[str]]:
    """Two real `ctxdb serve` processes on two ports, each with its own home (two machines'
    worth: no shared file), sharing the Elasticsearch token store of the test's prefix."""
    processes, urls = [], []
    for name in ("a", "b"):
        port = free_port_pair()
        log = (tmp_path / f"serve-{name}.log").open("w")
        env = _cli_env(settings, tmp_path / f"home-{name}", CTXDB_EMBEDDING_THREADS="1")
        processes.append(
            subprocess.Popen([CTXDB, "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url, process in zip(urls, processes, strict=True):
            assert refused_within(lambda url=url: _healthy(url), deadline_s=60), (
                process.poll(),
                (tmp_path / "serve-a.log").read_text()[-2000:],
            )
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _status(url: str, token: str) -> int:
    return httpx.get(
        f"{url}/v1/conversations", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).status_code


@pytest.mark.slow
def test_two_serve_processes_share_issue_and_revocation(
    settings: Settings, tmp_path: Path, two_servers: list[str]
) -> None:
    """A token issued by the CLI on a third home authenticates on both servers; revoked there, it
    is a 401 on both within the cache time (1 s here) plus slack."""
    ensure_indices(make_client(settings), settings.elasticsearch.index_prefix)  # empty memory
    issuer = _cli_env(settings, tmp_path / "home-cli")
    issued = _ctxdb(["tokens", "issue", "--user", "alice", "--tenant", TENANT], issuer)
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    bogus = f"ctxdb_{token_id(token)}_{'x' * 43}"
    for url in two_servers:
        assert _status(url, token) == 200
        assert _status(url, bogus) == 401
    assert _ctxdb(["tokens", "revoke", token_id(token)], issuer).returncode == 0
    for url in two_servers:
        assert refused_within(lambda url=url: _status(url, token) == 401, deadline_s=1.0 + 5.0)
