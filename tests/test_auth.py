"""Bearer-token authentication: hashed local token store and JWT verification."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import jwt
import pytest
from pydantic import ValidationError

from ctxdb.auth.authenticate import Authenticator, open_token_store
from ctxdb.auth.credentials import BAD_TOKEN, AuthError, TokenStore
from ctxdb.auth.es_tokens import ElasticsearchTokenStore
from ctxdb.index.client import make_client
from ctxdb.settings import Settings


def test_issued_token_verifies_to_its_principal_and_is_stored_hashed(tmp_path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    token = store.issue("alice", tenant="t1", label="laptop")
    principal = store.verify(token)
    assert (principal.user_id, principal.tenant) == ("alice", "t1")
    secret = token.split("_", 2)[2]
    raw = (tmp_path / "tokens.json").read_text()
    assert secret not in raw
    stored = json.loads(raw)["tokens"][0]
    assert stored["user_id"] == "alice" and len(stored["digest"]) == 64
    assert (tmp_path / "tokens.json").stat().st_mode & 0o077 == 0


def test_two_tokens_for_two_users_do_not_mix(tmp_path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    alice, bob = store.issue("alice"), store.issue("bob")
    assert store.verify(alice).user_id == "alice"
    assert store.verify(bob).user_id == "bob"
    alice_id, bob_secret = alice.split("_")[1], bob.split("_", 2)[2]
    with pytest.raises(AuthError, match=BAD_TOKEN):
        store.verify(f"ctxdb_{alice_id}_{bob_secret}")


@pytest.mark.parametrize(
    "bad", ["", "ctxdb", "ctxdb__x", "bearer abc", "ctxdb_nosuchid_secret", "x.y.z"]
)
def test_malformed_or_unknown_tokens_are_rejected(tmp_path, bad: str) -> None:
    store = TokenStore(Settings(home=tmp_path).tokens_path)
    store.issue("alice")
    with pytest.raises(AuthError):
        Authenticator(Settings(home=tmp_path), make_client).authenticate(bad)
    with pytest.raises(AuthError):
        store.verify(bad)


def test_revoked_token_stops_working(tmp_path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    token = store.issue("alice")
    assert store.revoke(token.split("_")[1]) is True
    with pytest.raises(AuthError, match="revoked"):
        store.verify(token)
    assert store.revoke("nosuch") is False


def test_the_file_store_is_the_default_and_the_setting_picks_elasticsearch(tmp_path) -> None:
    """Building a store reaches no cluster; CTXDB_AUTH_TOKEN_STORE names one of two stores."""
    assert isinstance(Authenticator(Settings(home=tmp_path), make_client).store, TokenStore)
    shared = Settings(
        home=tmp_path,
        elasticsearch={"index_prefix": "acme"},
        auth={"token_store": "elasticsearch", "token_cache_s": 0},
    )
    store = open_token_store(shared, make_client)
    assert isinstance(store, ElasticsearchTokenStore)
    assert (store.index, store.cache_s) == ("acme-tokens", 0)
    with pytest.raises(ValidationError, match="token_store"):
        Settings(home=tmp_path, auth={"token_store": "redis"})


def test_missing_token_is_rejected(tmp_path) -> None:
    with pytest.raises(AuthError, match="missing"):
        Authenticator(Settings(home=tmp_path), make_client).authenticate(None)


def _jwt_settings(tmp_path) -> Settings:
    return Settings(
        home=tmp_path,
        auth={
            "jwt_key": "s3cret-key-for-tests-only-0123456789",
            "jwt_algorithms": ["HS256"],
            "jwt_audience": "ctxdb",
            "jwt_issuer": "https://idp.example",
        },
    )


def _claims(**over) -> dict:
    claims = {
        "sub": "carol",
        "tenant": "t9",
        "aud": "ctxdb",
        "iss": "https://idp.example",
        "exp": int(time.time()) + 60,
    }
    claims.update(over)
    return claims


def test_jwt_with_configured_key_gives_its_subject(tmp_path) -> None:
    settings = _jwt_settings(tmp_path)
    token = jwt.encode(_claims(), settings.auth.jwt_key.get_secret_value(), algorithm="HS256")
    principal = Authenticator(settings, make_client).authenticate(token)
    assert (principal.user_id, principal.tenant) == ("carol", "t9")


@pytest.mark.parametrize(
    "claims,key",
    [
        (_claims(exp=int(time.time()) - 10), None),  # expired
        (_claims(aud="other"), None),  # wrong audience
        (_claims(iss="https://evil.example"), None),  # wrong issuer
        ({k: v for k, v in _claims().items() if k != "exp"}, None),  # no expiry
        ({k: v for k, v in _claims().items() if k != "sub"}, None),  # no subject
        (_claims(), "another-key-another-key-another-key!"),  # wrong signature
    ],
)
def test_invalid_jwts_are_rejected(tmp_path, claims: dict, key: str | None) -> None:
    settings = _jwt_settings(tmp_path)
    token = jwt.encode(claims, key or settings.auth.jwt_key.get_secret_value(), algorithm="HS256")
    with pytest.raises(AuthError):
        Authenticator(settings, make_client).authenticate(token)


def test_unsigned_jwt_is_rejected(tmp_path) -> None:
    token = jwt.encode(_claims(), None, algorithm="none")
    with pytest.raises(AuthError):
        Authenticator(_jwt_settings(tmp_path), make_client).authenticate(token)


def _token_settings(tmp_path, **auth) -> Settings:
    return Settings(home=tmp_path, auth=auth)


def test_finding_22_every_bad_local_token_gets_the_same_401_message(tmp_path) -> None:
    """A wrong secret for a known token id, an unknown id, a revoked token and a malformed one
    all answer one message, so the reply does not tell whether a token id exists."""
    store = TokenStore(_token_settings(tmp_path).tokens_path)
    alice, revoked = store.issue("alice", tenant="t1"), store.issue("bob", tenant="t1")
    store.revoke(revoked.split("_")[1])
    known_id = alice.split("_")[1]
    authenticator = Authenticator(_token_settings(tmp_path), make_client)
    bad = {
        "wrong secret, known id": f"ctxdb_{known_id}_{'x' * 43}",
        "unknown id": f"ctxdb_{'0' * 16}_{'x' * 43}",
        "revoked": revoked,
        "malformed": "ctxdb_nosecret",
    }
    messages = set()
    for token in bad.values():
        with pytest.raises(AuthError) as refused:
            authenticator.authenticate(token)
        messages.add(str(refused.value))
    assert messages == {BAD_TOKEN}


@pytest.mark.parametrize(
    "tenant", ["<missing>", "", "   ", None, ["t1"], {"id": "t1"}, 7], ids=repr
)
def test_finding_2_jwt_without_a_usable_tenant_claim_is_401(tmp_path, tenant) -> None:
    settings = _jwt_settings(tmp_path)
    claims = {k: v for k, v in _claims(tenant=tenant).items() if v != "<missing>"}
    token = jwt.encode(claims, settings.auth.jwt_key.get_secret_value(), algorithm="HS256")
    with pytest.raises(AuthError, match="'tenant' is missing or not a tenant id"):
        Authenticator(settings, make_client).authenticate(token)


def test_finding_2_jwt_without_tenant_only_where_tenants_are_not_required(tmp_path) -> None:
    settings = _jwt_settings(tmp_path)
    one_tenant = settings.replace(auth={"require_tenant": False})
    key = settings.auth.jwt_key.get_secret_value()
    missing = jwt.encode({k: v for k, v in _claims().items() if k != "tenant"}, key, "HS256")
    principal = Authenticator(one_tenant, make_client).authenticate(missing)
    assert (principal.user_id, principal.tenant) == ("carol", None)
    with pytest.raises(AuthError, match="not a tenant id"):  # malformed is never dropped
        Authenticator(one_tenant, make_client).authenticate(
            jwt.encode(_claims(tenant=["t1"]), key, "HS256")
        )


def test_finding_2_stored_token_without_tenant_is_401(tmp_path) -> None:
    store = TokenStore(_token_settings(tmp_path).tokens_path)
    tenantless, scoped = store.issue("alice"), store.issue("alice", tenant="t1")
    with pytest.raises(AuthError, match="token has no tenant"):
        Authenticator(_token_settings(tmp_path), make_client).authenticate(tenantless)
    assert Authenticator(_token_settings(tmp_path), make_client).authenticate(scoped).tenant == "t1"
    one_tenant = _token_settings(tmp_path, require_tenant=False)
    assert Authenticator(one_tenant, make_client).authenticate(tenantless).tenant is None
    with pytest.raises(ValueError, match="blank"):
        store.issue("alice", tenant=" ")


WORKERS, PER_WORKER = 6, 15


def _issue_many(path: str, start, out) -> None:
    store = TokenStore(Path(path))
    start.wait()
    out.put([store.issue(f"user{i}", tenant="t1") for i in range(PER_WORKER)])


def _revoke_all(path: str, token_ids: list[str], start, out) -> None:
    store = TokenStore(Path(path))
    start.wait()
    out.put([store.revoke(token_id) for token_id in token_ids])


def test_finding_5_concurrent_issue_and_revoke_lose_nothing(tmp_path) -> None:
    """Six processes issue tokens while a seventh revokes earlier ones, all released at once:
    every issued token verifies, every revocation holds, the store parses and no temporary file
    is left (the old unlocked read-modify-write through one shared temp file lost tokens,
    undid revocations and could tear the file)."""
    path = tmp_path / "tokens.json"
    store = TokenStore(path)
    earlier = [store.issue(f"old{i}", tenant="t1") for i in range(PER_WORKER)]
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(WORKERS + 1), context.Queue()
    workers = [
        context.Process(target=_issue_many, args=(str(path), start, out)) for _ in range(WORKERS)
    ]
    ids = [token.split("_")[1] for token in earlier]
    workers.append(context.Process(target=_revoke_all, args=(str(path), ids, start, out)))
    for worker in workers:
        worker.start()
    for worker in workers:  # each result is a few KB: it fits the queue's pipe before join
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0] * len(workers)
    results = [out.get(timeout=10) for _ in workers]
    issued = [token for result in results for token in result if isinstance(token, str)]
    assert len(issued) == WORKERS * PER_WORKER
    assert [r for r in results if not isinstance(r[0], str)] == [[True] * PER_WORKER]
    stored = json.loads(path.read_text())["tokens"]
    assert len(stored) == len(earlier) + len(issued)
    for token in issued:
        assert store.verify(token).tenant == "t1"
    for token in earlier:
        with pytest.raises(AuthError):
            store.verify(token)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.json", "tokens.json.lock"]
    assert path.stat().st_mode & 0o077 == 0
