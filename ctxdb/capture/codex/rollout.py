"""Codex CLI rollouts: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl` read into turn records.

Each line is `{timestamp, type, payload}`. The first `session_meta` names the session
(`payload.id`) and its folder (`cwd`); `codex resume` appends to the same file. A fork writes a
new file: its own `session_meta`, then the parent's lines up to the chosen prompt copied (the
parent's `session_meta` and turn ids included, re-stamped with the fork's time), then its own
turns; the copies are the parent's (its file holds them) and are skipped up to the first turn
whose UUIDv7 `turn_id` is not older than the fork.

`event_msg` lines carry what the user saw: `user_message` (the prompt as typed), `task_started` /
`task_complete` / `turn_aborted` (a turn began, ended, was interrupted; newer versions give each a
`turn_id`) and `token_count` (`info.total_token_usage`, running totals for the session).
`response_item` lines carry what the model saw and did: `message` (role user: the prompt plus
injected context such as AGENTS.md and `<environment_context>`, never read here; role assistant:
`output_text` blocks), `function_call` / `custom_tool_call` with their `*_output` (linked by
`call_id`), `web_search_call`, and `reasoning` (never recorded). `turn_context` names the `model` of
the turns after it (carried by their answers) and their folder (`cwd`, whose git root is the turn's
project); `compacted` and the other `event_msg` types carry nothing a turn needs.

`records` turns the lines into the records `HostMapper` understands: the prompt is the
`user_message` (so injected context never becomes a prompt; one typed while the task with that
`turn_id` still runs is a steer of that turn, not a turn of its own), the answer is the last
assistant message of the turn, each call is a step, `task_complete` ends the turn (answered or
not; with its `error`, that error is the answer), `turn_aborted` ends it as cancelled, and a turn
that was started but neither completed nor aborted before the next one (Codex exited mid-turn)
is cancelled too. Token counts become per-call deltas of the totals, so a `token_count` line
written twice adds nothing.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ctxdb.capture.claude_code.transcript import (
    ASSISTANT,
    INTERRUPT,
    PROMPT,
    STEER,
    STOP,
    TOOL_RESULT,
    Record,
    ToolUse,
    tool_input_summary,
    tool_title,
)
from ctxdb.capture.hosts import Tokens

INJECTED = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<turn_aborted>",
)
"""Context Codex writes as user input; never a prompt."""
_EXIT = re.compile(r"Process exited with code (\d+)|\AExit code: (\d+)")
"""The exit code in a call's text output: `exec_command`'s header, or the first line of
`shell_command`'s (Codex 0.70-0.108)."""
_REFUSED = ("failed in sandbox", "exec_command failed", "execution error")
"""How the output of a call the sandbox or Codex itself failed begins (its command never ran
to an exit code of its own)."""


def _arguments(raw: Any) -> Any:
    """A call's arguments: the JSON object its `arguments` string holds (a `command` list joined
    into one line), else the raw value."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"arguments": raw}
    if isinstance(value, dict) and isinstance(value.get("command"), list):
        value = {**value, "command": " ".join(str(part) for part in value["command"])}
    return value


def _failed(output: Any) -> bool:
    """True when a call's output reports a non-zero exit code (text or `metadata.exit_code`) or
    a call that could not run."""
    if not isinstance(output, str):
        return False
    if output.startswith(_REFUSED):
        return True
    match = _EXIT.search(output)
    if match:
        return (match.group(1) or match.group(2)) != "0"
    try:
        decoded = json.loads(output)
    except ValueError:
        return False
    metadata = decoded.get("metadata") if isinstance(decoded, dict) else None
    code = metadata.get("exit_code") if isinstance(metadata, dict) else None
    return isinstance(code, int) and code != 0


def _failure(payload: dict) -> str | None:
    """The message of the error a `task_complete` ended its task with (a usage limit, the
    service unavailable: `error.message`, newer Codex releases), None when it succeeded."""
    error = payload.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return message.strip() if isinstance(message, str) and message.strip() else None


def _epoch_ms(ts: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO timestamp, None when it is not one."""
    try:
        stamp = datetime.fromisoformat(ts) if ts else None
    except ValueError:
        return None
    if stamp is None:
        return None
    return int((stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp() * 1000)


def _uuid7_ms(value: Any) -> int | None:
    """When a UUIDv7 was made (milliseconds since the epoch), None for anything else."""
    try:
        parsed = uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return parsed.int >> 80 if parsed is not None and parsed.version == 7 else None


_CALLS = {
    "function_call": ("tool", "arguments"),
    "custom_tool_call": ("tool", "input"),
    "local_shell_call": ("shell", "action"),
    "tool_search_call": ("tool_search", "arguments"),
}
"""Call items: the name of a call that gives none, and the field holding its input."""


def _tool_use(kind: str, call_id: str, payload: dict) -> ToolUse:
    """The step of a call item; an MCP tool Codex names within a `namespace`
    (`mcp__codex_apps__github` + `_create_issue`) carries its full name, as the model saw it."""
    default, field = _CALLS[kind]
    name = str(payload.get("name") or default)
    if isinstance(payload.get("namespace"), str):
        name = payload["namespace"] + name
    if kind == "custom_tool_call":
        raw: Any = {"input": payload.get("input")}
        summary = tool_input_summary(payload.get("input"))
    else:
        raw = _arguments(payload.get(field))
        summary = tool_input_summary(raw)
    return ToolUse(call_id, name, tool_title(name, raw), summary)


def _texts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "output_text"
        and isinstance(block.get("text"), str)
        and block["text"].strip()
    ]


class RolloutReader:
    """Reads one rollout's lines in order (`records`); `session_id` and `cwd` come from its
    `session_meta` (`saw_meta`: there was one), `open_task` says a turn was started and has not
    ended, `unanswered` that a prompt of a rollout without task events has no answer text yet.
    A sub-agent's rollout (`source.subagent`: a `/review`, an agent another one spawned) gives no
    records: its prompts come from its parent (whose rollout holds the review), not the person."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.cwd: str | None = None
        self.turn_cwd: str | None = None
        self.saw_meta = False
        self.subagent = False
        self.created_ms: int | None = None
        self.copied_from: str | None = None
        self.turn_id: str | None = None
        self.prompted: str | None = None
        self.said: tuple[str | None, str] | None = None
        self.open_task = False
        self.unanswered = False
        self.totals = (0, 0)
        self.model: str | None = None

    def records(self, number: int, line: Any) -> Iterator[Record | Tokens]:
        """The records of line `number` (decoded)."""
        if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
            return
        payload, ts = line["payload"], line.get("timestamp")
        ts = ts if isinstance(ts, str) else None
        if line.get("type") == "session_meta":
            self._meta(payload, ts)
        elif self.subagent:
            return
        elif self.copied_from and not self._own_turn(line):
            self._copied(line)
        elif line.get("type") == "turn_context":
            if isinstance(payload.get("model"), str) and payload["model"]:
                self.model = payload["model"]
            if isinstance(payload.get("cwd"), str) and payload["cwd"]:
                self.turn_cwd = payload["cwd"]
        elif line.get("type") == "event_msg":
            yield from self._event(number, payload, ts)
        elif line.get("type") == "response_item":
            yield from self._item(number, payload, ts)

    def _meta(self, payload: dict, ts: str | None) -> None:
        """The first `session_meta` names the file's session; a later one with another id opens
        the history a fork copied from its parent (`copied_from`)."""
        session = payload.get("id") if isinstance(payload.get("id"), str) else None
        if self.saw_meta:
            if session and session != self.session_id:
                self.copied_from = self.copied_from or session
            return
        self.saw_meta = True
        self.session_id = session or self.session_id
        source = payload.get("source")
        self.subagent = isinstance(source, dict) and "subagent" in source
        self.cwd = payload["cwd"] if isinstance(payload.get("cwd"), str) else None
        created = payload.get("timestamp") if isinstance(payload.get("timestamp"), str) else ts
        self.created_ms = _epoch_ms(created)

    def _own_turn(self, line: dict) -> bool:
        """Whether `line` starts this file's own turns after a fork's copied history: a turn
        event whose UUIDv7 `turn_id` was made at or after this session began (the copies keep
        their parent's ids, their line timestamps are the fork's). A turn id that tells no time
        (Codex before UUIDv7 turn ids) ends the copy too: a copy kept is a duplicate, a turn
        dropped would be lost."""
        payload = line["payload"]
        if line.get("type") != "turn_context" and payload.get("type") != "task_started":
            return False
        made = _uuid7_ms(payload.get("turn_id"))
        if made is None or self.created_ms is None or made >= self.created_ms:
            self.copied_from = None
            return True
        return False

    def _copied(self, line: dict) -> None:
        """A line of a parent's copied history: its records are the parent's (its own file
        holds them); only the running token totals carry on."""
        payload = line["payload"]
        if line.get("type") == "event_msg" and payload.get("type") == "token_count":
            self._tokens(payload)

    def _common(self, ts: str | None) -> dict[str, Any]:
        return {"ts": ts, "session_id": self.session_id, "cwd": self.turn_cwd or self.cwd}

    def _answer(self, ts: str | None, **fields: Any) -> Record:
        """An assistant record (text or tool calls) of the current model."""
        return Record(ASSISTANT, model=self.model, **fields, **self._common(ts))

    def _event(self, number: int, payload: dict, ts: str | None) -> Iterator[Record | Tokens]:
        kind = payload.get("type")
        if kind == "task_started":
            if self.open_task:
                yield Record(INTERRUPT, **self._common(ts))
                yield Record(STOP, **self._common(ts))
            self.open_task = True
            self.turn_id = (
                payload.get("turn_id") if isinstance(payload.get("turn_id"), str) else None
            )
        elif kind == "user_message":
            text = payload.get("message")
            if not isinstance(text, str) or not text.strip() or text.lstrip().startswith(INJECTED):
                return
            if (ts, text) == self.said:
                return  # the same message written twice (Codex does for a `/review` request)
            self.said = (ts, text)
            if self.open_task and self.turn_id and self.prompted == self.turn_id:
                yield Record(STEER, text=text.strip(), **self._common(ts))  # into the running task
                return
            if self.unanswered:  # the user went on before any answer: Codex was stopped
                yield Record(INTERRUPT, **self._common(ts))
            uuid = f"{self.session_id}-L{number}"
            if self.turn_id and self.prompted != self.turn_id:
                uuid, self.prompted = self.turn_id, self.turn_id
            self.unanswered = self.turn_id is None  # no task events (before Codex 0.4x) tell
            yield Record(PROMPT, uuid=uuid, text=text.strip(), **self._common(ts))
        elif kind in ("task_complete", "turn_aborted"):
            if kind == "turn_aborted":
                yield Record(INTERRUPT, **self._common(ts))
            elif failure := _failure(payload):
                yield self._answer(ts, texts=[failure], api_error=True)
            yield Record(STOP, **self._common(ts))
            self.open_task = False
        elif kind == "token_count" and (tokens := self._tokens(payload)):
            yield tokens

    def _tokens(self, payload: dict) -> Tokens | None:
        """What a `token_count` adds to the session's running totals (None: nothing)."""
        info = payload.get("info")
        usage = info.get("total_token_usage") if isinstance(info, dict) else None
        if not isinstance(usage, dict):
            return None
        now = (int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
        delta = (now[0] - self.totals[0], now[1] - self.totals[1])
        self.totals = now
        return Tokens(max(delta[0], 0), max(delta[1], 0)) if delta[0] > 0 or delta[1] > 0 else None

    def _item(self, number: int, payload: dict, ts: str | None) -> Iterator[Record]:
        kind = payload.get("type")
        common = self._common(ts)
        if kind == "message" and payload.get("role") == "assistant":
            texts = _texts(payload.get("content"))
            if texts:
                self.unanswered = False
                yield self._answer(ts, texts=texts)
        elif kind in _CALLS:
            call_id = payload.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                return
            yield self._answer(ts, tool_uses=[_tool_use(kind, call_id, payload)])
        elif kind in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
            call_id = payload.get("call_id")
            if isinstance(call_id, str) and call_id:
                failed = _failed(payload.get("output")) or payload.get("status") not in (
                    None,
                    "completed",
                )
                yield Record(TOOL_RESULT, results=[(call_id, failed, "")], **common)
        elif kind == "web_search_call":
            action = payload.get("action")
            call_id = f"{self.session_id}-L{number}"
            title, summary = tool_title("web_search", action), tool_input_summary(action)
            yield self._answer(ts, tool_uses=[ToolUse(call_id, "web_search", title, summary)])
            failed = payload.get("status") not in (None, "completed")
            yield Record(TOOL_RESULT, results=[(call_id, failed, "")], **common)
