"""Principals and bearer-token authentication: a hashed local token store, or JWTs with a set key.

Tokens issued by the local store look like `ctxdb_<id>_<secret>`; only `sha256(salt || secret)`
is stored (the secret is 32 random bytes, so a fast hash is enough; comparison is constant-time).
A token with two dots is treated as a JWT when a verification key is configured.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

import jwt
from pydantic import BaseModel

from ctxdb.contract.identity import Principal
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

TOKEN_PREFIX = "ctxdb"


class AuthError(PermissionError):
    """Missing, malformed, unknown, revoked or invalid credentials (HTTP 401)."""


class StoredToken(BaseModel):
    token_id: str
    user_id: str
    tenant: str | None = None
    salt: str
    digest: str
    label: str | None = None
    created_at: datetime
    revoked: bool = False


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


class TokenStore:
    """Hashed bearer tokens in a JSON file (the embedded default)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, StoredToken]:
        if not self.path.exists():
            return {}
        raw = json.loads(self.path.read_text())
        return {t["token_id"]: StoredToken.model_validate(t) for t in raw.get("tokens", [])}

    def _save(self, tokens: dict[str, StoredToken]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        body = {"tokens": [t.model_dump(mode="json") for t in tokens.values()]}
        tmp.write_text(json.dumps(body, indent=2))
        os.chmod(tmp, 0o600)
        tmp.replace(self.path)

    def issue(self, user_id: str, tenant: str | None = None, label: str | None = None) -> str:
        """Create a token for `user_id`; returns the plaintext token (shown once, never stored)."""
        if not user_id:
            raise ValueError("user_id must not be empty")
        tokens = self._load()
        token_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        tokens[token_id] = StoredToken(
            token_id=token_id,
            user_id=user_id,
            tenant=tenant,
            salt=salt,
            digest=_digest(salt, secret),
            label=label,
            created_at=datetime.now(UTC),
        )
        self._save(tokens)
        return f"{TOKEN_PREFIX}_{token_id}_{secret}"

    def revoke(self, token_id: str) -> bool:
        tokens = self._load()
        if token_id not in tokens:
            return False
        tokens[token_id].revoked = True
        self._save(tokens)
        return True

    def verify(self, token: str) -> Principal:
        """The principal of a valid, unrevoked token; AuthError otherwise."""
        prefix, _, rest = token.partition("_")
        token_id, _, secret = rest.partition("_")
        if prefix != TOKEN_PREFIX or not token_id or not secret:
            raise AuthError("malformed token")
        stored = self._load().get(token_id)
        if stored is None or stored.revoked:
            raise AuthError("unknown or revoked token")
        if not hmac.compare_digest(stored.digest, _digest(stored.salt, secret)):
            raise AuthError("invalid token")
        return Principal(user_id=stored.user_id, tenant=stored.tenant, token_id=token_id)


class Authenticator:
    """Turns a bearer token into a Principal: JWT when a key is configured, else the token store."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = TokenStore(settings.tokens_path)

    def _verify_jwt(self, token: str, key: str) -> Principal:
        s = self.settings
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=s.auth.jwt_algorithms,
                audience=s.auth.jwt_audience,
                issuer=s.auth.jwt_issuer,
                options={"require": ["exp", s.auth.jwt_user_claim]},
            )
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid JWT: {exc}") from exc
        user_id = claims.get(s.auth.jwt_user_claim)
        if not isinstance(user_id, str) or not user_id:
            raise AuthError(f"JWT claim {s.auth.jwt_user_claim!r} is missing or empty")
        tenant = claims.get(s.auth.jwt_tenant_claim)
        return Principal(user_id=user_id, tenant=tenant if isinstance(tenant, str) else None)

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthError("missing bearer token")
        key = self.settings.auth.jwt_key
        if token.count(".") == 2 and key is not None:
            return self._verify_jwt(token, key.get_secret_value())
        return self.store.verify(token)
