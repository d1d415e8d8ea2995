"""Bearer tokens and the local file store: the token format, its salted hash, and the checks
every store shares.

Tokens issued by a store look like `ctxdb_<id>_<secret>`; only `sha256(salt || secret)` is stored
(the secret is 32 random bytes, so a fast hash is enough; comparison is constant-time). The store
is a local JSON file (`TokenStore`, the embedded default) or an Elasticsearch index that several
servers share (`ElasticsearchTokenStore` in `ctxdb.auth.es_tokens`); `CTXDB_AUTH_TOKEN_STORE`
picks one (`open_token_store` in `ctxdb.auth.authenticate`, which also verifies JWTs). In the file
store, issuing and revoking hold an exclusive `fcntl` lock on `<store>.lock` around the
read-modify-write and replace the store atomically through a unique temporary file, so concurrent
CLI runs neither lose tokens nor undo revocations, and a reader never sees a half-written file.
Every failure of a stored token answers the same message, so the reply does not tell a known
token id from an unknown one.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from ctxdb.contract.identity import Principal
from ctxdb.errors import SearchUnavailable

log = logging.getLogger(__name__)

TOKEN_PREFIX = "ctxdb"
TOKEN_ID_BYTES = 8
"""Random bytes of a token id (its hex is the id)."""
BAD_TOKEN = "invalid, unknown or revoked token"
"""The one answer for every local token that does not verify (malformed, unknown id, wrong
secret, revoked): the reply never tells which."""


class AuthError(PermissionError):
    """Missing, malformed, unknown, revoked or invalid credentials (HTTP 401)."""


class TokenStoreUnavailable(SearchUnavailable):
    """The shared token store cannot be read or written (HTTP 503, CLI exit 3): a token is never
    accepted, nor refused as invalid, while its record cannot be read."""


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


def new_token(
    user_id: str, tenant: str | None = None, label: str | None = None
) -> tuple[str, StoredToken]:
    """A fresh token: the plaintext (shown once) and the record to store (its salted hash)."""
    if not user_id:
        raise ValueError("user_id must not be empty")
    if tenant is not None and not tenant.strip():
        raise ValueError("tenant must not be blank")
    token_id = secrets.token_hex(TOKEN_ID_BYTES)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    stored = StoredToken(
        token_id=token_id,
        user_id=user_id,
        tenant=tenant,
        salt=salt,
        digest=_digest(salt, secret),
        label=label,
        created_at=datetime.now(UTC),
    )
    return f"{TOKEN_PREFIX}_{token_id}_{secret}", stored


def is_token_id(token_id: str) -> bool:
    """Whether `token_id` has the shape `new_token` gives ids: lower-case hex of the set length.
    Anything else is never looked up, so a 5,000-character id is a bad token, not a store fault."""
    return len(token_id) == 2 * TOKEN_ID_BYTES and all(c in "0123456789abcdef" for c in token_id)


def split_token(token: str) -> tuple[str, str]:
    """`(token_id, secret)` of a `ctxdb_<id>_<secret>` token; AuthError (`BAD_TOKEN`) otherwise."""
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not is_token_id(token_id) or not secret:
        raise AuthError(BAD_TOKEN)
    return token_id, secret


def check_token(stored: StoredToken | None, token_id: str, secret: str) -> Principal:
    """The principal of `stored` when `secret` matches it and it is not revoked; AuthError
    (`BAD_TOKEN`) otherwise, after the same hashing work for an unknown id."""
    if stored is None:
        _digest("00", secret)  # the same work as a known id, so timing does not tell either
        raise AuthError(BAD_TOKEN)
    if not hmac.compare_digest(stored.digest, _digest(stored.salt, secret)) or stored.revoked:
        raise AuthError(BAD_TOKEN)
    return Principal(user_id=stored.user_id, tenant=stored.tenant, token_id=token_id)


class TokenStoreProtocol(Protocol):
    """What the CLI and the Authenticator need of a token store (file or Elasticsearch)."""

    def issue(self, user_id: str, tenant: str | None = None, label: str | None = None) -> str: ...

    def revoke(self, token_id: str) -> bool: ...

    def verify(self, token: str) -> Principal: ...


class TokenStore:
    """Hashed bearer tokens in a JSON file (the embedded default)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def tokens(self) -> list[StoredToken]:
        """Every stored record (revoked ones too)."""
        return list(self._load().values())

    def _load(self) -> dict[str, StoredToken]:
        if not self.path.exists():
            return {}
        raw = json.loads(self.path.read_text())
        return {t["token_id"]: StoredToken.model_validate(t) for t in raw.get("tokens", [])}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the store's exclusive lock (`<store>.lock`, released when the fd closes)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _save(self, tokens: dict[str, StoredToken]) -> None:
        """Write the store to a unique temporary file (mode 600), fsync it, and rename it over
        the store: readers see the old file or the new one, never a torn one."""
        body = {"tokens": [t.model_dump(mode="json") for t in tokens.values()]}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(body, indent=2))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _update(self, change: Callable[[dict[str, StoredToken]], None]) -> None:
        """Apply `change` to the stored tokens under the lock (read, change, atomic replace)."""
        with self._locked():
            tokens = self._load()
            change(tokens)
            self._save(tokens)

    def issue(self, user_id: str, tenant: str | None = None, label: str | None = None) -> str:
        """Create a token for `user_id`; returns the plaintext token (shown once, never stored)."""
        token, stored = new_token(user_id, tenant, label)
        self._update(lambda tokens: tokens.__setitem__(stored.token_id, stored))
        return token

    def revoke(self, token_id: str) -> bool:
        """Mark a token revoked; False when the store has no such token."""
        found: list[str] = []

        def mark(tokens: dict[str, StoredToken]) -> None:
            if token_id in tokens:
                tokens[token_id].revoked = True
                found.append(token_id)

        self._update(mark)
        return bool(found)

    def verify(self, token: str) -> Principal:
        """The principal of a valid, unrevoked token; AuthError (always `BAD_TOKEN`) otherwise."""
        token_id, secret = split_token(token)
        return check_token(self._load().get(token_id), token_id, secret)
