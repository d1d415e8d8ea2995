"""The capture group (`CTXDB_CAPTURE_*`): the recorder SDK's switch and what it does on errors."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class CaptureSettings(GroupSettings):
    """The recorder SDK (`ctxdb.capture`): on or off (per project), and what it does with an
    event the contract refuses and with a failed spool write."""

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
