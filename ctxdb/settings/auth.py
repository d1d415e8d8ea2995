"""The auth group (`CTXDB_AUTH_*`): the bearer tokens and JWTs the server accepts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from ctxdb.settings.base import GroupSettings, group_config


class AuthSettings(GroupSettings):
    """Bearer tokens and JWTs the server accepts (the token a client runs as is `CTXDB_TOKEN`)."""

    model_config = group_config("CTXDB_AUTH_")

    token_store: Literal["file", "elasticsearch"] = Field(
        default="file",
        description="Where hashed bearer tokens live: the local JSON file (tokens_path), or the"
        " index <prefix>-tokens on the configured cluster, shared by every server.",
    )
    token_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a server keeps a token record read from Elasticsearch: a revocation"
        " reaches every other server within this time (0: read on every request).",
    )
    jwt_key: SecretStr | None = Field(
        default=None, description="JWT verification key (HS secret or PEM public key)."
    )
    jwt_algorithms: list[str] = Field(
        default_factory=lambda: ["HS256"], description="RS256/ES256 need pyjwt[crypto]."
    )
    jwt_audience: str | None = Field(default=None)
    jwt_issuer: str | None = Field(default=None)
    jwt_user_claim: str = Field(default="sub")
    jwt_tenant_claim: str = Field(default="tenant")
    require_tenant: bool = Field(
        default=True,
        description="Every principal needs a tenant: a JWT without a usable tenant claim or a "
        "stored token without one is a 401, and `ctxdb tokens issue` needs --tenant "
        "(false: one-tenant deployments; a principal without tenant sees its user id in every "
        "tenant).",
    )
