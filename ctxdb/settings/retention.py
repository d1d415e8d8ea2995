"""The retention group (`CTXDB_RETENTION_*`): TTLs of derived rows, VACUUM windows and
compaction targets."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ctxdb.settings.base import GroupSettings, group_config


class RetentionRule(BaseModel):
    """A TTL override: rows matching every set field live `days` days (most specific rule wins)."""

    tenant: str | None = None
    app: str | None = None
    role: str | None = None
    days: int = Field(gt=0)


class RetentionSettings(GroupSettings):
    """TTLs of derived rows, VACUUM windows (retention and erasure) and compaction targets."""

    model_config = group_config("CTXDB_RETENTION_")

    days: int = Field(default=365, description="Default TTL of every derived row.")
    rules: list[RetentionRule] = Field(
        default_factory=list,
        description="Per tenant/app/role TTL overrides (JSON list of {tenant, app, role, days}).",
    )
    vacuum_hours: int = Field(
        default=168,
        ge=0,
        description="VACUUM keeps files removed less than this many hours ago.",
    )
    erase_vacuum_hours: int = Field(
        default=0,
        ge=0,
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
        "they are moved to <storage>/landing-archive and deleted N days later.",
    )
    compaction_target_mb: int = Field(default=128, description="OPTIMIZE target file size.")
