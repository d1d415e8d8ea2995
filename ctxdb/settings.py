"""The one settings object every ctxdb component reads (environment variables; see docs)."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class RetentionRule(BaseModel):
    """A TTL override: rows matching every set field live `days` days (most specific rule wins)."""

    tenant: str | None = None
    app: str | None = None
    role: str | None = None
    days: int = Field(gt=0)


def _default_home() -> Path:
    return Path(os.getcwd()) / "var"


class Settings(BaseSettings):
    """Configuration for storage, search, embedding and the embedded Elasticsearch node.

    Every field can be set from the environment: `CTXDB_<FIELD>` (e.g. `CTXDB_HOME`), except the
    Elasticsearch connection, which uses the conventional `ELASTICSEARCH_*` names.
    """

    model_config = SettingsConfigDict(env_prefix="CTXDB_", extra="ignore", populate_by_name=True)

    home: Path = Field(default_factory=_default_home, description="Project-local state root.")
    delta_root: str | None = Field(
        default=None, description="URI of the Delta tables (local path or s3://, gs://, az://)."
    )
    delta_storage_options: dict[str, str] = Field(
        default_factory=dict, description="delta-rs storage options for object stores."
    )
    landing_uri: str | None = Field(default=None, description="Where JSONL event files land.")
    landing_threads: int = Field(
        default=0, ge=0, description="Threads that validate landing lines (0: one per core)."
    )
    files_root: str | None = Field(default=None, description="Conversation file storage root.")

    elasticsearch_url: str = Field(
        default="http://127.0.0.1:9200", validation_alias="ELASTICSEARCH_URL"
    )
    elasticsearch_api_key: SecretStr | None = Field(
        default=None, validation_alias="ELASTICSEARCH_API_KEY"
    )
    elasticsearch_username: str | None = Field(
        default=None, validation_alias="ELASTICSEARCH_USERNAME"
    )
    elasticsearch_password: SecretStr | None = Field(
        default=None, validation_alias="ELASTICSEARCH_PASSWORD"
    )
    elasticsearch_ca_certs: str | None = Field(
        default=None, validation_alias="ELASTICSEARCH_CA_CERTS"
    )
    elasticsearch_request_timeout: float = Field(default=30.0)
    index_prefix: str = Field(default="ctxdb", description="Prefix of every index and alias.")

    es_version: str = Field(default="9.2.4", description="Embedded node version (Maven Central).")
    es_heap: str = Field(default="1g", description="Embedded node heap (-Xms/-Xmx).")
    es_port: int = Field(default=9200)
    es_cache_dir: Path | None = Field(
        default=None, description="Where the embedded node's zip, home, data and logs live."
    )
    es_user: str = Field(default="ctxdb-es", description="System user the node runs as under root.")
    es_start_timeout_s: float = Field(default=120.0)
    es_stop_timeout_s: float = Field(default=60.0, description="Wait for a clean node shutdown.")
    es_download_timeout_s: float = Field(default=1800.0, description="Limit of the mvn download.")
    es_mvn: str = Field(default="mvn", description="Maven executable that fetches the node's zip.")
    es_zip_sha512: str | None = Field(
        default=None, description="Expected SHA-512 of the zip (needed for unpinned versions)."
    )
    es_java_home: Path | None = Field(
        default=None, validation_alias="ES_JAVA_HOME", description="JDK for the node, first choice."
    )
    java_home: Path | None = Field(
        default=None, validation_alias="JAVA_HOME", description="JDK, second choice."
    )
    jvm_dir: Path = Field(
        default=Path("/usr/lib/jvm"), description="Where installed JDKs are searched last."
    )

    embedding_model: str = Field(default="all-MiniLM-L6-v2")
    embedding_batch_size: int = Field(default=64)
    embedding_dims: int = Field(default=384)
    embedding_device: str = Field(default="cpu", description="torch device of the embedder.")
    index_chunk_size: int = Field(default=500, description="Documents per bulk request.")
    index_bulk_threads: int = Field(default=2, ge=1, description="Bulk requests in flight.")
    reindex_grace_s: float = Field(
        default=60.0, description="Seconds a retired index is kept after an alias swap."
    )
    writer_lease_ttl_s: float = Field(
        default=120.0,
        gt=0,
        description="Seconds the writer lease outlives a holder that stopped renewing it.",
    )
    writer_lease_wait_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds a writer waits for a held writer lease before failing.",
    )

    retention_days: int = Field(default=365, description="Default TTL of every derived row.")
    retention_rules: list[RetentionRule] = Field(
        default_factory=list,
        description="Per tenant/app/role TTL overrides (JSON list of {tenant, app, role, days}).",
    )
    retention_vacuum_hours: int = Field(
        default=168, ge=0, description="VACUUM keeps files removed less than this many hours ago."
    )
    erase_vacuum_hours: int = Field(
        default=0, ge=0, description="VACUUM window after an erasure (0: old files go at once)."
    )
    compaction_target_mb: int = Field(default=128, description="OPTIMIZE target file size.")
    compaction_small_file_mb: int = Field(default=16, description="Files below this are small.")
    compaction_max_small_files: int = Field(
        default=8, description="Small files a table may keep after compaction (checked)."
    )
    recency_half_life_days: float = Field(default=7.0)

    search_rrf_k: int = Field(default=60, description="Reciprocal-rank-fusion constant.")
    search_weight_semantic: float = Field(default=1.0, description="RRF weight of the kNN arm.")
    search_weight_lexical: float = Field(default=0.5, description="RRF weight of both text arms.")
    search_weight_recency: float = Field(default=0.2, description="Recency lift weight.")
    search_num_candidates: int = Field(default=200, description="kNN num_candidates per shard.")
    search_knn_k: int = Field(default=50, description="kNN k (rows fetched by the semantic arm).")
    search_overfetch_rows: int = Field(
        default=4, description="Rows fetched per wanted turn in each arm, before per-turn dedup."
    )
    search_max_per_conversation: int = Field(default=2)
    search_query_max_chars: int = Field(default=256)
    search_trigram_min_match: str = Field(
        default="40%", description="minimum_should_match of the trigram arm."
    )
    search_lexical_min_match: str = Field(
        default="1", description="minimum_should_match of the BM25 arm (content words)."
    )
    search_fuzzy_min_match: str = Field(
        default="2<60%", description="minimum_should_match of the trigram arm's fuzzy words."
    )
    search_snippet_chars: int = Field(default=400)

    auth_tokens_path: Path | None = Field(
        default=None,
        description="Hashed bearer-token store (JSON); default <home>/auth/tokens.json.",
    )
    auth_jwt_key: SecretStr | None = Field(
        default=None, description="JWT verification key (HS secret or PEM public key)."
    )
    auth_jwt_algorithms: list[str] = Field(
        default_factory=lambda: ["HS256"], description="RS256/ES256 need pyjwt[crypto]."
    )
    auth_jwt_audience: str | None = Field(default=None)
    auth_jwt_issuer: str | None = Field(default=None)
    auth_jwt_user_claim: str = Field(default="sub")
    auth_jwt_tenant_claim: str = Field(default="tenant")
    token: SecretStr | None = Field(
        default=None, description="Bearer token the CLI runs as (CTXDB_TOKEN)."
    )

    @cached_property
    def delta_uri(self) -> str:
        return self.delta_root or str(self.home / "delta")

    @cached_property
    def landing(self) -> str:
        return self.landing_uri or str(self.home / "landing")

    @cached_property
    def files(self) -> str:
        return self.files_root or str(self.home / "files")

    @property
    def tokens_path(self) -> Path:
        return self.auth_tokens_path or self.home / "auth" / "tokens.json"

    @property
    def embedded(self) -> bool:
        """True when the URL points at the node ctxdb manages itself (loopback, default port)."""
        return self.elasticsearch_url.rstrip("/") in {
            f"http://127.0.0.1:{self.es_port}",
            f"http://localhost:{self.es_port}",
        }

    @model_validator(mode="after")
    def _url_follows_embedded_port(self) -> Settings:
        """Without ELASTICSEARCH_URL, the URL is the embedded node's on CTXDB_ES_PORT."""
        if "elasticsearch_url" not in self.model_fields_set:
            self.elasticsearch_url = f"http://127.0.0.1:{self.es_port}"
        return self


def get_settings() -> Settings:
    """Read the settings from the environment now (never at import time)."""
    return Settings()
