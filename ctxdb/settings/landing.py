"""The landing group (`CTXDB_LANDING_*`): where raw event files land and how they are scanned."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class LandingSettings(GroupSettings):
    """Where raw event files land and how many threads validate them."""

    model_config = group_config("CTXDB_LANDING_")

    scanner: Literal["auto", "native", "python"] = Field(
        default="auto",
        description="Line scanner: the native one when built (auto), or forced native/python.",
    )
