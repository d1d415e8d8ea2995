"""Hashed bearer tokens in an Elasticsearch index that several servers share.

`ctxdb serve` and `ctxdb mcp` processes on different machines that point at one cluster and
prefix (`CTXDB_AUTH_TOKEN_STORE=elasticsearch`) verify the same tokens: a token issued through
any of them works on all, and a revocation through any of them is refused by all within
`CTXDB_AUTH_TOKEN_CACHE_S` seconds (default 5), the time a server keeps a record it read.

One document per token in `<prefix>-tokens`, id = token id, with exactly the file store's record
(`StoredToken`): user id, tenant, label, creation time, the revoked flag, a random salt and
`sha256(salt || secret)`; the secret itself is never sent to the cluster. The index is created
explicitly with a strict mapping (one shard, the replicas of `CTXDB_ELASTICSEARCH_REPLICAS`,
applied in place to an index created earlier with others). A token is created
with `op_type=create` (a colliding id fails instead of overwriting) and read with a realtime GET,
so a record is visible to every server the moment its write returns. When the cluster cannot be
reached a read or write raises `TokenStoreUnavailable` (HTTP 503): never an accept, never a 401.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from elastic_transport import TransportError
from elasticsearch import (
    ApiError,
    BadRequestError,
    ConflictError,
    Elasticsearch,
    NotFoundError,
)
from pydantic import ValidationError

from ctxdb.auth.credentials import (
    StoredToken,
    TokenStoreUnavailable,
    check_token,
    is_token_id,
    new_token,
    split_token,
)
from ctxdb.contract.identity import Principal
from ctxdb.elastic.replicas import DEFAULT_REPLICAS, ensure_single_shard_index
from ctxdb.settings import Settings

_KEYWORD = {"type": "keyword"}
_STORED_ONLY = {"type": "keyword", "index": False, "doc_values": False}

MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "token_id": _KEYWORD,
        "user_id": _KEYWORD,
        "tenant": _KEYWORD,
        "salt": _STORED_ONLY,
        "digest": _STORED_ONLY,
        "label": _KEYWORD,
        "created_at": {"type": "date"},
        "revoked": {"type": "boolean"},
    },
}
"""A token record: `StoredToken`'s fields; salt and digest are kept, never searched."""

CACHE_MAX = 10_000
"""Records a server keeps at most; past it the expired ones are dropped, then all."""


def token_index(prefix: str) -> str:
    return f"{prefix}-tokens"


def _unavailable(action: str, exc: Exception) -> TokenStoreUnavailable:
    return TokenStoreUnavailable(
        f"token store unavailable: cannot {action} <prefix>-tokens on Elasticsearch"
        f" ({type(exc).__name__})"
    )


class ElasticsearchTokenStore:
    """Hashed bearer tokens in `<prefix>-tokens`, each record cached for `cache_s` seconds."""

    def __init__(
        self,
        client: Elasticsearch,
        prefix: str,
        cache_s: float = 5.0,
        replicas: str = DEFAULT_REPLICAS,
    ) -> None:
        self.client = client
        self.index = token_index(prefix)
        self.cache_s = cache_s
        self.replicas = replicas
        self._cache: dict[str, tuple[float, StoredToken]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, client: Elasticsearch) -> ElasticsearchTokenStore:
        """The store of the settings' prefix, cache time and replicas, on `client`."""
        return cls(
            client,
            settings.elasticsearch.index_prefix,
            settings.auth.token_cache_s,
            settings.elasticsearch.replicas,
        )

    def ensure_index(self) -> None:
        """Create the token index with its mapping and replicas, or bring an existing one's
        replicas to `replicas` (another server creating it at the same time is fine)."""
        try:
            ensure_single_shard_index(self.client, self.index, MAPPING, self.replicas)
        except BadRequestError:
            raise  # a refused mapping or setting is a fault here, not an unavailable store
        except (ApiError, TransportError) as exc:
            raise _unavailable("create", exc) from exc

    def put(self, stored: StoredToken) -> bool:
        """Store a record under its token id; False (nothing written) when that id exists."""
        self.ensure_index()
        try:
            self.client.create(
                index=self.index, id=stored.token_id, document=stored.model_dump(mode="json")
            )
        except ConflictError:
            return False
        except (ApiError, TransportError) as exc:
            raise _unavailable("write", exc) from exc
        return True

    def issue(self, user_id: str, tenant: str | None = None, label: str | None = None) -> str:
        """Create a token for `user_id`; returns the plaintext token (shown once, never stored)."""
        token, stored = new_token(user_id, tenant, label)
        if not self.put(stored):
            raise RuntimeError(f"token id {stored.token_id} exists already; issue again")
        return token

    def revoke(self, token_id: str) -> bool:
        """Mark a token revoked (every server refuses it within `cache_s`); False when the store
        has no such token (an id of another shape is never one)."""
        if not is_token_id(token_id):
            return False
        try:
            self.client.update(index=self.index, id=token_id, doc={"revoked": True})
        except NotFoundError:
            return False
        except (ApiError, TransportError) as exc:
            raise _unavailable("write", exc) from exc
        finally:
            with self._lock:
                self._cache.pop(token_id, None)
        return True

    def _read(self, token_id: str) -> StoredToken | None:
        """The record of `token_id` (realtime GET), None when the index or the id is unknown."""
        try:
            found = self.client.get(index=self.index, id=token_id)
        except NotFoundError:
            return None
        except (ApiError, TransportError) as exc:
            raise _unavailable("read", exc) from exc
        try:
            return StoredToken.model_validate(found["_source"])
        except ValidationError as exc:  # a damaged record: the store is at fault, not the token
            raise _unavailable("read a valid record from", exc) from exc

    def _record(self, token_id: str) -> StoredToken | None:
        """The record of `token_id`, from the cache while it is younger than `cache_s`."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(token_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        stored = self._read(token_id)
        if stored is not None and self.cache_s > 0:
            with self._lock:
                if len(self._cache) >= CACHE_MAX:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    if len(self._cache) >= CACHE_MAX:
                        self._cache.clear()
                self._cache[token_id] = (now + self.cache_s, stored)
        return stored

    def verify(self, token: str) -> Principal:
        """The principal of a valid, unrevoked token; AuthError (always `BAD_TOKEN`) otherwise,
        TokenStoreUnavailable when the record cannot be read."""
        token_id, secret = split_token(token)
        return check_token(self._record(token_id), token_id, secret)


def migrate(records: list[StoredToken], store: ElasticsearchTokenStore) -> tuple[int, int]:
    """Copy `records` (a file store's) into `store`: `(copied, already there)`. A record whose id
    is there already is left as it is, except that a revocation is carried over; running it
    again copies nothing."""
    copied = 0
    for stored in records:
        if store.put(stored):
            copied += 1
        elif stored.revoked:
            store.revoke(stored.token_id)
    return copied, len(records) - copied
