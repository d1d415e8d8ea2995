"""Request and response contracts of the conversation search service (Python API, CLI and HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxdb.contract.events import Ident, RefId
from ctxdb.contract.projects import PROJECT_MAX_CHARS
from ctxdb.record.turns import TurnStatus

Scope = Literal["conversation", "user", "agent"]
Target = Literal["user", "assistant", "summary", "notes", "attachment", "steps"]
Arm = Literal["semantic", "lexical", "trigram"]
Mode = Literal["search", "catalog"]
StepKind = Literal["step", "tool_call", "tool_result", "thinking"]

ARMS: tuple[Arm, ...] = ("semantic", "lexical", "trigram")
DEFAULT_TARGETS: tuple[Target, ...] = ("user", "assistant", "summary", "attachment", "steps")
MIN_SCORE = 0.15  # default relevance floor (search/relevance.py)
WEAK_BELOW = 0.35  # a kept hit below this relevance is marked weak


class MissingQuery(ValueError):
    """A blank query without a time window or ordinal (HTTP 400 `missing_query`)."""

    code = "missing_query"


class NotFound(LookupError):
    """The conversation, turn or ref does not exist for this principal (HTTP 404, never 403)."""


class Weights(BaseModel):
    """Fusion weights; each is clamped to [0, 2]. None means the configured default."""

    model_config = ConfigDict(extra="forbid")

    semantic: float | None = Field(default=None, description="RRF weight of the kNN arm.")
    lexical: float | None = Field(default=None, description="RRF weight of the BM25 arm.")
    trigram: float | None = Field(default=None, description="RRF weight of the trigram arm.")
    recency: float | None = Field(default=None, description="Weight of the recency lift.")
    time: float | None = Field(
        default=None, description="Lift of turns inside the span a query's date names."
    )

    @field_validator("semantic", "lexical", "trigram", "recency", "time")
    @classmethod
    def _clamp(cls, value: float | None) -> float | None:
        return None if value is None else min(2.0, max(0.0, float(value)))


DAYS_MAX = 3650
"""The farthest back a limited `days` may reach."""
ALL_TIME = 0
"""`days` = 0: no age limit (the default); only retention (`expires_at`) bounds what is found."""
BRIEF_WORDS_MAX = 200
"""The largest `brief_words` a request may set."""


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
    weights: Weights = Field(default_factory=Weights)
    half_life_days: float | None = Field(
        default=None, gt=0, le=3650, description="Half-life of the recency lift, in days."
    )
    max_per_conversation: int | None = Field(
        default=None, ge=1, le=50, description="Cap on the turns of one conversation."
    )
    cap_user_scope: bool | None = Field(
        default=None,
        description="Whether the per-conversation cap applies in user and agent scope.",
    )
    coverage_power: float | None = Field(
        default=None,
        ge=0,
        le=4,
        description="Text arms count in proportion to coverage ** this (0: plain RRF).",
    )
    brief_words: int | None = Field(
        default=None,
        ge=1,
        le=BRIEF_WORDS_MAX,
        description="A turn whose longest matched row holds fewer distinct non-stopword words"
        " is scaled down: (n / brief_words) ** brief_power.",
    )
    brief_power: float | None = Field(
        default=None, ge=0, le=4, description="How strongly brief turns are scaled down (0: off)."
    )
    rrf_k: int | None = Field(
        default=None, ge=1, le=1000, description="Reciprocal-rank-fusion constant k."
    )
    diversity: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="Diversity over conversations: each turn picked from a conversation scales"
        " its next one by (1 - this) (0: off).",
    )
    answers_first: bool | None = Field(
        default=None,
        description="Rank a reply just ahead of the turn that asked the question it answers"
        " when both are found.",
    )
    focus_names: bool | None = Field(
        default=None,
        description="Leave out of the searched query a capitalized name (no preposition or article"
        " before it) found in none, or in at least half of ten or more, of the caller's"
        " conversations.",
    )
    split_questions: bool | None = Field(
        default=None,
        description="Ask the kNN arm each part of a compound question too (a new question after"
        " a '?' or an 'and'), interleaving the parts' rows.",
    )
    session_weight: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Session lift: kNN rows rank by their cosine plus this x their"
        " conversation's session-row cosine (0: off).",
    )
    min_score: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Relevance floor: hits whose strongest arm signal (cosine, query coverage)"
        f" is below this are dropped (default {MIN_SCORE}; 0: keep every hit).",
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
    """How a hit's score was computed: per-arm ranks/contributions, RRF sum and recency factor."""

    arms: dict[Arm, ArmExplain]
    rrf: float
    age_days: float
    recency: float
    recency_weight: float
    half_life_days: float
    in_window: bool | None = None
    window_weight: float = 0.0
    coverage_power: float = 0.0
    brevity: float = Field(
        default=1.0, description="min(1, n / brief_words) ** brief_power; 1: not brief."
    )
    brief_words: int = 0
    brief_power: float = 0.0
    final: float
    answers_turn: str | None = Field(
        default=None,
        description="The turn this reply was ranked just ahead of, whose question it answers"
        " (answers_first); its own final score may be lower.",
    )


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
