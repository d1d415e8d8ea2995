"""Gemini CLI sessions: `~/.gemini/tmp/<project>/chats/session-*.json` read into turn records.

A session file is one JSON object `{sessionId, projectHash, startTime, lastUpdated, messages}`;
newer Gemini CLI versions append the same data as JSON lines to `session-*.jsonl` (a first line
with `sessionId` and `projectHash`, then one line per message, a later line with the same `id`
replacing the message, `{"$set": {...}}` updating the metadata (`messages` in it replaces them
all) and `{"$rewindTo": id}` dropping that message and everything after it), folded the way
Gemini CLI's own loader (`chatRecordingService.loadConversationRecord`) folds them. Both are read
one message at a time by `ctxdb.capture.gemini.files`.

Each message has `id`, `timestamp`, `type` (user | gemini | info | error | warning) and `content`
(a string or a list of parts with `text`). A `gemini` message may add `toolCalls` (`id`, `name`,
`args`, `status` success | error | cancelled, `result`), `thoughts` (never recorded), `tokens`
(`input`, `output`, ...) and the `model` that wrote it. `projectHash` is the SHA-256 of the
project folder's path.

`records` turns the messages into the records `HostMapper` understands: a user message is a
prompt unless Gemini CLI itself ignores it (empty, a `/command`, `?`, `<session_context>`,
`<hook_context>`); a gemini message is the answer so far and its tool calls (a call that did not
finish is left unanswered, so its turn ends cancelled); info "Request cancelled." is an
interrupt; an error message is an error answer, unless it follows a final answer (text and no
tool call: the model is done, so it is a slash command's or the UI's error, such as `/ide` or
`/permissions` typed afterwards, which Gemini CLI writes with no user message); other info and
warnings are skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, TypedDict

from ctxdb.capture.claude_code.transcript import (
    ASSISTANT,
    INTERRUPT,
    PROMPT,
    TOOL_RESULT,
    Record,
    ToolUse,
    tool_input_summary,
    tool_title,
)
from ctxdb.capture.gemini.files import Session
from ctxdb.capture.hosts import Tokens
from ctxdb.capture.reading import guarded

CANCELLED = "Request cancelled."
IGNORED = ("/", "?", "<session_context>", "<hook_context>")
"""User input Gemini CLI does not treat as conversation (its `isIgnoredUserContent`)."""
CONTINUE = "System: Please continue."
"""What Gemini CLI itself sends, as a user message of the same prompt, when the model's stream
broke off or its next-speaker check says the model should go on: the turn goes on."""
FINISHED = {"success": False, "error": True}
"""Tool call status -> failed; any other status (cancelled, still running) is unanswered."""


class SessionOrigin(TypedDict):
    """What every record of one session carries: the session id and, for the working
    directory, the project hash."""

    session_id: str
    cwd: str | None


def project_hash(folder: str) -> str:
    """The `projectHash` Gemini CLI gives a project folder (SHA-256 of its path)."""
    return hashlib.sha256(folder.encode()).hexdigest()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "".join(
        p if isinstance(p, str) else p.get("text", "")
        for p in parts
        if isinstance(p, str) or isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def records(session: Session) -> Iterator[Record | Tokens]:
    """The records of a folded session's messages, in order (a message they cannot be made of is
    counted in `session.counts.bad` and skipped)."""
    common: SessionOrigin = {"session_id": session.session_id, "cwd": session.project_hash}
    ended = False
    for message in session.messages:
        if isinstance(message, dict):
            if ended and message.get("type") == "error":
                continue  # after the turn's end: a slash command's or the UI's, not the model's
            ended = _ends_turn(message, ended)
        yield from guarded(session.counts, _message, message, common)


def _ends_turn(message: dict[str, Any], ended: bool) -> bool:
    """Whether the turn has ended once `message` is read (`ended`: before it). A final answer,
    "Request cancelled." or the model's error ends it; a prompt or "System: Please continue."
    opens it again. Errors after its end come from slash commands typed then (no user message
    records those), never from the model."""
    kind, text = message.get("type"), _text(message.get("content")).strip()
    if kind == "user":
        return ended and not (text == CONTINUE or _prompt(text))
    if kind == "gemini":
        return _final(message)
    return kind == "error" or (kind == "info" and text == CANCELLED) or ended


def _prompt(text: str) -> bool:
    """Whether a user message's text is a prompt the person typed."""
    return bool(text) and not text.startswith(IGNORED) and text != CONTINUE


def _final(message: dict[str, Any]) -> bool:
    """Whether a gemini message is an answer that ends its turn: text and no tool call."""
    return bool(_text(message.get("content")).strip()) and not message.get("toolCalls")


def _message(message: dict[str, Any], common: SessionOrigin) -> Iterator[Record | Tokens]:
    """The records of one message."""
    kind, ts = message.get("type"), message.get("timestamp")
    ts = ts if isinstance(ts, str) else None
    text = _text(message.get("content")).strip()
    if kind == "user" and _prompt(text):
        yield Record(PROMPT, ts=ts, uuid=message.get("id"), text=text, **common)
    elif kind == "info" and text == CANCELLED:
        yield Record(INTERRUPT, ts=ts, **common)
    elif kind == "error" and text:
        yield Record(
            ASSISTANT,
            ts=ts,
            message_id=message.get("id"),
            texts=[text],
            api_error=True,
            **common,
        )
    elif kind == "gemini":
        yield from _answer(message, text, ts, common)


def _answer(
    message: dict[str, Any], text: str, ts: str | None, common: SessionOrigin
) -> Iterator[Record | Tokens]:
    calls = [
        c
        for c in message.get("toolCalls") or []
        if isinstance(c, dict) and isinstance(c.get("id"), str)
    ]
    tools = [
        ToolUse(
            c["id"],
            str(c.get("name") or "tool"),
            tool_title(str(c.get("name") or "tool"), c.get("args")),
            tool_input_summary(c.get("args")),
        )
        for c in calls
    ]
    model = message.get("model")
    if text or tools:
        texts = [text] if text else []
        yield Record(
            ASSISTANT,
            ts=ts,
            message_id=message.get("id"),
            texts=texts,
            tool_uses=tools,
            model=model if isinstance(model, str) and model else None,
            **common,
        )
    done = [c for c in calls if c.get("status") in FINISHED]
    results = [(c["id"], FINISHED[c["status"]], "") for c in done]
    if results:
        yield Record(TOOL_RESULT, ts=ts, results=results, **common)
    tokens = message.get("tokens")
    if isinstance(tokens, dict):
        used = Tokens(int(tokens.get("input") or 0), int(tokens.get("output") or 0))
        if used.tokens_in or used.tokens_out:
            yield used
