"""The Claude Code group (`CTXDB_CLAUDE_CODE_*`): whose turns the hooks and the importer record."""

from __future__ import annotations

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class ClaudeCodeSettings(GroupSettings):
    """Claude Code capture: whose turns the hooks and the importer record, and where not."""

    model_config = group_config("CTXDB_CLAUDE_CODE_")

    user_id: str | None = Field(
        default=None,
        description="User the turns belong to (default: the OS account name).",
    )
    tenant: str = Field(default="local")
    app: str = Field(default="claude-code")
    exclude: list[str] = Field(
        default_factory=list,
        description="Project folders never captured (JSON list of paths).",
    )
    projects: str = Field(
        default="~/.claude/projects",
        description="Claude Code's projects folder: the only place the hook reads transcripts.",
    )
    tool_output: bool = Field(
        default=False,
        description="Steps also record the text each tool returned (`<private>` spans removed).",
    )
    context: bool = Field(
        default=False,
        description="`install` also adds a SessionStart hook that gives each new, resumed, "
        "cleared or compacted session its project's context pack (docs/context-pack.md).",
    )
    context_budget: int = Field(
        default=1500, ge=32, le=32_000, description="Tokens the SessionStart pack holds, at most."
    )
    context_timeout_s: float = Field(
        default=1.5,
        gt=0,
        le=10,
        description="Seconds the SessionStart hook waits for the pack; past them it answers "
        "nothing (the session never waits longer).",
    )
    lookup: bool = Field(
        default=False,
        description="`install` also adds a UserPromptSubmit hook that gives each prompt the "
        "earlier turns of its project that match it strongly (docs/context-pack.md).",
    )
    lookup_budget: int = Field(
        default=600, ge=32, le=32_000, description="Tokens the UserPromptSubmit lookup adds."
    )
    lookup_timeout_s: float = Field(
        default=1.0,
        gt=0,
        le=10,
        description="Seconds the UserPromptSubmit lookup waits for its hits; past them it adds "
        "nothing (the prompt never waits longer).",
    )
    context_url: str | None = Field(
        default=None,
        description="A running `ctxdb serve` (e.g. http://127.0.0.1:8080) the context hooks ask "
        "first; when it does not answer they build the answer themselves, within their bound.",
    )
    tool_output_chars: int = Field(
        default=2_000,
        ge=100,
        le=32_000,
        description="Tool output a step keeps, at most.",
    )
