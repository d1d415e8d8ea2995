"""The HTTP API through FastAPI's test client: token auth, same semantics as the Python API,
404 for other users' conversations, turns and refs, 400 missing_query, OpenAPI."""

from __future__ import annotations

import time

import jwt
import pytest
from conftest_search import SearchEnv
from fastapi.testclient import TestClient
from pydantic import SecretStr

from ctxdb.search import SearchRequest
from ctxdb.serve.http import create_app

pytestmark = [pytest.mark.es, pytest.mark.model]

BOB_PATH = "bob/conv_c-bob/turn_t1/files/salaries.xlsx"


@pytest.fixture(scope="module")
def http(search_env: SearchEnv) -> TestClient:
    return TestClient(
        create_app(search_env.settings, search_env.client, search_env.service.embedder)
    )


def auth(env: SearchEnv, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.tokens[user]}"}


def test_healthz_and_openapi_need_no_token(http: TestClient) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "elasticsearch": "green"}
    spec = http.get("/openapi.json").json()
    assert {
        "/v1/search",
        "/v1/conversations",
        "/v1/conversations/{conversation_id}/turns/{turn_id}",
        "/v1/pull",
    } <= set(spec["paths"])
    assert "SearchRequest" in spec["components"]["schemas"]


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer ctxdb_0000_xxxx", "Basic YTpi"])
def test_requests_without_a_valid_token_are_401(http: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = http.post("/v1/search", json={"query": "openpyxl"}, headers=headers)
    assert response.status_code == 401
    assert http.get("/v1/conversations", headers=headers).status_code == 401
    assert (
        http.get(
            "/v1/pull", params={"ref": "conv:fi:conv_c-sheets.turn_t1.files/x"}, headers=headers
        ).status_code
        == 401
    )


def test_search_matches_the_python_api(http: TestClient, search_env: SearchEnv) -> None:
    body = {"query": "KeyError: 'Worksheet Sheet3 does not exist.'", "explain": True}
    response = http.post("/v1/search", json=body, headers=auth(search_env, "alice"))
    assert response.status_code == 200
    data = response.json()
    python = search_env.service.search(search_env.alice, SearchRequest(**body))
    assert [(h["conversation_id"], h["turn_id"]) for h in data["hits"]] == [
        (h.conversation_id, h.turn_id) for h in python.hits
    ]
    assert data["hits"][0]["turn_id"] == "t2"
    assert data["hits"][0]["explain"]["arms"]["lexical"]["rank"] == 1
    assert data["hits"][0]["snippets"][0]["text"].startswith("Now it fails with KeyError")


def test_the_token_decides_the_user(http: TestClient, search_env: SearchEnv) -> None:
    body = {"query": "openpyxl payroll secret salaries", "top_k": 50}
    alice = http.post("/v1/search", json=body, headers=auth(search_env, "alice")).json()
    bob = http.post("/v1/search", json=body, headers=auth(search_env, "bob")).json()
    assert "c-bob" not in {h["conversation_id"] for h in alice["hits"]}
    assert bob["hits"][0]["conversation_id"] == "c-bob"
    # a user_id smuggled into the body is not part of the contract: refused, nothing searched
    smuggled = http.post(
        "/v1/search", json={**body, "user_id": "bob"}, headers=auth(search_env, "alice")
    )
    assert smuggled.status_code == 422 and "user_id" in smuggled.text
    assert "c-bob" not in smuggled.text


def test_missing_query_is_400(http: TestClient, search_env: SearchEnv) -> None:
    response = http.post("/v1/search", json={"query": " "}, headers=auth(search_env, "alice"))
    assert response.status_code == 400
    assert response.json()["error"] == "missing_query"
    invalid = http.post(
        "/v1/search", json={"query": "x", "scope": "galaxy"}, headers=auth(search_env, "alice")
    )
    assert invalid.status_code == 422


def test_other_users_conversation_is_404_everywhere(
    http: TestClient, search_env: SearchEnv
) -> None:
    headers = auth(search_env, "alice")
    scoped = http.post(
        "/v1/search",
        json={"query": "payroll", "scope": "conversation", "conversation_id": "c-bob"},
        headers=headers,
    )
    assert scoped.status_code == 404 and "hits" not in scoped.json()
    nth = http.post("/v1/search", json={"conversation_id": "c-bob", "ordinal": 1}, headers=headers)
    assert nth.status_code == 404
    assert http.get("/v1/conversations/c-bob/turns/t1", headers=headers).status_code == 404
    # a conversation that does not exist at all answers the same way
    missing = http.get("/v1/conversations/c-nobody/turns/t1", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert (
        http.get("/v1/conversations/c-bob/turns/t1", headers=auth(search_env, "bob")).status_code
        == 200
    )


def test_conversations_and_turn(http: TestClient, search_env: SearchEnv) -> None:
    headers = auth(search_env, "alice")
    listing = http.get("/v1/conversations", params={"limit": 2}, headers=headers).json()
    assert [c["conversation_id"] for c in listing["conversations"]] == ["c-k8s", "c-zebra-new"]
    assert listing["next_offset"] == 2
    following = http.get("/v1/conversations", params={"limit": 2, "offset": 2}, headers=headers)
    assert [c["conversation_id"] for c in following.json()["conversations"]] == [
        "c-cook",
        "c-sheets",
    ]
    for bad in ({"offset": -1}, {"offset": 10_000}):
        assert http.get("/v1/conversations", params=bad, headers=headers).status_code == 422
    turn = http.get("/v1/conversations/c-sheets/turns/t2", headers=headers).json()
    assert turn["files"][0]["ref"] == "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx"
    assert http.get("/v1/conversations", params={"limit": 0}, headers=headers).status_code == 422


def test_pull_owner_only_and_no_traversal(http: TestClient, search_env: SearchEnv) -> None:
    headers = auth(search_env, "alice")
    ok = http.get(
        "/v1/pull",
        params={"ref": "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx"},
        headers=headers,
    )
    assert ok.status_code == 200 and ok.content == b"bytes of files/fixed.xlsx for alice"
    assert "fixed.xlsx" in ok.headers["content-disposition"]
    bob_ref = {"ref": "conv:fi:conv_c-bob.turn_t1.files/salaries.xlsx"}
    assert http.get("/v1/pull", params=bob_ref, headers=headers).status_code == 404
    assert http.get("/v1/pull", params=bob_ref, headers=auth(search_env, "bob")).status_code == 200
    traversal = http.get(
        "/v1/pull",
        params={"ref": "conv:fi:conv_c-sheets.turn_t1.files/../../../../" + BOB_PATH},
        headers=headers,
    )
    assert traversal.status_code == 400 and traversal.json()["error"] == "invalid_ref"


def test_jwt_principal(search_env: SearchEnv) -> None:
    key = "jwt-test-key-0123456789-abcdefghij"
    settings = search_env.settings.replace(
        auth={"jwt_key": SecretStr(key), "jwt_algorithms": ["HS256"]}
    )
    client = TestClient(create_app(settings, search_env.client, load_model=False))
    token = jwt.encode(
        {"sub": "bob", "tenant": "t1", "exp": int(time.time()) + 60}, key, algorithm="HS256"
    )
    response = client.post(
        "/v1/search",
        json={"query": "payroll salaries"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200
    assert response.json()["hits"][0]["conversation_id"] == "c-bob"
    assert any("semantic_unavailable" in w for w in response.json()["warnings"])
    forged = jwt.encode(
        {"sub": "bob", "exp": int(time.time()) + 60},
        "wrong-key-wrong-key-wrong-key-00",
        algorithm="HS256",
    )
    assert (
        client.post(
            "/v1/search", json={"query": "x"}, headers={"Authorization": f"Bearer {forged}"}
        ).status_code
        == 401
    )


def test_finding_2_jwt_without_tenant_claim_is_401(search_env: SearchEnv) -> None:
    """Without a tenant the identity filter would match bob's user id in every tenant."""
    key = "jwt-test-key-0123456789-abcdefghij"
    settings = search_env.settings.replace(
        auth={"jwt_key": SecretStr(key), "jwt_algorithms": ["HS256"]}
    )
    client = TestClient(create_app(settings, search_env.client, load_model=False))
    exp = int(time.time()) + 60
    for tenant in ({}, {"tenant": ""}, {"tenant": None}, {"tenant": ["t1"]}, {"tenant": {}}):
        token = jwt.encode({"sub": "bob", "exp": exp, **tenant}, key, algorithm="HS256")
        response = client.post(
            "/v1/search", json={"query": "payroll"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 401, tenant
        assert "'tenant' is missing or not a tenant id" in response.json()["detail"]
