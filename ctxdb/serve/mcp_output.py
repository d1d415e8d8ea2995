"""What the MCP tools answer: bounded pieces of text, the structured models and their text form.

Every tool result carries both a JSON object matching the tool's output schema (for the host
application) and a compact text rendering of the same content (for the model). Long text is cut to
a character budget on a word boundary; a cut piece says so (`truncated`, `chars`, `next_offset`)
and its text names the call that fetches the rest.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from ctxdb.contract.refs import Ref, format_ref
from ctxdb.record.turns import TurnStatus
from ctxdb.search.models import (
    NO_ANSWER,
    Answer,
    ConversationList,
    TurnHit,
    message_kind,
    status_marker,
)

TRUNCATED = "…[truncated]"
_SPACE = re.compile(r"\s+")


class Piece(BaseModel):
    """A bounded piece of a longer text."""

    text: str
    truncated: bool = Field(default=False, description="True when `text` stops before the end.")
    chars: int = Field(description="Length of the whole text, in characters.")
    offset: int = Field(default=0, description="Where `text` starts in the whole text.")
    next_offset: int | None = Field(
        default=None, description="Offset to ask for to read on (only when truncated)."
    )


def cut(text: str, budget: int, offset: int = 0) -> Piece:
    """`text[offset:]` cut to at most `budget` characters, on a word boundary when one is near."""
    whole = _SPACE.sub(" ", text).strip()
    rest = whole[offset:]
    if len(rest) <= budget:
        return Piece(text=rest, chars=len(whole), offset=offset)
    head = rest[:budget]
    boundary = head.rfind(" ")
    if boundary >= budget // 2:
        head = head[:boundary]
    end = offset + len(head)
    return Piece(
        text=head.rstrip(), truncated=True, chars=len(whole), offset=offset, next_offset=end
    )


def turn_ref(conversation_id: str, turn_id: str) -> str:
    """The canonical `conv:turn:` ref of a turn."""
    return format_ref(Ref(family="turn", conversation_id=conversation_id, turn_id=turn_id))


class HitOut(TurnHit):
    """A search hit with its ref and one snippet cut to the budget."""

    ref: str = Field(description="The turn's conv:turn: ref; get_turn returns the whole turn.")
    snippet_target: str | None = None
    snippet: Piece | None = None


class SearchOut(Answer[HitOut]):
    """The search tool's answer."""


class ConversationsOut(ConversationList):
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last page."
    )


class MessageOut(Piece):
    index: int = Field(description="Position in the turn; get_turn(message=index) reads on.")
    role: Literal["user", "assistant", "summary"]
    event_type: str | None = None
    ts: datetime | None = None


class FileOut(BaseModel):
    ref: str | None = Field(default=None, description="read_file(ref) returns the bytes.")
    filename: str | None = None
    mime: str | None = None
    size: int | None = None
    text: Piece | None = Field(default=None, description="Extracted text, when the turn has it.")


class TurnOut(BaseModel):
    conversation_id: str
    turn_id: str
    ref: str
    ordinal: int | None = None
    title: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: bool = False
    status: TurnStatus = Field(
        default="ok", description="ok, cancelled (interrupted by the user) or error."
    )
    error_type: str | None = Field(default=None, description="What stopped or failed the turn.")
    messages: list[MessageOut]
    attachments: list[FileOut] = Field(default_factory=list)
    files: list[FileOut] = Field(default_factory=list, description="Hosted output files.")
    citations: list[dict[str, Any]] = Field(default_factory=list)


class WindowTurn(BaseModel):
    turn_id: str
    ref: str
    position: int = Field(description="1-based position in the conversation (oldest first).")
    anchor: bool = Field(default=False, description="The turn the window is centred on.")
    started_at: datetime | None = None
    title: str | None = None
    user: Piece | None = None
    assistant: Piece | None = None


class WindowOut(BaseModel):
    conversation_id: str
    turn_id: str
    total_turns: int
    turns: list[WindowTurn]


class FileReadOut(BaseModel):
    ref: str
    filename: str
    mime: str
    size: int
    inline: bool = Field(description="True when `text` holds the whole file.")
    text: str | None = None
    reason: str | None = Field(default=None, description="Why the file is linked, not inlined.")


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "?"


def _piece(piece: Piece, more: str) -> str:
    if not piece.truncated:
        return piece.text
    if piece.next_offset is None:
        return f"{piece.text} {TRUNCATED} {more}"
    left = piece.chars - piece.next_offset
    return f"{piece.text} {TRUNCATED} {left} more characters: {more}"


def render_search(out: SearchOut) -> str:
    lines = [f"{out.mode}: {len(out.hits)} hit(s) for {out.query!r}"]
    for i, hit in enumerate(out.hits, start=1):
        ordinal = f" #{hit.ordinal}" if hit.ordinal is not None else ""
        title = f" {hit.title!r}" if hit.title else ""
        matched = f" [{','.join(hit.matched_targets)}]" if hit.matched_targets else ""
        weak = " (weak match)" if hit.weak else ""
        lines.append(
            f"{i}. {hit.conversation_id}/{hit.turn_id}{ordinal}{title} {_when(hit.ts)}{matched}"
            f"{weak}{status_marker(hit.status, hit.error_type)}"
        )
        if hit.snippet:
            whole = f"get_turn(conversation_id={hit.conversation_id!r}, turn_id={hit.turn_id!r})"
            lines.append(f"   {hit.snippet_target}: {_piece(hit.snippet, whole)}")
    lines += [f"warning: {w}" for w in out.warnings]
    return "\n".join(lines)


def render_conversations(out: ConversationsOut) -> str:
    lines = [
        f"{_when(c.last_activity_at)}  {c.conversation_id}  {c.turns} turn(s)"
        f"{'  agent ' + c.agent if c.agent else ''}  {c.title or ''}".rstrip()
        for c in out.conversations
    ]
    if not lines:
        lines = ["no conversations"]
    if out.next_cursor:
        lines.append(f"more: list_conversations(cursor={out.next_cursor!r})")
    return "\n".join(lines)


def _file_line(kind: str, card: FileOut) -> str:
    size = f" {card.size} bytes" if card.size is not None else ""
    line = f"{kind}: {card.filename or '?'} ({card.mime or '?'}{size}) {card.ref or ''}".rstrip()
    if card.text and card.text.text:
        line += f"\n   text: {_piece(card.text, f'read_file({card.ref!r})')}"
    return line


def render_turn(out: TurnOut) -> str:
    ordinal = f" #{out.ordinal}" if out.ordinal is not None else ""
    title = f" {out.title!r}" if out.title else ""
    marker = status_marker(out.status, out.error_type)
    lines = [f"{out.conversation_id}/{out.turn_id}{ordinal}{title} {_when(out.started_at)}{marker}"]
    if out.error:
        lines.append("(the turn ended in an error)")
    for m in out.messages:
        more = (
            f"get_turn(conversation_id={out.conversation_id!r}, turn_id={out.turn_id!r}, "
            f"message={m.index}, offset={m.next_offset})"
        )
        lines.append(f"[{m.index}] {m.role}{message_kind(m.event_type)}: {_piece(m, more)}")
    if out.status == "cancelled" and not any(m.role == "assistant" for m in out.messages):
        lines.append(NO_ANSWER)
    lines += [_file_line("attachment", a) for a in out.attachments]
    lines += [_file_line("file", f) for f in out.files]
    lines += [f"citation: {c}" for c in out.citations]
    return "\n".join(lines)


def render_window(out: WindowOut) -> str:
    lines = [f"{out.conversation_id}: {len(out.turns)} of {out.total_turns} turn(s)"]
    for t in out.turns:
        mark = "*" if t.anchor else " "
        title = f" {t.title!r}" if t.title else ""
        lines.append(f"{mark}#{t.position} {t.turn_id}{title} {_when(t.started_at)}")
        whole = f"get_turn(conversation_id={out.conversation_id!r}, turn_id={t.turn_id!r})"
        if t.user:
            lines.append(f"   user: {_piece(t.user, whole)}")
        if t.assistant:
            lines.append(f"   assistant: {_piece(t.assistant, whole)}")
    return "\n".join(lines)
