"""The HTTP group (`CTXDB_HTTP_*`): limits of the HTTP API."""

from __future__ import annotations

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class HttpSettings(GroupSettings):
    """Limits of the HTTP API (`ctxdb serve`)."""

    model_config = group_config("CTXDB_HTTP_")

    max_body_bytes: int = Field(
        default=1_048_576, gt=0, description="Largest request body; larger answers 413."
    )
    max_query_bytes: int = Field(
        default=8_192, gt=0, description="Longest query string; longer answers 414."
    )
