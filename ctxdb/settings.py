"""The one settings object every ctxdb component reads, grouped per area (environment variables).

`Settings` holds the state paths and one group per area: `elasticsearch`, `landing`, `embedding`,
`search`, `retention`, `auth`, `http`, `mcp`, `node`, `claude_code`, `capture`. Each group reads
its own environment variables; the names are the flat ones ctxdb has always used (see
docs/configuration.md).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Variables outside the CTXDB_ prefix that a group reads.
_FOREIGN_ENV = ("ELASTICSEARCH_", "ES_JAVA_HOME", "JAVA_HOME")


class RetentionRule(BaseModel):
    """A TTL override: rows matching every set field live `days` days (most specific rule wins)."""

    tenant: str | None = None
    app: str | None = None
    role: str | None = None
    days: int = Field(gt=0)


def _group_config(env_prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=env_prefix, extra="ignore", populate_by_name=True)


class ElasticsearchSettings(BaseSettings):
    """The cluster connection, index names, bulk writes, the writer lease and reindex grace."""

    model_config = _group_config("ELASTICSEARCH_")

    url: str = Field(default="http://127.0.0.1:9200")
    api_key: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    ca_certs: str | None = None
    request_timeout: float = Field(
        default=30.0,
        gt=0,
        validation_alias="CTXDB_ELASTICSEARCH_REQUEST_TIMEOUT",
        description="Seconds the client waits for any one response.",
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        validation_alias="CTXDB_ELASTICSEARCH_MAX_RETRIES",
        description="Retries of a request that failed to connect (or timed out, see below).",
    )
    retry_on_timeout: bool = Field(
        default=False,
        validation_alias="CTXDB_ELASTICSEARCH_RETRY_ON_TIMEOUT",
        description="Retry a timed-out request too (each retry waits the timeout again).",
    )
    index_prefix: str = Field(
        default="ctxdb",
        validation_alias="CTXDB_INDEX_PREFIX",
        description="Prefix of every index and alias.",
    )
    chunk_size: int = Field(
        default=500, validation_alias="CTXDB_INDEX_CHUNK_SIZE", description="Documents per bulk."
    )
    routing: Literal["user", "none"] = Field(
        default="user",
        validation_alias="CTXDB_INDEX_ROUTING",
        description="Route each user's documents and searches to one shard (new indices).",
    )
    sort: Literal["user", "none"] = Field(
        default="user",
        validation_alias="CTXDB_INDEX_SORT",
        description="Sort each shard's documents by user and conversation, so one user's"
        " documents lie together and a search skips everyone else's (new indices).",
    )
    shards: int = Field(
        default=1,
        ge=1,
        validation_alias="CTXDB_INDEX_SHARDS",
        description="Primary shards of new indices.",
    )
    replicas: str = Field(
        default="0-1",
        validation_alias="CTXDB_INDEX_REPLICAS",
        description="Replicas of every index: a range (`0-1`, `1-all`) is auto_expand_replicas,"
        " following the number of nodes; a number is a fixed number_of_replicas (applied to the"
        " live indices by the next sync).",
    )
    vector_index: Literal["hnsw", "int8_hnsw", "bbq_hnsw"] = Field(
        default="int8_hnsw",
        validation_alias="CTXDB_INDEX_VECTOR_TYPE",
        description="index_options.type of the embedding field (new indices).",
    )
    bulk_threads: int = Field(
        default=2,
        ge=1,
        validation_alias="CTXDB_INDEX_BULK_THREADS",
        description="Bulk requests in flight.",
    )
    bulk_timeout_s: float = Field(
        default=60.0,
        gt=0,
        validation_alias="CTXDB_INDEX_BULK_TIMEOUT_S",
        description="Seconds one bulk request may take (client wait and server-side timeout).",
    )
    bulk_max_retries: int = Field(
        default=3,
        ge=0,
        validation_alias="CTXDB_INDEX_BULK_MAX_RETRIES",
        description="Retries of documents rejected for load (429), backing off 1, 2, 4 ... s.",
    )
    reindex_grace_s: float = Field(
        default=60.0,
        validation_alias="CTXDB_REINDEX_GRACE_S",
        description="Seconds a retired index is kept after an alias swap.",
    )
    writer_lease_ttl_s: float = Field(
        default=120.0,
        gt=0,
        validation_alias="CTXDB_WRITER_LEASE_TTL_S",
        description="Seconds the writer lease outlives a holder that stopped renewing it.",
    )
    writer_lease_wait_s: float = Field(
        default=0.0,
        ge=0,
        validation_alias="CTXDB_WRITER_LEASE_WAIT_S",
        description="Seconds a writer waits for a held writer lease before failing.",
    )
    writer_lease_required: bool = Field(
        default=True,
        validation_alias="CTXDB_WRITER_LEASE_REQUIRED",
        description="Landing and derivation refuse to run when Elasticsearch (the lease store)"
        " does not answer; false lets them run without the lease (unsafe: nothing keeps another"
        " writer from running beside them).",
    )

    @field_validator("replicas")
    @classmethod
    def _replica_count_or_range(cls, value: str) -> str:
        if not re.fullmatch(r"\d+|\d+-(\d+|all)", value):
            raise ValueError(
                f"CTXDB_INDEX_REPLICAS={value!r}: give a replica count (1) or a range (0-1, 0-all)"
            )
        return value


class LandingSettings(BaseSettings):
    """Where raw event files land and how many threads validate them."""

    model_config = _group_config("CTXDB_LANDING_")

    uri: str | None = Field(default=None, description="Where JSONL event files land.")
    threads: int = Field(
        default=0, ge=0, description="Threads that validate landing lines (0: one per core)."
    )
    scanner: Literal["auto", "native", "python"] = Field(
        default="auto",
        description="Line scanner: the native one when built (auto), or forced native/python.",
    )


class EmbeddingSettings(BaseSettings):
    """The sentence-transformers model that embeds role rows, and the runtime that runs it."""

    model_config = _group_config("CTXDB_EMBEDDING_")

    model: str = Field(default="all-MiniLM-L6-v2")
    batch_size: int = Field(default=64)
    dims: int = Field(default=384)
    device: str = Field(default="cpu", description="torch device of the embedder.")
    backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        default="auto",
        description="Embedder runtime: torch, ONNX Runtime fp32, or ONNX Runtime dynamic int8;"
        " auto keeps the one a memory's vectors were made with, ONNX fp32 for a new memory.",
    )
    threads: int = Field(
        default=0,
        ge=0,
        description="Intra-op threads of the embedder, torch or ONNX Runtime (0: torch's default,"
        " ONNX Runtime one per usable core); 1 when shards embed in parallel processes.",
    )
    onnx_cache_dir: Path | None = Field(
        default=None,
        description="Where ONNX exports are cached (default: $XDG_CACHE_HOME/ctxdb/onnx).",
    )


class SearchSettings(BaseSettings):
    """Hybrid search: the arms, their fusion, the recency lift and the response's size."""

    model_config = _group_config("CTXDB_SEARCH_")

    rrf_k: int = Field(default=5, ge=1, description="Reciprocal-rank-fusion constant.")
    weight_semantic: float = Field(default=1.0, description="RRF weight of the kNN arm.")
    weight_lexical: float = Field(default=1.0, description="RRF weight of the BM25 arm.")
    weight_trigram: float = Field(default=1.0, description="RRF weight of the trigram arm.")
    weight_recency: float = Field(default=0.5, description="Recency lift weight.")
    weight_time: float = Field(
        default=2.0, description="Lift of turns inside the span a query's date names."
    )
    coverage_power: float = Field(
        default=2.0,
        ge=0,
        le=4,
        description="Text arms' RRF contribution scaled by query coverage ** this (0: off).",
    )
    diversity: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Diversity over conversations: each turn already picked from a conversation"
        " scales that conversation's next one by (1 - this) (0: off).",
    )
    recency_half_life_days: float = Field(
        default=180.0, gt=0, validation_alias="CTXDB_RECENCY_HALF_LIFE_DAYS"
    )
    num_candidates: int = Field(
        default=200, description="kNN num_candidates per shard (at least 1.5 x k is used)."
    )
    knn_k: int = Field(default=50, description="kNN k (rows fetched by the semantic arm).")
    knn_oversample: float = Field(
        default=3.0,
        ge=0,
        le=10,
        description="Quantized indices: oversample x k kNN candidates rescored with the float"
        " vectors (0: off; 1-10).",
    )
    overfetch_rows: int = Field(
        default=4, description="Rows fetched per wanted turn in each arm, before per-turn dedup."
    )
    max_per_conversation: int = Field(
        default=2, ge=1, description="Turns of one conversation kept when the cap applies."
    )
    cap_user_scope: bool = Field(
        default=False, description="Apply the per-conversation cap in user and agent scope."
    )
    query_max_chars: int = Field(default=256)
    trigram_min_match: str = Field(
        default="40%", description="minimum_should_match of the trigram arm."
    )
    lexical_min_match: str = Field(
        default="1", description="minimum_should_match of the BM25 arm (content words)."
    )
    fuzzy_min_match: str = Field(
        default="2<60%", description="minimum_should_match of the trigram arm's fuzzy words."
    )
    snippet_chars: int = Field(default=400)
    phrase_boost: float = Field(
        default=0.0, ge=0, description="Boost of the BM25 arm's phrase match (0: off)."
    )
    phrase_slop: int = Field(default=2, ge=0, description="Slop of the phrase match.")
    query_cache_size: int = Field(
        default=1024, ge=0, description="Query embeddings kept in memory (0: no cache)."
    )

    @field_validator("knn_oversample")
    @classmethod
    def _oversample_off_or_at_least_one(cls, value: float) -> float:
        """Elasticsearch takes 0 (off) or 1 to 10."""
        if 0 < value < 1:
            raise ValueError("knn_oversample is 0 (off) or between 1 and 10")
        return value


class RetentionSettings(BaseSettings):
    """TTLs of derived rows, VACUUM windows (retention and erasure) and compaction targets."""

    model_config = _group_config("CTXDB_RETENTION_")

    days: int = Field(default=365, description="Default TTL of every derived row.")
    rules: list[RetentionRule] = Field(
        default_factory=list,
        description="Per tenant/app/role TTL overrides (JSON list of {tenant, app, role, days}).",
    )
    vacuum_hours: int = Field(
        default=168, ge=0, description="VACUUM keeps files removed less than this many hours ago."
    )
    erase_vacuum_hours: int = Field(
        default=0,
        ge=0,
        validation_alias="CTXDB_ERASE_VACUUM_HOURS",
        description="VACUUM window after an erasure for replaced files holding no erased row "
        "(files holding one are always deleted at once).",
    )
    state_history_hours: int = Field(
        default=24,
        ge=0,
        description="How long state tables (index_state, derive_state, landed_files, ...) keep "
        "replaced files and log entries before the sweep's maintenance removes them.",
    )
    archive_days: int = Field(
        default=0,
        ge=0,
        description="0: landing files whose every line expired are deleted by the sweep; N: "
        "they are moved to archive_uri and deleted N days later.",
    )
    archive_uri: str | None = Field(
        default=None,
        description="Where fully expired landing files are archived (default <home>/"
        "landing-archive).",
    )
    compaction_target_mb: int = Field(
        default=128,
        validation_alias="CTXDB_COMPACTION_TARGET_MB",
        description="OPTIMIZE target file size.",
    )
    compaction_small_file_mb: int = Field(
        default=16,
        validation_alias="CTXDB_COMPACTION_SMALL_FILE_MB",
        description="Files below this are small.",
    )
    compaction_max_small_files: int = Field(
        default=8,
        validation_alias="CTXDB_COMPACTION_MAX_SMALL_FILES",
        description="Small files a table may keep after compaction (checked).",
    )


class AuthSettings(BaseSettings):
    """Bearer tokens and JWTs the server accepts, and the token the CLI runs as."""

    model_config = _group_config("CTXDB_AUTH_")

    tokens_path: Path | None = Field(
        default=None,
        description="Hashed bearer-token store (JSON); default <home>/auth/tokens.json.",
    )
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
    cli_token: SecretStr | None = Field(
        default=None, validation_alias="CTXDB_TOKEN", description="Bearer token the CLI runs as."
    )


class HttpSettings(BaseSettings):
    """Limits of the HTTP API (`ctxdb serve`)."""

    model_config = _group_config("CTXDB_HTTP_")

    max_body_bytes: int = Field(
        default=1_048_576, gt=0, description="Largest request body; larger answers 413."
    )
    max_query_bytes: int = Field(
        default=8_192, gt=0, description="Longest query string; longer answers 414."
    )


class McpSettings(BaseSettings):
    """The MCP server (`ctxdb mcp`, `/mcp` in `ctxdb serve`): output bounds, the stdio token."""

    model_config = _group_config("CTXDB_MCP_")

    result_chars: int = Field(
        default=1500,
        ge=100,
        description="Characters of text per result (a hit's snippet, a message, a window turn).",
    )
    inline_file_bytes: int = Field(
        default=65_536, ge=0, description="Largest text file read_file returns inline."
    )
    token_file: Path | None = Field(
        default=None, description="File holding the token `ctxdb mcp` runs as (after CTXDB_TOKEN)."
    )


class NodeSettings(BaseSettings):
    """The embedded Elasticsearch node: its distribution, JVM, port and process limits."""

    model_config = _group_config("CTXDB_ES_")

    version: str = Field(default="9.2.4", description="Embedded node version (Maven Central).")
    heap: str = Field(default="1g", description="Embedded node heap (-Xms/-Xmx).")
    port: int = Field(default=9200)
    cache_dir: Path | None = Field(
        default=None, description="Where the embedded node's zip, home, data and logs live."
    )
    user: str = Field(default="ctxdb-es", description="System user the node runs as under root.")
    start_timeout_s: float = Field(default=120.0)
    stop_timeout_s: float = Field(default=60.0, description="Wait for a clean node shutdown.")
    download_timeout_s: float = Field(default=1800.0, description="Limit of the mvn download.")
    mvn: str = Field(default="mvn", description="Maven executable that fetches the node's zip.")
    zip_sha512: str | None = Field(
        default=None, description="Expected SHA-512 of the zip (needed for unpinned versions)."
    )
    es_java_home: Path | None = Field(
        default=None, validation_alias="ES_JAVA_HOME", description="JDK for the node, first choice."
    )
    java_home: Path | None = Field(
        default=None, validation_alias="JAVA_HOME", description="JDK, second choice."
    )
    jvm_dir: Path = Field(
        default=Path("/usr/lib/jvm"),
        validation_alias="CTXDB_JVM_DIR",
        description="Where installed JDKs are searched last.",
    )


class ClaudeCodeSettings(BaseSettings):
    """Claude Code capture: whose turns the hooks and the importer record, and where not."""

    model_config = _group_config("CTXDB_CLAUDE_CODE_")

    user_id: str | None = Field(
        default=None, description="User the turns belong to (default: the OS account name)."
    )
    tenant: str = Field(default="local")
    app: str = Field(default="claude-code")
    exclude: list[str] = Field(
        default_factory=list, description="Project folders never captured (JSON list of paths)."
    )
    projects: str = Field(
        default="~/.claude/projects",
        description="Claude Code's projects folder: the only place the hook reads transcripts.",
    )
    tool_output: bool = Field(
        default=False,
        description="Steps also record the text each tool returned (`<private>` spans removed).",
    )
    tool_output_chars: int = Field(
        default=2_000, ge=100, le=32_000, description="Tool output a step keeps, at most."
    )


class CaptureSettings(BaseSettings):
    """The recorder SDK (`ctxdb.capture`): on or off, its checks, queue and spool files."""

    model_config = _group_config("CTXDB_CAPTURE_")

    enabled: bool = Field(default=True, description="Record turns at all (false: a no-op).")
    exclude: list[str] = Field(
        default_factory=list,
        description="Project folders (JSON list) whose hosts never record, sub-folders included.",
    )
    invalid: Literal["raise", "log"] = Field(
        default="raise", description="An event the contract refuses: raise into the host or log."
    )
    io_errors: Literal["log", "raise"] = Field(
        default="log", description="A failed spool write: log it, or raise at the host's next call."
    )
    queue_size: int = Field(
        default=10_000, ge=1, description="Events waiting for the writer; beyond, they are dropped."
    )
    rotate_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1, description="A spool file is published at this size."
    )
    rotate_age_s: float = Field(
        default=60.0, gt=0, description="A spool file is published at this age (seconds)."
    )
    spool_dir: Path | None = Field(
        default=None,
        description="Local spool for an object-store landing; default <home>/capture/spool.",
    )


class CelerySettings(BaseSettings):
    """The Celery code location (`pipelines.celery_definitions`); the broker and backend URLs are
    read from CTXDB_CELERY_BROKER / CTXDB_CELERY_BACKEND by Dagster when a run starts."""

    model_config = _group_config("CTXDB_CELERY_")

    config_source: dict[str, Any] = Field(
        default_factory=dict,
        description="Further Celery app settings (JSON), e.g. broker_transport_options.",
    )


GROUPS: dict[str, type[BaseSettings]] = {
    "elasticsearch": ElasticsearchSettings,
    "landing": LandingSettings,
    "embedding": EmbeddingSettings,
    "search": SearchSettings,
    "retention": RetentionSettings,
    "auth": AuthSettings,
    "http": HttpSettings,
    "mcp": McpSettings,
    "node": NodeSettings,
    "claude_code": ClaudeCodeSettings,
    "capture": CaptureSettings,
    "celery": CelerySettings,
}


def _default_home() -> Path:
    return Path(os.getcwd()) / "var"


class Settings(BaseSettings):
    """State paths plus one settings group per area (see `GROUPS`).

    Top-level fields come from `CTXDB_<FIELD>` (e.g. `CTXDB_HOME`); each group reads its own
    variables, e.g. `settings.search.rrf_k` from `CTXDB_SEARCH_RRF_K`.
    """

    model_config = SettingsConfigDict(env_prefix="CTXDB_", extra="ignore", populate_by_name=True)

    home: Path = Field(default_factory=_default_home, description="Project-local state root.")
    delta_root: str | None = Field(
        default=None, description="URI of the Delta tables (local path or s3://, gs://, az://)."
    )
    delta_storage_options: dict[str, str] = Field(
        default_factory=dict, description="delta-rs storage options for object stores."
    )
    files_root: str | None = Field(default=None, description="Conversation file storage root.")
    shards: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Hash shards of the conversation id: the partitions of the embedding and index"
        " assets (read when the code location loads).",
    )
    derive_batch_conversations: int = Field(
        default=5_000,
        ge=1,
        description="Conversations derived and written per batch: bounds derivation's memory.",
    )
    derive_processes: int = Field(
        default=0,
        ge=0,
        description="Worker processes that derive batches side by side (0: one per CPU core;"
        " 1: derive in the calling process). A run of one batch always derives in-process.",
    )

    elasticsearch: ElasticsearchSettings = Field(default_factory=ElasticsearchSettings)
    landing: LandingSettings = Field(default_factory=LandingSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    node: NodeSettings = Field(default_factory=NodeSettings)
    claude_code: ClaudeCodeSettings = Field(default_factory=ClaudeCodeSettings)
    capture: CaptureSettings = Field(default_factory=CaptureSettings)
    celery: CelerySettings = Field(default_factory=CelerySettings)

    @property
    def delta_uri(self) -> str:
        return self.delta_root or str(self.home / "delta")

    @property
    def landing_uri(self) -> str:
        return self.landing.uri or str(self.home / "landing")

    @property
    def files(self) -> str:
        return self.files_root or str(self.home / "files")

    @property
    def tokens_path(self) -> Path:
        return self.auth.tokens_path or self.home / "auth" / "tokens.json"

    @property
    def embedded(self) -> bool:
        """True when the URL points at the node ctxdb manages itself (loopback, default port)."""
        return self.elasticsearch.url.rstrip("/") in {
            f"http://127.0.0.1:{self.node.port}",
            f"http://localhost:{self.node.port}",
        }

    @model_validator(mode="after")
    def _url_follows_embedded_port(self) -> Settings:
        """Without ELASTICSEARCH_URL, the URL is the embedded node's on CTXDB_ES_PORT."""
        if "url" not in self.elasticsearch.model_fields_set:
            url = f"http://127.0.0.1:{self.node.port}"
            self.elasticsearch = self.elasticsearch.model_copy(update={"url": url})
        return self

    def replace(self, **changes: Any) -> Settings:
        """A validated copy with `changes`: top-level fields, or a dict of fields per group.

        E.g. `settings.replace(home=tmp, elasticsearch={"index_prefix": "t1"})`; fields not named
        keep this object's values.
        """
        values = self.model_dump()
        for name, value in changes.items():
            if name in GROUPS and isinstance(value, dict):
                values[name] = {**values[name], **value}
            else:
                values[name] = value
        return Settings(**values)


def environment_names() -> dict[str, tuple[str | None, str]]:
    """Every environment variable the settings read -> (its group, None at the top; field)."""
    models: dict[str | None, type[BaseSettings]] = {None: Settings, **GROUPS}
    names: dict[str, tuple[str | None, str]] = {}
    for group, model in models.items():
        prefix = model.model_config.get("env_prefix", "")
        for name, field in model.model_fields.items():
            if group is None and name in GROUPS:
                continue
            alias = field.validation_alias
            names[alias if isinstance(alias, str) else f"{prefix}{name}".upper()] = (group, name)
    return names


def _environment() -> tuple[tuple[str, str], ...]:
    """The variables settings read, as a hashable snapshot."""
    return tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith(("CTXDB_", *_FOREIGN_ENV)))
    )


@functools.lru_cache(maxsize=1)
def _settings_for(environment: tuple[tuple[str, str], ...], cwd: str) -> Settings:
    return Settings()


def get_settings() -> Settings:
    """The process's settings: read once, and again only when the environment or cwd changed.

    Never called at import time. The object is shared: derive variants with `replace()`.
    """
    return _settings_for(_environment(), os.getcwd())


def clear_settings_cache() -> None:
    """Forget the cached settings (tests call it between cases)."""
    _settings_for.cache_clear()
