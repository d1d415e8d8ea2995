"""Request and response contracts of the conversation search service (Python API, CLI and HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxdb.contract.events import Ident, RefId
from ctxdb.contract.projects import PROJECT_MAX_CHARS
from ctxdb.record.turns import TurnStatus
from ctxdb.settings.search import KnobOverrides, SearchKnobs

Scope = Literal["conversation", "user", "agent"]
Target = Literal["user", "assistant", "summary", "notes", "attachment", "steps"]
Arm = Literal["semantic", "lexical", "trigram"]
Mode = Literal["search", "catalog"]
StepKind = Literal["step", "tool_call", "tool_result", "thinking"]

ARMS: tuple[Arm, ...] = ("semantic", "lexical", "trigram")
DEFAULT_TARGETS: tuple[Target, ...] = ("user", "assistant", "summary", "attachment", "steps")
WEAK_BELOW = 0.35  # a kept hit below this relevance is marked weak


class MissingQuery(ValueError):
    """A blank query without a time window or ordinal (HTTP 400 `missing_query`)."""

    code = "missing_query"


class NotFound(LookupError):
    """The conversation, turn or ref does not exist for this principal (HTTP 404, never 403)."""


DAYS_MAX = 3650
"""The farthest back a limited `days` may reach."""
ALL_TIME = 0
"""`days` = 0: no age limit (the default); only retention (`expires_at`) bounds what is found."""


class SearchRequest(BaseModel):
    """One search or catalog call, the same model on every face (HTTP body, MCP arguments, CLI
    options, the viewer): an unknown field is an error. The principal is never part of it."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(default="", description="Free text; cut to the configured length.")
    scope: Scope = "user"
    targets: list[Target] = Field(default_factory=lambda: list(DEFAULT_TARGETS))
    conversation_id: RefId | None = Field(
        default=None, description="Required for scope=conversation."
    )
    agent: Ident | None = Field(
        default=None, description="Required for scope=agent; else a filter."
    )
    project: str | None = Field(
        default=None,
        min_length=1,
        max_length=PROJECT_MAX_CHARS,
        description="Only turns of this project: a coding host's git root of the turn's folder,"
        " else the folder, as recorded (the TurnLog `project`).",
    )
    since: datetime | None = Field(
        default=None, description="Window start (inclusive); without a UTC offset it is UTC."
    )
    until: datetime | None = Field(
        default=None, description="Window end (inclusive); without a UTC offset it is UTC."
    )
    ordinal: int | None = Field(
        default=None, description="Catalog lookup: 1 = first turn, n = n-th, -1 = last, -n."
    )
    top_k: int = Field(default=5, ge=1, le=50)
    days: int = Field(
        default=ALL_TIME,
        ge=0,
        le=DAYS_MAX,
        description="Only rows newer than this many days; 0 (the default): all time. A `since`"
        " earlier than the window widens it.",
    )
    knobs: KnobOverrides = Field(
        default_factory=KnobOverrides,
        description="Ranking knobs to change for this search, by name (docs/search-api.md,"
        ' "Knobs"); an unset one keeps its configured default, an unknown name is an error.',
    )
    explain: bool = False
    snippets: list[Target] | None = Field(
        default=None, description="Snippet targets to materialize; default: the search targets."
    )

    @field_validator("query")
    @classmethod
    def _query_is_unicode(cls, value: str) -> str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("query must be valid Unicode (it holds a lone surrogate)") from None
        return value

    @field_validator("since", "until")
    @classmethod
    def _naive_is_utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @field_validator("targets")
    @classmethod
    def _targets_not_empty(cls, value: list[Target]) -> list[Target]:
        if not value:
            raise ValueError(
                "targets must name at least one of user|assistant|summary|notes|attachment|steps"
            )
        return list(dict.fromkeys(value))

    @field_validator("ordinal")
    @classmethod
    def _ordinal_not_zero(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("ordinal is 1-based (1 = first, -1 = last); 0 is not a turn")
        return value

    @model_validator(mode="after")
    def _scope_needs_its_id(self) -> SearchRequest:
        if self.scope == "conversation" and not self.conversation_id:
            raise ValueError("scope=conversation needs conversation_id")
        if self.scope == "agent" and not self.agent:
            raise ValueError("scope=agent needs agent")
        if self.ordinal is not None and not self.conversation_id:
            raise ValueError("an ordinal lookup needs conversation_id")
        if self.since and self.until and self.since > self.until:
            raise ValueError("since must not be after until")
        return self

    def ranking_knobs(self, defaults: SearchKnobs) -> SearchKnobs:
        """The knobs this search ranks under: `defaults` (the settings') with its overrides."""
        return defaults.with_overrides(self.knobs.given())

    @property
    def snippet_targets(self) -> list[Target]:
        return list(self.snippets) if self.snippets is not None else list(self.targets)

    @property
    def has_window(self) -> bool:
        return self.since is not None or self.until is not None

    def oldest(self, now: datetime) -> datetime | None:
        """Where the searched rows begin: `since` when given (even before the `days` window,
        which it widens), else `now - days`; None for all time."""
        if self.since is not None:
            return self.since
        return now - timedelta(days=self.days) if self.days != ALL_TIME else None

    def widened_by_since(self, now: datetime) -> bool:
        """Whether `since` reaches back before the `days` window."""
        return (
            self.since is not None
            and self.days != ALL_TIME
            and self.since < now - timedelta(days=self.days)
        )


class Snippet(BaseModel):
    """A piece of the turn shown for a hit, from its TurnLog (or the matched row as a fallback)."""

    target: Target
    text: str
    path: str | None = None
    ts: datetime | None = None
    source: Literal["turn_log", "retrieval_row"] = "turn_log"


class ArmExplain(BaseModel):
    rank: int | None = None
    score: float | None = None
    weight: float = 0.0
    coverage: float | None = Field(
        default=None, description="Share of the query's terms in the arm's row (coverage.py)."
    )
    contribution: float = 0.0
    session: float | None = Field(
        default=None,
        description="kNN arm under the session lift: the cosine of the row's conversation's"
        " session row (sessions.py).",
    )
    lifted: float | None = Field(
        default=None,
        description="kNN arm under the session lift: the row's cosine plus session_weight times"
        " `session`, the value that ordered the whole query's rows (null on a row a part of a"
        " compound question found first).",
    )


class Explain(BaseModel):
    """How a hit's score was computed: per-arm ranks/contributions, RRF sum, recency, window
    and brevity factors, and the knobs (all of them) the search ranked under."""

    arms: dict[Arm, ArmExplain]
    rrf: float
    age_days: float
    recency: float
    in_window: bool | None = None
    brevity: float = Field(
        default=1.0, description="min(1, n / brief_words) ** brief_power; 1: not brief."
    )
    final: float
    answers_turn: str | None = Field(
        default=None,
        description="The turn this reply was ranked just ahead of, whose question it answers"
        " (answers_first); its own final score may be lower.",
    )
    knobs: SearchKnobs = Field(description="Every knob the search ranked under.")


class TurnHit(BaseModel):
    """A turn an answer names: which one, where and when, and how it matched. Every face's hit
    holds these (the HTTP API's `SearchHit`, the MCP tool's `HitOut`)."""

    conversation_id: str
    turn_id: str
    score: float | None = Field(default=None, description="Fused score; null for catalog hits.")
    matched_targets: list[Target] = Field(default_factory=list)
    ts: datetime | None = None
    ordinal: int | None = None
    title: str | None = None
    agent: str | None = None
    weak: bool = Field(default=False, description=f"A weak match: relevance below {WEAK_BELOW}.")
    status: str = Field(
        default="ok", description="How the turn ended: ok, cancelled (interrupted) or error."
    )
    error_type: str | None = Field(
        default=None,
        description="Why a cancelled or failed turn ended (interrupted, api_error...).",
    )


class SearchHit(TurnHit):
    target: Target | None = Field(default=None, description="The target of the best-ranked row.")
    relevance: float | None = Field(
        default=None,
        description="Strongest arm signal on a 0..1 scale comparable across queries; None for"
        " catalog hits.",
    )
    snippets: list[Snippet] = Field(default_factory=list)
    explain: Explain | None = None


HitT = TypeVar("HitT", bound=TurnHit)


class Answer(BaseModel, Generic[HitT]):
    """A search or catalog answer: its mode, the query it ran (cut to the configured length),
    its hits and warnings. Each face picks the form of its hits."""

    mode: Mode
    query: str
    hits: list[HitT]
    warnings: list[str] = Field(default_factory=list)


class SearchResponse(Answer[SearchHit]):
    """The service's answer, with whole hits (snippets, explain)."""


class Identity(BaseModel):
    """Who the bearer token speaks for (the viewer names the user in its header)."""

    user_id: str
    tenant: str | None = None


class ConversationSummary(BaseModel):
    conversation_id: str
    title: str | None = None
    agent: str | None = None
    turns: int
    started_at: datetime | None = None
    last_activity_at: datetime | None = None


class ConversationList(BaseModel):
    conversations: list[ConversationSummary]
    next_offset: int | None = None
    """Pass as `offset` for the next page; null on the last page."""


class TimelineTurn(BaseModel):
    """One turn in a conversation's timeline: where it stands, how it closed, how it began."""

    turn_id: str
    ordinal: int
    ts: datetime | None = None
    status: str = "ok"
    error_type: str | None = None
    prompt: str = ""
    answer: str = ""


class ConversationTurns(BaseModel):
    """A page of one conversation's turns, oldest first (`offset` turns skipped)."""

    conversation_id: str
    title: str | None = None
    agent: str | None = None
    total: int
    offset: int
    turns: list[TimelineTurn]


class Message(BaseModel):
    role: Literal["user", "assistant"]
    text: str
    ts: datetime | None = None
    path: str | None = None
    event_type: str | None = None


class Step(BaseModel):
    """One step of a turn's work: a progress step, a tool call or result, or the thinking."""

    kind: StepKind
    text: str = ""
    tool: str | None = None
    status: str | None = None
    call_id: str | None = None
    input: str | None = None
    """The tool call's input summary (command, path...), when the host recorded it."""
    output: str | None = None
    """What the tool returned, when the host records tool output (opt-in)."""
    ts: datetime | None = None
    path: str | None = None


class FileCard(BaseModel):
    """An attachment card or hosted output file of a turn (pull its bytes by `ref`)."""

    ref: str | None = None
    path: str | None = None
    filename: str | None = None
    mime: str | None = None
    size: int | None = None
    hosted_uri: str | None = None
    text: str | None = None


NO_ANSWER = "(interrupted before an answer)"
"""What text outputs show in place of the answer of a turn cancelled before any."""


def status_marker(status: str, error_type: str | None) -> str:
    """The marker text outputs put after a turn's heading: "" for an answered turn, else
    " [interrupted]" or " [error: <type>]"."""
    if status == "cancelled":
        return " [interrupted]"
    if status == "error":
        return f" [error: {error_type}]" if error_type else " [error]"
    return ""


ERROR_ANSWER = "error"
"""The `event_type` of an answer that is the error a turn failed with (its text is the host's
or the model provider's message, not the assistant's words)."""
CUT_OFF = "interrupted"
"""The `event_type` of the answer of a turn the user interrupted: what it had written so far."""
_MESSAGE_KINDS = {
    "user.followup": "follow-up",
    "user.steer": "steer",
    ERROR_ANSWER: "error",
    CUT_OFF: "cut off",
}


def message_kind(event_type: str | None) -> str:
    """The label text outputs put after a message's role: "" for a prompt or an answer, else
    " (steer)", " (follow-up)", " (error)" or " (cut off)"."""
    label = _MESSAGE_KINDS.get((event_type or "").removeprefix("event."))
    return f" ({label})" if label else ""


class TurnView(BaseModel):
    """A known turn reconstructed from its TurnLog."""

    conversation_id: str
    turn_id: str
    title: str | None = None
    ordinal: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: bool = False
    status: TurnStatus = "ok"
    """How the turn closed: ok, cancelled (stopped by the user) or error."""
    error_type: str | None = None
    """What stopped or failed it (e.g. `interrupted`, `api_error`), when known."""
    messages: list[Message]
    steps: list[Step] = Field(default_factory=list)
    attachments: list[FileCard]
    files: list[FileCard]
    citations: list[dict[str, Any]]
    summary: str | None = None
