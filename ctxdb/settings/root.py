"""The root settings object: the state paths and shards every stage shares, one group per stage,
and the process's cached copy (`get_settings`)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ctxdb.settings.auth import AuthSettings
from ctxdb.settings.base import GroupSettings, env_name
from ctxdb.settings.capture import CaptureSettings
from ctxdb.settings.claude_code import ClaudeCodeSettings
from ctxdb.settings.elasticsearch import ElasticsearchSettings
from ctxdb.settings.embedding import EmbeddingSettings
from ctxdb.settings.http import HttpSettings
from ctxdb.settings.landing import LandingSettings
from ctxdb.settings.mcp import McpSettings
from ctxdb.settings.node import NodeSettings
from ctxdb.settings.removed import refuse_removed
from ctxdb.settings.retention import RetentionSettings
from ctxdb.settings.search import SearchSettings

# Variables outside the CTXDB_ prefix that a group reads (the standard names of other tools).
_FOREIGN_ENV = ("ELASTICSEARCH_", "ES_JAVA_HOME", "JAVA_HOME")

GROUPS: dict[str, type[GroupSettings]] = {
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
}


OBJECT_STORE_TIMEOUTS = {"timeout": "30s", "connect_timeout": "5s", "retry_timeout": "30s"}
"""delta-rs (object_store) client options every Delta read and write gets unless
`CTXDB_OBJECT_STORE_OPTIONS` names them (keys case-insensitive): a request is abandoned after
`timeout`, a connection attempt after `connect_timeout`, and no retry starts once
`retry_timeout` has passed since the first attempt. A frozen endpoint thus fails a Delta access
within timeout + retry_timeout (one attempt of 30 s with these values; object_store's own
defaults retried for 180 s); see docs/operations.md."""


def _default_home() -> Path:
    return Path(os.getcwd()) / "var"


class Settings(BaseSettings):
    """State paths plus one settings group per stage (see `GROUPS`).

    Top-level fields come from `CTXDB_<FIELD>` (e.g. `CTXDB_HOME`); each group reads its own
    variables, e.g. `settings.search.rrf_k` from `CTXDB_SEARCH_RRF_K`. Every path is derived
    here, from `home` and `storage_root`, so no two stages can disagree on one.
    """

    model_config = SettingsConfigDict(env_prefix="CTXDB_", extra="ignore", populate_by_name=True)

    home: Path = Field(
        default_factory=_default_home,
        description="Local state root: the token store (auth/tokens.json), the capture spool"
        " (capture/spool), and the data when CTXDB_STORAGE_ROOT is unset.",
    )
    storage_root: str | None = Field(
        default=None,
        description="Where the data lives, a local path or an object-store URI (s3://, gs://,"
        " az://): the Delta tables (delta/), landing (landing/), conversation files (files/)"
        " and the landing archive (landing-archive/) under it; default <home>.",
    )
    object_store_options: dict[str, str] = Field(
        default_factory=dict,
        validate_default=True,
        description="Options of every object-store access, Delta's and the others (delta-rs"
        " keys, with `OBJECT_STORE_TIMEOUTS` where they name no timeout of their own).",
    )
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
        description="Most conversations derived and written per batch.",
    )
    derive_batch_events: int = Field(
        default=50_000,
        ge=1,
        description="Most newly landed events per derivation batch (a longer conversation is a"
        " batch of its own): bounds derivation's memory, per worker process.",
    )
    derive_session_rows: bool = Field(
        default=True,
        description="Derive one `session` role row per conversation (ctxdb.record.session_rows).",
    )
    derive_asked_context: bool = Field(
        default=True,
        description="Give a user row the question it answers as `context`: the last question of"
        " the previous turn's answer, which the embedding model reads before the row's text"
        " (ctxdb.record.role_rows.asked_context).",
    )
    derive_processes: int = Field(
        default=0,
        ge=0,
        description="Worker processes that derive batches side by side (0: one per CPU core;"
        " 1: derive in the calling process). A run of one batch always derives in-process.",
    )
    token: SecretStr | None = Field(
        default=None, description="Bearer token the CLI and `ctxdb mcp` run as."
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

    @property
    def storage(self) -> str:
        """The data's root: CTXDB_STORAGE_ROOT, else the home folder."""
        return (self.storage_root or str(self.home)).rstrip("/")

    @property
    def delta_uri(self) -> str:
        """The Delta tables: <storage>/delta."""
        return f"{self.storage}/delta"

    @property
    def landing_uri(self) -> str:
        """Where raw event files land: <storage>/landing."""
        return f"{self.storage}/landing"

    @property
    def files(self) -> str:
        """The conversation files: <storage>/files."""
        return f"{self.storage}/files"

    @property
    def archive_uri(self) -> str:
        """Where fully expired landing files are archived: <storage>/landing-archive."""
        return f"{self.storage}/landing-archive"

    @property
    def packs_path(self) -> Path | None:
        """Context pack snapshots (`ctxdb.pack.snapshot`): <storage>/packs when the data is in
        a local folder; None on an object store (the hooks then read Delta)."""
        return None if "://" in self.storage else Path(self.storage) / "packs"

    @property
    def spool_dir(self) -> Path:
        """The local spool of a recorder whose landing is an object store."""
        return self.home / "capture" / "spool"

    @property
    def tokens_path(self) -> Path:
        """The local hashed bearer-token store."""
        return self.home / "auth" / "tokens.json"

    @property
    def embedded(self) -> bool:
        """True when the URL points at the node ctxdb manages itself (loopback, default port)."""
        return self.elasticsearch.url.rstrip("/") in {
            f"http://127.0.0.1:{self.node.port}",
            f"http://localhost:{self.node.port}",
        }

    @field_validator("object_store_options")
    @classmethod
    def _bounded_object_store(cls, options: dict[str, str]) -> dict[str, str]:
        """The options with `OBJECT_STORE_TIMEOUTS` where the user gave none of that key."""
        given = {key.lower() for key in options}
        defaults = {k: v for k, v in OBJECT_STORE_TIMEOUTS.items() if k not in given}
        return {**defaults, **options}

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
        keep this object's values, down to a group's nested model (`search={"knobs": {"rrf_k":
        10}}` changes that knob alone).
        """
        values = self.model_dump()
        for name, value in changes.items():
            if name in GROUPS and isinstance(value, dict):
                group, dumped = getattr(self, name), values[name]
                for field, given in value.items():
                    nested = isinstance(getattr(group, field, None), BaseModel)
                    merge = nested and isinstance(given, dict)
                    dumped[field] = {**dumped[field], **given} if merge else given
            else:
                values[name] = value
        return Settings(**values)


def environment_names() -> dict[str, tuple[str | None, str]]:
    """Every environment variable the settings read -> (its group, None at the top; field)."""
    names: dict[str, tuple[str | None, str]] = {
        env_name(Settings, field): (None, field)
        for field in Settings.model_fields
        if field not in GROUPS
    }
    for group, model in GROUPS.items():
        names.update({env_name(model, field): (group, field) for field in model.model_fields})
    return names


def _environment() -> tuple[tuple[str, str], ...]:
    """The variables settings read, as a hashable snapshot."""
    return tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith(("CTXDB_", *_FOREIGN_ENV)))
    )


@functools.lru_cache(maxsize=1)
def _settings_for(environment: tuple[tuple[str, str], ...], cwd: str) -> Settings:
    refuse_removed(name for name, _ in environment)
    return Settings()


def get_settings() -> Settings:
    """The process's settings: read once, and again only when the environment or cwd changed.

    Never called at import time. The object is shared: derive variants with `replace()`.
    """
    return _settings_for(_environment(), os.getcwd())


def clear_settings_cache() -> None:
    """Forget the cached settings (tests call it between cases)."""
    _settings_for.cache_clear()
