"""The raw turn event contract: one JSON object per line, validated before it lands.

Every event carries the same envelope (ids, identity, adapter, UTC timestamp) and a `payload`
whose model is chosen by `type` (docs/events.md). Validation is strict everywhere: no value is
coerced from another JSON type (`"5"` is not an integer, `1` is not a boolean, a number is not a
timestamp), since the raw payload is stored as written and derivation reads it back as typed.
Ids must be safe inside `conv:` refs, timestamps must carry a zone and lie in
[`EARLIEST`, `LATEST`), payload limits follow the reference. Every payload holds only what the
tables and derivation read back: integers within signed 64-bit, finite numbers, at most
`PAYLOAD_MAX_DEPTH` levels of nesting (`payload_problem`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError, from_json

from ctxdb.contract.projects import PROJECT_MAX_CHARS

SCHEMA_VERSION = 1
MAX_EVENT_BYTES = 256 * 1024
"""Largest accepted raw line (UTF-8 bytes); longer lines are quarantined as `oversize`."""

ADAPTERS = ("minimal", "langgraph", "claude_code", "react", "codex", "gemini_cli")
RICH_ADAPTERS = frozenset({"react"})
Adapter = Literal["minimal", "langgraph", "claude_code", "react", "codex", "gemini_cli"]

SUMMARY_MAX_CHARS = 24_000
SUMMARY_MAX_REFS = 64
REF_MAX_CHARS = 2_048
STEP_INPUT_MAX_CHARS = 2_048
STEP_OUTPUT_MAX_CHARS = 32_000
ANCHORS_MAX = 32
ANCHOR_MAX_CHARS = 256
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""Every integer in a payload lies in [INT64_MIN, INT64_MAX]: counts land in Int64 columns."""
PAYLOAD_MAX_DEPTH = 64
"""Levels of nesting a payload may hold, the payload object itself being level 1."""

RefId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$")]
"""Conversation, turn and event ids: letters, digits, `_` and `-` only (safe inside refs)."""

Ident = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-@.:+]{0,127}$")]
"""Tenant, app, agent and user ids: no `/`, `\\` or whitespace (they become storage path parts)."""


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
"""Timestamps lie in [EARLIEST, LATEST): every derived date (plus retention) stays inside what
Delta, polars and Elasticsearch represent."""


def utc_in_range(value: datetime) -> datetime:
    """The instant in UTC, refused outside [EARLIEST, LATEST)."""
    value = value.astimezone(UTC)
    if not EARLIEST <= value < LATEST:
        raise PydanticCustomError(
            "timestamp_out_of_range",
            "timestamp must be from 1970-01-01 up to (not including) 2200-01-01 UTC",
        )
    return value


UtcDatetime = Annotated[AwareDatetime, AfterValidator(utc_in_range)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
"""A count or size: non-negative and within an Int64 column."""
SchemaVersion = Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION)]
"""The one schema version (an int field: strict `Literal[1]` still takes `1.0` and `true`)."""


def relative_path(value: str) -> str:
    """`value` when it is a relative path with no empty, `.` or `..` segment and no `\\`."""
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"path must be relative with no empty, '.' or '..' segments: {value!r}")
    return value


RelPath = Annotated[
    str, StringConstraints(min_length=1, max_length=1024), AfterValidator(relative_path)
]
FileName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255, pattern=r"^[^/\\]+$"),
    AfterValidator(relative_path),
]
Anchor = Annotated[str, StringConstraints(min_length=1, max_length=ANCHOR_MAX_CHARS)]
RefText = Annotated[str, StringConstraints(min_length=1, max_length=REF_MAX_CHARS)]


class Payload(BaseModel):
    """Base of every payload model: unknown keys are kept out, types are checked strictly."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


Provisional = bool
"""`provisional` of a close, answer or step: inferred by an importer when the session file went
idle with the turn still open (the close, the last answer read, the tool calls not yet returned).
Any event of the same kind (and step) that is not provisional supersedes it in derivation
(`ctxdb.record.superseding`)."""


class TurnStarted(Payload):
    project: str | None = Field(default=None, min_length=1, max_length=PROJECT_MAX_CHARS)
    """The turn's project, for a coding host: the git root of its working folder, else the folder
    (`ctxdb.contract.projects.project_of`)."""


class TurnClosed(Payload):
    status: Literal["ok", "error", "cancelled"] = "ok"
    error_type: str | None = None
    provisional: Provisional = False


class UserSubmission(Payload):
    text: str = Field(max_length=100_000)
    event_type: Literal["prompt", "followup", "steer"] = "prompt"
    batch_id: RefId | None = None
    arrived_at: UtcDatetime | None = None


class UserContext(Payload):
    kind: str = Field(min_length=1, max_length=128)
    label: str = Field(default="", max_length=1024)
    ref: str | None = Field(default=None, max_length=REF_MAX_CHARS)
    source: str | None = Field(default=None, max_length=1024)
    batch_id: RefId | None = None
    event: dict[str, Any] = Field(default_factory=dict)


class AttachmentUploaded(Payload):
    name: FileName
    mime: str = Field(min_length=1, max_length=255)
    size: Count
    storage_ref: str = Field(min_length=1, max_length=REF_MAX_CHARS)
    extracted_text: str | None = Field(default=None, max_length=100_000)
    batch_id: RefId | None = None


class ProgressStep(Payload):
    step: str = Field(min_length=1, max_length=128)
    phase: Literal["start", "complete", "error"]
    tool: str | None = Field(default=None, max_length=128)
    status: str | None = Field(default=None, max_length=1024)
    title: str | None = Field(default=None, max_length=1024)
    input: str | None = Field(default=None, max_length=STEP_INPUT_MAX_CHARS)
    """A summary of the tool call's input (command, path, pattern...): searchable."""
    output: str | None = Field(default=None, max_length=STEP_OUTPUT_MAX_CHARS)
    """What the tool returned (opt-in per host), kept in the TurnLog, not searched."""
    provisional: Provisional = False


class FileHosted(Payload):
    path: RelPath
    mime: str = Field(min_length=1, max_length=255)
    size: Count
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class AssistantCompletion(Payload):
    text: str = Field(default="", max_length=200_000)
    error: bool = False
    error_type: str | None = Field(default=None, max_length=256)
    tokens_in: Count | None = None
    tokens_out: Count | None = None
    model: str | None = Field(default=None, max_length=256)
    """The model that answered (as the host names it), when the host records it."""
    provisional: Provisional = False


class WorkingSummary(Payload):
    text: str = Field(max_length=SUMMARY_MAX_CHARS)
    refs: list[RefText] = Field(default_factory=list, max_length=SUMMARY_MAX_REFS)
    scope: str = Field(default="turn", max_length=64)


class RetrievalAnchors(Payload):
    phrases: list[Anchor] = Field(default_factory=list, max_length=ANCHORS_MAX)
    entities: list[Anchor] = Field(default_factory=list, max_length=ANCHORS_MAX)


class InternalNote(Payload):
    text: str = Field(min_length=1, max_length=SUMMARY_MAX_CHARS)


class RichBlock(Payload):
    block_type: Literal[
        "react.tool.call", "react.tool.result", "react.thinking", "stage.suggested_followups"
    ]
    call_id: RefId | None = None
    tool: str | None = Field(default=None, max_length=128)
    text: str = Field(default="", max_length=100_000)
    meta: dict[str, Any] = Field(default_factory=dict)


class Feedback(Payload):
    reaction: Literal["up", "down", "neutral"] | None = None
    text: str | None = Field(default=None, max_length=10_000)
    origin: str = Field(default="user", max_length=64)


class CommunicatorEvent(Payload):
    name: Literal[
        "chat.step", "chat.citations", "chat.followups", "accounting.usage", "chat.turn.summary"
    ]
    data: dict[str, Any] = Field(default_factory=dict)


class StreamAggregate(Payload):
    marker: Literal["canvas", "tool", "subsystem"]
    name: str = Field(min_length=1, max_length=256)
    chunks: list[str] | None = None
    chunks_num: Count | None = None
    text: str | None = Field(default=None, max_length=100_000)


class ConversationTitle(Payload):
    title: str = Field(min_length=1, max_length=512)


PAYLOADS: dict[str, type[Payload]] = {
    "turn.started": TurnStarted,
    "turn.closed": TurnClosed,
    "user.submission": UserSubmission,
    "user.context": UserContext,
    "user.attachment": AttachmentUploaded,
    "chat.step": ProgressStep,
    "file.hosted": FileHosted,
    "assistant.completion": AssistantCompletion,
    "react.summary": WorkingSummary,
    "react.anchors": RetrievalAnchors,
    "react.note": InternalNote,
    "react.block": RichBlock,
    "feedback": Feedback,
    "communicator.event": CommunicatorEvent,
    "stream.aggregate": StreamAggregate,
    "conversation.title": ConversationTitle,
}
EVENT_TYPES = tuple(PAYLOADS)
ENVELOPE_COLUMNS = [
    "event_id",
    "type",
    "occurred_at",
    "tenant",
    "app",
    "agent",
    "adapter",
    "user_id",
    "conversation_id",
    "turn_id",
]
"""The envelope fields every event carries, as columns of `raw_turn_events` (payload aside)."""
RICH_EVENT_TYPES = frozenset({"react.summary", "react.anchors", "react.note", "react.block"})


class Envelope(BaseModel):
    """Fields every event carries; `payload` is validated by the model registered for `type`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    event_id: RefId
    schema_version: SchemaVersion
    type: str
    occurred_at: UtcDatetime
    tenant: Ident
    app: Ident
    agent: Ident
    adapter: Adapter
    user_id: Ident
    conversation_id: RefId
    turn_id: RefId
    payload: dict[str, Any]


INT64_RANGE = f"integer outside signed 64-bit [{INT64_MIN}, {INT64_MAX}]"


def _int64(value: Any) -> bool:
    """Whether `value` is no integer, or an integer within signed 64-bit."""
    return not isinstance(value, int) or INT64_MIN <= value <= INT64_MAX


def payload_problem(value: Any, path: str = "payload", depth: int = 1) -> tuple[str, str] | None:
    """The first value of a decoded JSON payload the tables cannot hold, as (reason, detail):
    an integer outside signed 64-bit or a non-finite number (`number_out_of_range`), or nesting
    deeper than `PAYLOAD_MAX_DEPTH` (`nesting_too_deep`); None when every value fits. Unknown
    payload keys count too: they are stored with the payload."""
    if not _int64(value):
        return "number_out_of_range", f"{path}: {INT64_RANGE}"
    if isinstance(value, float) and not math.isfinite(value):
        return "number_out_of_range", f"{path}: {value} is not a finite number"
    if isinstance(value, dict | list):
        if depth > PAYLOAD_MAX_DEPTH:
            return "nesting_too_deep", f"{path}: nested deeper than {PAYLOAD_MAX_DEPTH} levels"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            problem = payload_problem(item, f"{path}.{key}", depth + 1)
            if problem:
                return problem
    return None


def _event_model(type_name: str, payload: type[Payload]) -> type[BaseModel]:
    namespace = {
        "__annotations__": {"type": Literal[type_name], "payload": payload},
        "__module__": __name__,
    }
    return type(f"Event_{type_name.replace('.', '_')}", (Envelope,), namespace)


_EVENT_MODELS = tuple(_event_model(name, model) for name, model in PAYLOADS.items())
# A type form built at import from PAYLOADS: no static type names it.
_EVENTS: Any = Annotated[Union[_EVENT_MODELS], Field(discriminator="type")]  # noqa: UP007
_ADAPTER: TypeAdapter[Any] = TypeAdapter(_EVENTS)
"""A discriminated union over every event type: one Rust-side validation pass per line."""


class EventError(ValueError):
    """A raw line that is not a valid event; `reason` is a short machine-readable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


WRONG_TYPE_ERRORS = frozenset(
    {
        "bool_type",
        "datetime_type",
        "dict_type",
        "float_type",
        "int_type",
        "list_type",
        "model_attributes_type",
        "model_type",
        "string_type",
    }
)
"""Pydantic error types of a value of another JSON type (strict mode: never coerced)."""
JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _reason(error: ValidationError) -> EventError:
    first = error.errors(include_url=False)[0]
    kind = first["type"]
    parts = [str(p) for p in first["loc"]]
    loc = ".".join(parts[1:] if parts and parts[0] in PAYLOADS else parts)
    if kind == "json_invalid" and "recursion limit" in first["msg"]:
        detail = f"nested deeper than the parser reads: {first['msg']}"
        return EventError("nesting_too_deep", detail)
    if kind == "json_invalid":
        return EventError("malformed_json", first["msg"])
    if kind in {"model_type", "model_attributes_type", "dict_type"} and not loc:
        return EventError("malformed_json", "a line must hold one JSON object")
    if kind == "union_tag_invalid":
        return EventError("unknown_type", first["msg"])
    if kind == "union_tag_not_found":
        return EventError("missing_field", "type")
    if kind == "missing":
        return EventError("missing_field", loc)
    if kind == "timezone_aware":
        return EventError("naive_timestamp", loc)
    if kind == "timestamp_out_of_range":
        return EventError("timestamp_out_of_range", f"{loc}: {first['msg']}")
    if kind == "string_pattern_mismatch" and loc.split(".")[-1] in {
        "event_id",
        "conversation_id",
        "turn_id",
        "batch_id",
        "call_id",
        "tenant",
        "app",
        "agent",
        "user_id",
    }:
        return EventError("unsafe_id", f"{loc}: {first['msg']}")
    if loc == "schema_version":
        return EventError("unsupported_schema_version", first["msg"])
    if kind in {"greater_than_equal", "less_than_equal"} and not _int64(first["input"]):
        return EventError("number_out_of_range", f"{loc}: {INT64_RANGE}")
    if kind in WRONG_TYPE_ERRORS:
        got = JSON_TYPES.get(type(first["input"]), type(first["input"]).__name__)
        return EventError("wrong_type", f"{loc}: {first['msg']}, got a JSON {got}")
    if kind == "extra_forbidden":
        return EventError("unknown_field", loc)
    return EventError("invalid_field", f"{loc}: {first['msg']}")


def parse_event(line: str | bytes) -> Any:
    """Validate one raw JSON line into its typed event model, or raise `EventError`."""
    size = len(line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass"))
    if size > MAX_EVENT_BYTES:
        raise EventError("oversize", f"{size} bytes > {MAX_EVENT_BYTES}")
    try:
        event = _ADAPTER.validate_json(line)
    except ValidationError as exc:
        raise _reason(exc) from None
    problem = payload_problem(from_json(line)["payload"])
    if problem:
        raise EventError(*problem)
    return event
