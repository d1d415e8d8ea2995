"""A fast pre-validator for landing: msgspec mirrors of the pydantic contract in ctxdb.events.

The pydantic models stay the contract. These structs accept a subset of what they accept (same
fields, limits and patterns; msgspec is stricter about types and timestamp formats), so a line
they accept is valid; any line they reject goes through `ctxdb.events.parse_event`, which accepts
it or names the reason. `tests/test_events_fast.py` checks the two agree on every example.
Decoding is ~5x cheaper than the pydantic path, which is what landing throughput needs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw, Struct

from ctxdb.events import (
    ANCHOR_MAX_CHARS,
    ANCHORS_MAX,
    MAX_EVENT_BYTES,
    REF_MAX_CHARS,
    SUMMARY_MAX_CHARS,
    SUMMARY_MAX_REFS,
)

# Python's `$` also matches before a trailing newline; `\Z` keeps the Rust-regex meaning.
RefId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}\Z")]
REF_ID = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$"
IDENT = r"^[A-Za-z0-9][A-Za-z0-9_\-@.:+]{0,127}$"
ID_PATTERNS = {
    "event_id": REF_ID,
    "conversation_id": REF_ID,
    "turn_id": REF_ID,
    "tenant": IDENT,
    "app": IDENT,
    "agent": IDENT,
    "user_id": IDENT,
}
"""Envelope id rules (the same patterns as ctxdb.events), checked on whole columns with polars."""
Aware = Annotated[datetime, Meta(tz=True)]


def Text(max_length: int, min_length: int = 0) -> Any:  # noqa: N802  (type factory)
    return Annotated[str, Meta(min_length=min_length, max_length=max_length)]


NonNegative = Annotated[int, Meta(ge=0)]
Anchor = Annotated[str, Meta(min_length=1, max_length=ANCHOR_MAX_CHARS)]
RefText = Annotated[str, Meta(min_length=1, max_length=REF_MAX_CHARS)]


def _check_relative(path: str) -> None:
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"path must be relative: {path!r}")


class Envelope(Struct, forbid_unknown_fields=True, gc=False):
    """Envelope fields; id patterns are checked per column afterwards (`ID_PATTERNS`)."""

    event_id: str
    schema_version: Literal[1]
    type: str
    occurred_at: Aware
    tenant: str
    app: str
    agent: str
    adapter: Literal["minimal", "langgraph", "claude_code", "react"]
    user_id: str
    conversation_id: str
    turn_id: str
    payload: Raw


class TurnStarted(Struct):
    pass


class TurnClosed(Struct):
    status: Literal["ok", "error", "cancelled"] = "ok"
    error_type: str | None = None


class UserSubmission(Struct):
    text: Text(100_000)
    event_type: Literal["prompt", "followup", "steer"] = "prompt"
    batch_id: RefId | None = None
    arrived_at: Aware | None = None


class UserContext(Struct):
    kind: Text(128, 1)
    label: Text(1024) = ""
    ref: Text(REF_MAX_CHARS) | None = None
    source: Text(1024) | None = None
    batch_id: RefId | None = None
    event: dict[str, Any] = {}


class AttachmentUploaded(Struct):
    name: Annotated[str, Meta(min_length=1, max_length=255, pattern=r"^[^/\\]+\Z")]
    mime: Text(255, 1)
    size: NonNegative
    storage_ref: Text(REF_MAX_CHARS, 1)
    extracted_text: Text(100_000) | None = None
    batch_id: RefId | None = None

    def __post_init__(self) -> None:
        _check_relative(self.name)


class ProgressStep(Struct):
    step: Text(128, 1)
    phase: Literal["start", "complete", "error"]
    tool: Text(128) | None = None
    status: Text(1024) | None = None
    title: Text(1024) | None = None


class FileHosted(Struct):
    path: Text(1024, 1)
    mime: Text(255, 1)
    size: NonNegative
    sha256: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]

    def __post_init__(self) -> None:
        _check_relative(self.path)


class AssistantCompletion(Struct):
    text: Text(200_000) = ""
    error: bool = False
    error_type: Text(256) | None = None
    tokens_in: NonNegative | None = None
    tokens_out: NonNegative | None = None


class WorkingSummary(Struct):
    text: Text(SUMMARY_MAX_CHARS)
    refs: Annotated[list[RefText], Meta(max_length=SUMMARY_MAX_REFS)] = []
    scope: Text(64) = "turn"


class RetrievalAnchors(Struct):
    phrases: Annotated[list[Anchor], Meta(max_length=ANCHORS_MAX)] = []
    entities: Annotated[list[Anchor], Meta(max_length=ANCHORS_MAX)] = []


class InternalNote(Struct):
    text: Text(SUMMARY_MAX_CHARS, 1)


class RichBlock(Struct):
    block_type: Literal[
        "react.tool.call", "react.tool.result", "react.thinking", "stage.suggested_followups"
    ]
    call_id: RefId | None = None
    tool: Text(128) | None = None
    text: Text(100_000) = ""
    meta: dict[str, Any] = {}


class Feedback(Struct):
    reaction: Literal["up", "down", "neutral"] | None = None
    text: Text(10_000) | None = None
    origin: Text(64) = "user"


class CommunicatorEvent(Struct):
    name: Literal[
        "chat.step", "chat.citations", "chat.followups", "accounting.usage", "chat.turn.summary"
    ]
    data: dict[str, Any] = {}


class StreamAggregate(Struct):
    marker: Literal["canvas", "tool", "subsystem"]
    name: Text(256, 1)
    chunks: list[str] | None = None
    chunks_num: NonNegative | None = None
    text: Text(100_000) | None = None


class ConversationTitle(Struct):
    title: Text(512, 1)


PAYLOADS: dict[str, type[Struct]] = {
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
_ENVELOPE = msgspec.json.Decoder(Envelope)
_PAYLOAD = {name: msgspec.json.Decoder(model) for name, model in PAYLOADS.items()}


def fast_event(line: bytes | str) -> Envelope | None:
    """The decoded envelope (payload kept raw, but validated) or None when the line needs the
    full pydantic path (invalid, or valid in a form these mirrors do not accept)."""
    size = len(line) if isinstance(line, bytes) else len(line.encode("utf-8", "surrogatepass"))
    if size > MAX_EVENT_BYTES:
        return None
    try:
        event = _ENVELOPE.decode(line)
        decoder = _PAYLOAD.get(event.type)
        if decoder is None:
            return None
        decoder.decode(event.payload)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None
    return event
