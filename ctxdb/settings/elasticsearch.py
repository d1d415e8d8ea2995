"""The Elasticsearch group (`CTXDB_ELASTICSEARCH_*`): the cluster connection, index names and
layout, bulk writes, the writer lease and reindex grace.

The URL and credentials keep the Elasticsearch clients' standard names (`ELASTICSEARCH_URL`,
`ELASTICSEARCH_API_KEY`, `ELASTICSEARCH_USERNAME`, `ELASTICSEARCH_PASSWORD`,
`ELASTICSEARCH_CA_CERTS`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from ctxdb.settings.base import GroupSettings, group_config


class ElasticsearchSettings(GroupSettings):
    """The cluster connection, index names, bulk writes, the writer lease and reindex grace."""

    model_config = group_config("CTXDB_ELASTICSEARCH_")

    url: str = Field(default="http://127.0.0.1:9200", validation_alias="ELASTICSEARCH_URL")
    api_key: SecretStr | None = Field(default=None, validation_alias="ELASTICSEARCH_API_KEY")
    username: str | None = Field(default=None, validation_alias="ELASTICSEARCH_USERNAME")
    password: SecretStr | None = Field(default=None, validation_alias="ELASTICSEARCH_PASSWORD")
    ca_certs: str | None = Field(default=None, validation_alias="ELASTICSEARCH_CA_CERTS")
    request_timeout: float = Field(
        default=30.0, gt=0, description="Seconds the client waits for any one response."
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        description="Retries of a request that failed to connect (or timed out, see below).",
    )
    retry_on_timeout: bool = Field(
        default=False,
        description="Retry a timed-out request too (each retry waits the timeout again).",
    )
    index_prefix: str = Field(default="ctxdb", description="Prefix of every index and alias.")
    chunk_size: int = Field(default=500, description="Documents per bulk.")
    routing: Literal["user", "none"] = Field(
        default="user",
        description="Route each user's documents and searches to one shard (new indices).",
    )
    sort: Literal["user", "none"] = Field(
        default="user",
        description="Sort each shard's documents by user and conversation, so one user's"
        " documents lie together and a search skips everyone else's (new indices).",
    )
    shards: int = Field(default=1, ge=1, description="Primary shards of new indices.")
    replicas: str = Field(
        default="0-1",
        description="Replicas of every index: a range (`0-1`, `1-all`) is auto_expand_replicas,"
        " following the number of nodes; a number is a fixed number_of_replicas (applied to the"
        " live indices by the next sync).",
    )
    vector_index: Literal["hnsw", "int8_hnsw", "bbq_hnsw"] = Field(
        default="int8_hnsw",
        description="index_options.type of the embedding field (new indices).",
    )
    bulk_threads: int = Field(default=2, ge=1, description="Bulk requests in flight.")
    bulk_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds one bulk request may take (client wait and server-side timeout).",
    )
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
    writer_lease_required: bool = Field(
        default=True,
        description="Landing and derivation refuse to run when Elasticsearch (the lease store)"
        " does not answer; false lets them run without the lease (unsafe: nothing keeps another"
        " writer from running beside them).",
    )

    @field_validator("replicas")
    @classmethod
    def _replica_count_or_range(cls, value: str) -> str:
        if not re.fullmatch(r"\d+|\d+-(\d+|all)", value):
            raise ValueError(
                f"CTXDB_ELASTICSEARCH_REPLICAS={value!r}: give a replica count (1) or a range"
                " (0-1, 0-all)"
            )
        return value
