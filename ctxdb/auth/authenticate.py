"""Which token store a process verifies against, and the Authenticator over it: a JWT when a
verification key is configured (a token with two dots), else the configured store.

Here, above both stores, so neither store module imports the other. The Elasticsearch client
comes from the caller (`connect`, normally `ctxdb.index.client.make_client`): auth imports no
index or search code, and a process on the file store never loads the Elasticsearch client. With
`CTXDB_AUTH_REQUIRE_TENANT` (the default) every principal needs a tenant: a JWT without a usable
tenant claim and a stored token issued without one are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxdb.auth.credentials import AuthError, TokenStore, TokenStoreProtocol
from ctxdb.contract.identity import Principal
from ctxdb.settings import Settings

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

Connect = Callable[[Settings], "Elasticsearch"]
"""Makes the Elasticsearch client of the shared token store; called only when that store is set."""


def open_token_store(settings: Settings, connect: Connect) -> TokenStoreProtocol:
    """The configured token store (`CTXDB_AUTH_TOKEN_STORE`): the local file, or the index
    `<prefix>-tokens` on the cluster `connect(settings)` reaches."""
    if settings.auth.token_store == "elasticsearch":
        # Imported here: the elasticsearch package loads only for the shared store.
        from ctxdb.auth.es_tokens import ElasticsearchTokenStore

        return ElasticsearchTokenStore.from_settings(settings, connect(settings))
    return TokenStore(settings.tokens_path)


class Authenticator:
    """Turns a bearer token into a Principal: JWT when a key is configured, else the configured
    token store."""

    def __init__(self, settings: Settings, connect: Connect) -> None:
        self.settings = settings
        self.store = open_token_store(settings, connect)

    def _verify_jwt(self, token: str, key: str) -> Principal:
        import jwt  # with cryptography, 40 ms of every start that checks no JWT (the hooks)

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
        if tenant is None and not s.auth.require_tenant:
            return Principal(user_id=user_id)
        if not isinstance(tenant, str) or not tenant.strip():
            raise AuthError(f"JWT claim {s.auth.jwt_tenant_claim!r} is missing or not a tenant id")
        return Principal(user_id=user_id, tenant=tenant)

    def authenticate(self, token: str | None) -> Principal:
        """The principal of a bearer token (JWT or local token); AuthError when it is missing,
        does not verify, or has no tenant while tenants are required."""
        if not token:
            raise AuthError("missing bearer token")
        key = self.settings.auth.jwt_key
        if token.count(".") == 2 and key is not None:
            return self._verify_jwt(token, key.get_secret_value())
        principal = self.store.verify(token)
        if self.settings.auth.require_tenant and not principal.tenant:
            raise AuthError("token has no tenant (issue a new one with --tenant)")
        return principal
