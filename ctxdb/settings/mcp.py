"""The MCP group (`CTXDB_MCP_*`): the MCP server's output bounds and its stdio token file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class McpSettings(GroupSettings):
    """The MCP server (`ctxdb mcp`, `/mcp` in `ctxdb serve`): output bounds, the stdio token."""

    model_config = group_config("CTXDB_MCP_")

    result_chars: int = Field(
        default=1500,
        ge=100,
        description="Characters of text per result (a hit's snippet, a message, a window turn).",
    )
    inline_file_bytes: int = Field(
        default=65_536, ge=0, description="Largest text file read_file returns inline."
    )
    token_file: Path | None = Field(
        default=None,
        description="File holding the token `ctxdb mcp` runs as (after CTXDB_TOKEN).",
    )
