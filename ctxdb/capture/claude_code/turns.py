"""Claude Code turns as contract events: one state machine for the hook and the importer.

Mapping (docs/capture.md): conversation = Claude Code session; a turn = a real user prompt
through the last assistant text before the next prompt; each tool use = one `chat.step`;
thinking is never recorded; the session's first `cwd` is the `agent`, and each turn's
`turn.started` carries its `project` (`ctxdb.contract.projects.project_of` of the prompt's `cwd`:
the git root, else the folder), so search and the context pack can be scoped per project. The
completion carries the model that answered and the tokens of the turn's API messages (each
message's `usage` once, however many lines repeat it).

Ids are derived from the transcript, never from the clock: `turn_id` is the prompt line's
`uuid`, event ids are `cc-<turn_id>-start|prompt|answer|close` and `cc-<tool_use_id>` for a step.
The hook (`hook.py`) and the importer (`importer.py`) feed the same records through the same
`TurnMapper`, so a turn captured live and the same turn imported later carry the same event ids,
and landing keeps one copy. What the importer infers when a transcript went idle with its last
turn not ended by any line (its close, last answer, unanswered tool calls) is `provisional`,
under ids of its own: when the turn goes on, or a hook closes it, the events Claude Code writes
supersede it (`ctxdb.record.superseding`).

A step carries the tool call's input summary (`input`, at most `transcript.INPUT_CHARS`) and,
only when `output_chars` > 0 (`CTXDB_CLAUDE_CODE_TOOL_OUTPUT`, off by default), the text the tool
returned (`output`: `<private>` spans removed, then cut to `output_chars`).

A prompt becomes a turn when the assistant starts answering it, or when the user stops it before
any answer (a cancelled turn with no answer); a prompt that got no answer otherwise, such as a
blocked prompt or a local command, is not a turn; a task notice is never a prompt. A turn
ends where the transcript says so: at the next prompt, at the `stop_hook_summary` line Claude
Code writes once the Stop hooks ran, at a local command, or at the end of a finished transcript;
an interrupt marks it cancelled (the work a task notice triggers after an interrupt stays in the
interrupted turn). Every time comes from the transcript, so hooks and an import write the same
bytes. The mapper's state is a JSON-ready dict: the hook keeps it on disk between invocations.
Standard library only (the hook imports it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ctxdb.capture.claude_code.transcript import (
    ASSISTANT,
    CLEARED,
    COMPACT,
    DELIVERED,
    INTERRUPT,
    LOCAL,
    META,
    NAMED,
    NOTICE,
    PARTIAL,
    PROMPT,
    QUEUED,
    STEER,
    STOP,
    TOOL_RESULT,
    UNQUEUED,
    Record,
    is_steer,
)
from ctxdb.contract.private import strip_private, strip_private_open
from ctxdb.contract.projects import agent_for_project, project_of

ADAPTER = "claude_code"
SCHEMA_VERSION = 1
MAX_EVENT_BYTES = 256 * 1024
"""`ctxdb.contract.events.MAX_EVENT_BYTES`, repeated so the hook never imports pydantic (a test
keeps the two equal)."""
SUBMISSION_CHARS = 100_000
COMPLETION_CHARS = 200_000
TITLE_CHARS = 1_024
OUTPUT_MAX_CHARS = 32_000
"""Longest tool output a step may carry (`ctxdb.contract.events.STEP_OUTPUT_MAX_CHARS`)."""
NAME_CHARS = 128
MODEL_CHARS = 256
"""Longest model name a completion carries (`AssistantCompletion.model`)."""
TRUNCATED = " [truncated]"

_REF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_\-@.:+]+")


class Identity(NamedTuple):
    """Who the captured turns belong to: tenant, app and user (see docs/capture.md)."""

    tenant: str
    app: str
    user_id: str


def _digest(*parts: str) -> str:
    import hashlib  # only for fallback ids: loading OpenSSL costs every hook process a few ms

    return hashlib.sha1("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def safe_id(raw: str) -> str:
    """`raw` when it is a valid conversation/turn/event id, else a stable `x<sha1>` of it."""
    return raw if _REF_ID.match(raw) else "x" + _digest(raw)[:32]


def ident(raw: str, default: str = "unknown") -> str:
    """A tenant/app/agent/user value the contract accepts (`/`, spaces... become `-`)."""
    value = _NOT_IDENT.sub("-", raw).lstrip("-_@.:+")[:128]
    return value or default


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


def timestamp(value: str | None, fallback: str | None = None) -> str:
    """`value` when it is an ISO-8601 time with a zone (a naive one is taken as UTC), else
    `fallback`, else now."""
    if value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None:
            return value if parsed.tzinfo else parsed.replace(tzinfo=UTC).isoformat()
    return fallback or utc_now()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def fit(event: dict[str, Any], key: str) -> dict[str, Any]:
    """`event` with `payload[key]` cut until its JSON line fits `MAX_EVENT_BYTES`."""
    size = len(json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    while size > MAX_EVENT_BYTES:
        text = event["payload"][key]
        keep = max(0, int(len(text) * (MAX_EVENT_BYTES - 1024) / size) - len(TRUNCATED))
        event["payload"][key] = text[:keep] + TRUNCATED
        size = len(json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return event


def provisional(event: dict[str, Any]) -> dict[str, Any]:
    """`event` as inferred when its session went idle with the turn open: marked `provisional`
    (the contract's `Provisional`), with an id of its own, `<id>-settled-<digest of its
    content>`, so the events the host writes when the turn goes on (same ids, other content) land
    beside it and supersede it in derivation, and an unchanged file still writes the same ids."""
    payload = {**event["payload"], "provisional": True}
    digest = _digest(event["event_id"], event["occurred_at"], json.dumps(payload, sort_keys=True))
    base = event["event_id"][: 128 - len(_SETTLED) - 12]
    marked = {**event, "event_id": f"{base}{_SETTLED}{digest[:12]}", "payload": payload}
    key = "text" if "text" in payload else "output"
    return fit(marked, key) if key in payload else marked


_SETTLED = "-settled-"


def _accounting(turn: dict[str, Any]) -> dict[str, Any]:
    """The completion's `model` and token counts (summed over the turn's API messages), when
    the transcript recorded them."""
    out: dict[str, Any] = {}
    usage = list((turn.get("usage") or {}).values())
    if usage:
        out["tokens_in"] = sum(u[0] for u in usage)
        out["tokens_out"] = sum(u[1] for u in usage)
    if turn.get("model"):
        out["model"] = str(turn["model"])[:MODEL_CHARS]
    return out


class TurnMapper:
    """Feeds transcript records (and hook calls) through one session's turns; returns events.

    `state` (JSON-ready, kept by the caller) holds the project directory, the prompt waiting for
    an answer (`candidate`) and the open turn (ids, last answer text, tool uses without a result,
    steps already written). `clean` is applied to every text before it is written, the state
    included (by default `strip_private`: the hook saves the state to disk; an answer's unclosed
    `<private>` span is kept as its bare tag, so a later block of the same message still closes
    it); a step carries its tool's output only when `output_chars` > 0, cut to it.
    """

    def __init__(
        self,
        identity: Identity,
        session_id: str,
        state: dict[str, Any] | None = None,
        clean: Callable[[str], str] = strip_private,
        output_chars: int = 0,
    ) -> None:
        self.identity = identity
        self.session_id = session_id
        self.state: dict[str, Any] = state if state is not None else {}
        self.state.setdefault("project", None)
        self.state.setdefault("candidate", None)
        self.state.setdefault("turn", None)
        self.state.setdefault("queued", [])
        self.clean = clean
        self.output_chars = min(max(output_chars, 0), OUTPUT_MAX_CHARS)

    @property
    def turn(self) -> dict[str, Any] | None:
        return self.state["turn"]

    @property
    def candidate(self) -> dict[str, Any] | None:
        return self.state["candidate"]

    def feed(self, records: Iterable[Record]) -> list[dict[str, Any]]:
        """Events for `records` read from the session's transcript, in order."""
        events: list[dict[str, Any]] = []
        for record in records:
            if self.state["project"] is None and record.cwd:
                self.state["project"] = record.cwd
            if record.kind in (QUEUED, UNQUEUED, DELIVERED, NAMED, CLEARED, NOTICE, PROMPT):
                events += self._queue(record)
            if record.kind == META and self.state.get("dequeued"):
                events += self.close()  # a scheduled prompt the queue gave back: the turn is over
            self.state["dequeued"] = record.kind == UNQUEUED
            if record.kind == PROMPT:
                events += self.close()
                self.state["candidate"] = {
                    "uuid": record.uuid,
                    "session_id": record.session_id,
                    "text": self.clean(record.text),
                    "ts": timestamp(record.ts),
                    "cwd": record.cwd,
                    "images": [list(image) for image in record.images],
                }
            elif record.kind == INTERRUPT:
                events += self.start()  # a prompt stopped before any answer is still a turn
                if self.turn is not None:
                    self.turn["interrupted"] = True
                    self.turn["last_ts"] = timestamp(record.ts, self.turn["last_ts"])
                    self._take_partial()
            elif record.kind in (STOP, LOCAL):
                if record.kind == STOP:  # the host ran the prompt: answered or not, a turn
                    events += self.start()
                events += self.close(finished=record.kind == STOP)
                self.state["candidate"] = None
            elif record.kind == TOOL_RESULT and self.turn is not None:
                events += self._results(record)
            elif record.kind == COMPACT and self.turn is not None:
                events += self._unanswered("unknown")  # their results went with the compaction
            elif record.kind == STEER:
                events += self._steer(record.text, record.ts)
            elif record.kind == ASSISTANT:
                events += self._answer(record)
            if record.kind == PARTIAL and self.turn is not None:
                self.state["partial"] = [
                    record.texts[0],
                    timestamp(record.ts, self.turn["last_ts"]),
                ]
            elif record.kind not in (QUEUED, UNQUEUED, DELIVERED, NAMED):
                self.state["partial"] = None
        return events

    def _take_partial(self) -> None:
        """What the model had streamed when the user interrupted it (the synthetic line Claude
        Code writes just before the interrupt) becomes the turn's last answer text."""
        partial = self.state.get("partial")
        if partial and self.turn is not None:
            text, ts = partial
            self.turn.update(text=strip_private_open(self.clean(text)), text_ts=ts, error=False)
            self.turn["message_id"] = None

    def _results(self, record: Record) -> list[dict[str, Any]]:
        turn = self.turn
        assert turn is not None
        ts = timestamp(record.ts, turn["last_ts"])
        turn["last_ts"] = ts
        events = []
        for tool_use_id, is_error, output in record.results:
            pending = turn["pending"].pop(tool_use_id, None)
            if pending is not None:
                name, title, _, *summary = pending  # the input summary, when one was recorded
                status = "error" if is_error else "ok"
                summary_text = summary[0] if summary else ""
                events += self._step(tool_use_id, name, title, ts, status, summary_text, output)
        return events

    def _answer(self, record: Record) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.turn is None:
            if self.candidate is None:
                return events
            events += self.start()
        turn = self.turn
        assert turn is not None
        ts = timestamp(record.ts, turn["last_ts"])
        turn["last_ts"] = ts
        if record.model:
            turn["model"] = record.model
        if record.usage and record.message_id:  # a message's lines repeat its usage: one each
            turn.setdefault("usage", {})[record.message_id] = list(record.usage)
        if record.texts:
            text = "\n\n".join(record.texts)
            if record.message_id and record.message_id == turn["message_id"] and turn["text"]:
                text = f"{turn['text']}\n\n{text}"
            turn.update(text=strip_private_open(text), text_ts=ts, message_id=record.message_id)
            turn["error"] = record.api_error
        for tool in record.tool_uses:
            if tool.id not in turn["steps"]:
                title, summary = self.clean(tool.title), self.clean(tool.input)
                turn["pending"][tool.id] = [tool.name, title, ts, summary]
        return events

    def start(self) -> list[dict[str, Any]]:
        """Open the turn of the waiting prompt: `turn.started` and `user.submission`."""
        candidate = self.candidate
        if candidate is None or self.turn is not None:
            return []
        session = candidate.get("session_id") or self.session_id
        uuid = candidate.get("uuid") or _digest(session, candidate["ts"], candidate["text"])
        turn_id = safe_id(uuid)
        return self._open(turn_id, safe_id(session), candidate["text"], candidate["ts"])

    def start_fallback(self, prompt: str, ts: str) -> list[dict[str, Any]]:
        """Open a turn from a hook payload alone (no transcript to read): ids from the session,
        the prompt and its time, so an import of the same session cannot match them."""
        turn_id = "h" + _digest(self.session_id, ts, prompt)[:32]
        return self._open(turn_id, safe_id(self.session_id), prompt, ts)

    def _open(self, turn_id: str, conversation_id: str, text: str, ts: str) -> list[dict[str, Any]]:
        cwd = self.candidate.get("cwd") if self.candidate else None
        images = (self.candidate.get("images") if self.candidate else None) or []
        self.state["candidate"] = None
        self.state["turn"] = {
            "turn_id": turn_id,
            "conversation_id": conversation_id,
            "agent": agent_for_project(self.state["project"] or cwd),
            "last_ts": ts,
            "text": "",
            "text_ts": None,
            "message_id": None,
            "error": False,
            "interrupted": False,
            "pending": {},
            "steps": [],
            "model": None,
            "usage": {},
        }
        prompt = {"text": _cut(self.clean(text), SUBMISSION_CHARS), "event_type": "prompt"}
        prompt["arrived_at"] = ts
        project = project_of(cwd or self.state["project"])
        return [
            self._event("turn.started", "start", ts, {"project": project} if project else {}),
            fit(self._event("user.submission", "prompt", ts, prompt), "text"),
            *(self._image(n, media, size, ts) for n, (media, size) in enumerate(images, 1)),
        ]

    def _image(self, n: int, media: str, size: int, ts: str) -> dict[str, Any]:
        """A `user.context` of kind `image` for the `n`th image pasted into the prompt: what it
        was (the bytes are not kept)."""
        label = f"pasted image {n} ({media}, {size:,} bytes)" if size else f"pasted image {n}"
        event = {"media_type": media, "bytes": size}
        context = {"kind": "image", "label": label, "source": ADAPTER, "event": event}
        return self._event("user.context", f"image-{n}", ts, context)

    def _queue(self, record: Record) -> list[dict[str, Any]]:
        """Track messages typed while Claude Code was busy (`state["queued"]`: text without
        `<private>` spans, time typed). A message leaves the queue by the text it is named with
        (a `remove`, `dequeue`, the prompt or notice line it came back as), else the oldest
        first; one `delivered` into the running turn is its steer (one `named` only after its
        delivery, Claude Code 2.1.129+, is a steer timed then), and `cleared` (the user took them
        back to edit) empties the queue."""
        queued: list[list[Any]] = self.state["queued"]
        text = self.clean(record.text)
        if record.kind == NAMED:  # what a `remove` without text delivered, named after it
            if text == self.state.get("delivered") or not is_steer(text):
                return []  # its `remove` named it already
            return self._steer(text, record.ts)
        if record.kind == QUEUED:
            queued.append([text, record.ts])
            return []
        if record.kind == CLEARED:
            queued.clear()
            return []
        at = next((i for i, (t, _) in enumerate(queued) if t == text), None)
        if at is None and not text and queued and record.kind in (UNQUEUED, DELIVERED):
            # unnamed: the oldest; into a running turn, the oldest the user typed (a queued
            # notice can reach the model by a line the queue never hears of)
            steers = (i for i, (t, _) in enumerate(queued) if is_steer(t))
            at = next(steers, 0) if record.kind == DELIVERED else 0
        typed, typed_at = queued.pop(at) if at is not None else (text, None)
        if record.kind != DELIVERED or not is_steer(typed):
            return []
        self.state["delivered"] = typed
        return self._steer(typed, typed_at or record.ts)

    def _steer(self, text: str, ts: str | None) -> list[dict[str, Any]]:
        """A message the user typed while the turn ran, delivered into it (the turn of a prompt
        not yet answered opens): a `user.submission` of `event_type` steer, its id from its
        text and time (the same however the queue was read), timed when it was typed (else at
        the turn's last line)."""
        events = self.start()
        turn = self.turn
        if turn is None:
            return events
        at = timestamp(ts, turn["last_ts"])
        if datetime.fromisoformat(at) > datetime.fromisoformat(turn["last_ts"]):
            turn["last_ts"] = at
        steer = {"text": _cut(self.clean(text), SUBMISSION_CHARS), "event_type": "steer"}
        steer["arrived_at"] = at
        suffix = f"steer-{_digest(steer['text'], at)[:16]}"
        return [*events, fit(self._event("user.submission", suffix, at, steer), "text")]

    def hook_step(
        self, tool_use_id: str, name: str, title: str, ts: str, ok: bool = True, summary: str = ""
    ) -> list[dict[str, Any]]:
        """The step of a tool call reported by a hook (PostToolUse) in the open turn (its input
        `summary`; no output: that is read from the transcript)."""
        if self.turn is None:
            return []
        self.turn["pending"].pop(tool_use_id, None)
        return self._step(tool_use_id, name, title, ts, "ok" if ok else "error", summary)

    def _step(
        self,
        tool_use_id: str,
        name: str,
        title: str,
        ts: str,
        status: str,
        summary: str = "",
        output: str = "",
    ) -> list[dict]:
        turn = self.turn
        assert turn is not None
        if tool_use_id in turn["steps"]:
            return []
        turn["steps"].append(tool_use_id)
        payload = {
            "step": tool_use_id[:NAME_CHARS],
            "phase": "error" if status in ("error", "interrupted") else "complete",
            "tool": name[:NAME_CHARS],
            "status": status,
            "title": _cut(self.clean(title), TITLE_CHARS),
        }
        if summary := self.clean(summary).strip():
            payload["input"] = summary
        if self.output_chars and (text := self.clean(output).strip()):
            payload["output"] = _cut(text, self.output_chars)
        event = self._event("chat.step", safe_id(tool_use_id), ts, payload, step=True)
        return [fit(event, "output") if "output" in payload else event]

    def close(
        self, ts: str | None = None, text: str | None = None, finished: bool = False
    ) -> list[dict[str, Any]]:
        """Close the open turn: steps of tool uses that never returned, the completion (`text`
        when given, e.g. the Stop hook's `last_assistant_message`, else the last assistant text
        read) and `turn.closed` (ok; cancelled after an interrupt or with a tool call still
        unanswered, e.g. Claude Code was killed; error). A turn Claude Code `finished` itself
        (its Stop hooks ran) was not cut off: a tool use whose result the transcript lacks, as
        after a compaction in the middle of the turn, is a step of status `unknown`."""
        turn = self.turn
        if turn is None:
            return []
        cut_off = bool(turn["pending"]) and not finished
        events = self._unanswered(
            "unknown" if finished and not turn["interrupted"] else "interrupted"
        )
        answer = text or turn["text"]
        error = bool(turn["error"]) and not text
        close_ts = timestamp(ts, turn["last_ts"]) if ts else turn["last_ts"]
        if answer:
            payload = {"text": _cut(self.clean(answer), COMPLETION_CHARS), "error": error}
            if error:
                payload["error_type"] = "api_error"
            payload |= _accounting(turn)
            answer_ts = close_ts if text else (turn["text_ts"] or close_ts)
            completion = self._event("assistant.completion", "answer", answer_ts, payload)
            events.append(fit(completion, "text"))
        closed: dict[str, Any] = {"status": "ok"}
        if turn["interrupted"] or cut_off:
            closed = {"status": "cancelled", "error_type": "interrupted"}
        elif error or not answer:
            closed = {"status": "error", "error_type": "api_error" if error else "no_answer"}
        events.append(self._event("turn.closed", "close", close_ts, closed))
        self.state["turn"] = None
        return events

    def _unanswered(self, status: str) -> list[dict[str, Any]]:
        """Steps of `status` for the open turn's tool uses that never returned."""
        turn = self.turn
        assert turn is not None
        events: list[dict[str, Any]] = []
        for tool_use_id, (name, title, tool_ts, *summary) in list(turn["pending"].items()):
            events += self._step(tool_use_id, name, title, tool_ts, status, *summary)
        turn["pending"] = {}
        return events

    def finish(self, settled: bool) -> list[dict[str, Any]]:
        """End of a transcript read by the importer: the last turn is closed only when the
        transcript has `settled` (no longer written to), and then `provisional`ly: nothing in
        the file says the turn ended, and a turn waiting on a tool or on the model looks the
        same. A prompt never answered is dropped."""
        self.state["candidate"] = None
        return [provisional(event) for event in self.close()] if settled else []

    def _event(
        self, kind: str, suffix: str, ts: str, payload: dict[str, Any], step: bool = False
    ) -> dict[str, Any]:
        turn = self.turn
        assert turn is not None
        event_id = f"cc-{suffix}" if step else f"cc-{turn['turn_id']}-{suffix}"
        return {
            "event_id": event_id if len(event_id) <= 128 else "cc-" + _digest(event_id)[:32],
            "schema_version": SCHEMA_VERSION,
            "type": kind,
            "occurred_at": ts,
            "tenant": self.identity.tenant,
            "app": self.identity.app,
            "agent": turn["agent"],
            "adapter": ADAPTER,
            "user_id": self.identity.user_id,
            "conversation_id": turn["conversation_id"],
            "turn_id": turn["turn_id"],
            "payload": payload,
        }
