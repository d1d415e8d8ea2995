"""Request and response of the context pack, the same model on every face (CLI, HTTP, MCP)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ctxdb.contract.events import Ident, RefId
from ctxdb.contract.projects import PROJECT_MAX_CHARS, looks_like_folder

PackScope = Literal["conversation", "project", "user"]
Section = Literal["header", "related", "unfinished", "sessions", "work", "turns"]
Part = Literal["related", "unfinished", "sessions", "work", "turns"]
"""A section a request may ask for (the header always comes)."""

DEFAULT_BUDGET = 1500
"""Tokens a pack may hold when the request does not say (all-MiniLM-L6-v2 tokenizer)."""
MIN_BUDGET = 32
MAX_BUDGET = 32_000
_AGENT: TypeAdapter[str] = TypeAdapter(Ident)


class ContextRequest(BaseModel):
    """What a pack covers and how large it may be; the principal is never part of it."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: RefId | None = Field(
        default=None, description="Reload one conversation: newest turns whole, older as titles."
    )
    project: str | None = Field(
        default=None,
        min_length=1,
        max_length=PROJECT_MAX_CHARS,
        description="A project: its folder as recorded (a coding host's git root, the TurnLog"
        " `project`; turns recorded without one count by the folder's agent id), or an agent id.",
    )
    budget: int = Field(
        default=DEFAULT_BUDGET,
        ge=MIN_BUDGET,
        le=MAX_BUDGET,
        description="Most tokens the pack text holds (the shipped all-MiniLM-L6-v2 tokenizer).",
    )
    query: str = Field(
        default="",
        max_length=2000,
        description="A prompt or query: the earlier turns most relevant to it are added.",
    )
    max_chars: int | None = Field(
        default=None, ge=200, description="Most characters the pack text holds, besides tokens."
    )
    sections: list[Part] | None = Field(
        default=None,
        description="Only these sections (default: every one). `related` alone (the prompt"
        " lookup) reads no TurnLogs.",
    )

    @field_validator("project")
    @classmethod
    def _folder_or_agent(cls, project: str | None) -> str | None:
        """A project is a folder (a path, with `/` or `\\`) or an agent id: anything else could
        match no turn."""
        if project is None or looks_like_folder(project):
            return project
        try:
            return _AGENT.validate_python(project)
        except ValidationError:
            raise ValueError(
                "not a folder (a path with / or \\) nor an agent id (letters, digits and _-@.:+,"
                " no spaces)"
            ) from None

    @model_validator(mode="after")
    def _one_scope(self) -> ContextRequest:
        if self.conversation_id is not None and self.project is not None:
            raise ValueError("give a conversation or a project, not both")
        return self

    @property
    def scope(self) -> PackScope:
        if self.conversation_id is not None:
            return "conversation"
        return "project" if self.project is not None else "user"


class PackItem(BaseModel):
    """One line (or turn) of the pack: its section, text, how old it is and what to pull."""

    section: Section
    text: str
    ref: str | None = None
    ts: datetime | None = None
    age: str | None = None


class ContextPack(BaseModel):
    """The pack: its markdown `text` (what an agent is given) and the items it holds."""

    scope: PackScope
    conversation_id: str | None = None
    project: str | None = None
    budget: int
    tokens: int = Field(description="Tokens of `text` (the shipped tokenizer).")
    generated_at: datetime
    text: str
    items: list[PackItem] = Field(default_factory=list)
    dropped: int = Field(default=0, description="Items left out to stay within the budget.")
    warnings: list[str] = Field(default_factory=list)
