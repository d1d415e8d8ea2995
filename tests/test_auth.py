"""Bearer-token authentication: hashed local token store and JWT verification."""

from __future__ import annotations

import json
import time

import jwt
import pytest

from ctxdb.serve.auth import Authenticator, AuthError, TokenStore
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
    with pytest.raises(AuthError, match="invalid token"):
        store.verify(f"ctxdb_{alice_id}_{bob_secret}")


@pytest.mark.parametrize(
    "bad", ["", "ctxdb", "ctxdb__x", "bearer abc", "ctxdb_nosuchid_secret", "x.y.z"]
)
def test_malformed_or_unknown_tokens_are_rejected(tmp_path, bad: str) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    store.issue("alice")
    with pytest.raises(AuthError):
        Authenticator(
            Settings(home=tmp_path, auth={"tokens_path": tmp_path / "tokens.json"})
        ).authenticate(bad)
    with pytest.raises(AuthError):
        store.verify(bad)


def test_revoked_token_stops_working(tmp_path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    token = store.issue("alice")
    assert store.revoke(token.split("_")[1]) is True
    with pytest.raises(AuthError, match="revoked"):
        store.verify(token)
    assert store.revoke("nosuch") is False


def test_missing_token_is_rejected(tmp_path) -> None:
    with pytest.raises(AuthError, match="missing"):
        Authenticator(Settings(home=tmp_path)).authenticate(None)


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
    principal = Authenticator(settings).authenticate(token)
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
        Authenticator(settings).authenticate(token)


def test_unsigned_jwt_is_rejected(tmp_path) -> None:
    token = jwt.encode(_claims(), None, algorithm="none")
    with pytest.raises(AuthError):
        Authenticator(_jwt_settings(tmp_path)).authenticate(token)
