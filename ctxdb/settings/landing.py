"""The landing group (`CTXDB_LANDING_*`): how raw event files are scanned (where they land is
`Settings.landing_uri`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class LandingSettings(GroupSettings):
    """Which line scanner validates raw event files (one thread per core either way)."""

    model_config = group_config("CTXDB_LANDING_")

    scanner: Literal["auto", "native", "python"] = Field(
        default="auto",
        description="Line scanner: the native one when built (auto), or forced native/python.",
    )
