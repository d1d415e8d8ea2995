"""The capture group (`CTXDB_CAPTURE_*`): the recorder SDK's switch, checks, queue and spool."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class CaptureSettings(GroupSettings):
    """The recorder SDK (`ctxdb.capture`): on or off, its checks, queue and spool files."""

    model_config = group_config("CTXDB_CAPTURE_")

    enabled: bool = Field(default=True, description="Record turns at all (false: a no-op).")
    exclude: list[str] = Field(
        default_factory=list,
        description="Project folders (JSON list) whose hosts never record, sub-folders included.",
    )
    invalid: Literal["raise", "log"] = Field(
        default="raise",
        description="An event the contract refuses: raise into the host or log.",
    )
    io_errors: Literal["log", "raise"] = Field(
        default="log",
        description="A failed spool write: log it, or raise at the host's next call.",
    )
    queue_size: int = Field(
        default=10_000,
        ge=1,
        description="Events waiting for the writer; beyond, they are dropped.",
    )
    rotate_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="A spool file is published at this size.",
    )
    rotate_age_s: float = Field(
        default=60.0,
        gt=0,
        description="A spool file is published at this age (seconds).",
    )
    spool_dir: Path | None = Field(
        default=None,
        description="Local spool for an object-store landing; default <home>/capture/spool.",
    )
