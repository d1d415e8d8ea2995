"""Claude Code transcripts: read `~/.claude/projects/<project>/<session>.jsonl` into records.

A transcript is JSONL. Lines of `type` user | assistant carry `uuid`, `parentUuid`,
`sessionId`, `timestamp`, `cwd`, `isSidechain`, `isMeta` and `message{role, content}`; an
assistant message is written as one line per content block (`text`, `thinking`, `tool_use`)
sharing `message.id`; tool results come back as user lines holding `tool_result` blocks. Of the
`system` lines, `stop_hook_summary` (written after the Stop hooks ran: the answer ended) and
`local_command` (a local command such as `/mcp` ran) mark where turns end, `compact_boundary`
where the context was compacted (a tool use before it gets no result line), `api_error` a call to
the model that failed (the turn's error answer unless a retry answers); the other types
(summary, file-history-snapshot, progress, ...) carry nothing a turn needs and are
skipped. A `queue-operation` line tracks a message typed while Claude Code was busy: one it
`remove`s from the queue went into the running turn (a steer) and has no user line of its own;
newer versions also queue a record of each background task (JSON with a `task_id`), never a steer;
from 2.1.129 the queue lines carry no text and a `queued_command` `attachment` line after the
`remove` names the message delivered. The other attachments carry nothing a turn needs.
A background-task notice (`<task-notification>...` injected as a user line) is not a prompt: it
is skipped.

`classify` turns one decoded line into a small `Record` the turn mapper understands; `read_from`
reads the complete lines after a byte offset (a truncated last line is left for later, a line that
is not JSON is counted as bad). Standard library only: the hook imports this module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypedDict

from ctxdb.capture.reading import LINE_ERRORS, MAX_LINE_BYTES, decode, open_regular

PROMPT = "prompt"
ASSISTANT = "assistant"
TOOL_RESULT = "tool_result"
INTERRUPT = "interrupt"
STOP = "stop"
LOCAL = "local"
COMPACT = "compact"
QUEUED = "queued"
UNQUEUED = "unqueued"
DELIVERED = "delivered"
CLEARED = "cleared"
NOTICE = "notice"
NAMED = "named"
META = "meta"
PARTIAL = "partial"
STEER = "steer"

_COMMAND = re.compile(r"<command-name>\s*(?P<name>[^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(?P<args>.*?)</command-args>", re.DOTALL)
_LOCAL_OUTPUT = ("<local-command-stdout>", "<local-command-stderr>")
_NOT_PROMPTS = ("<local-command-caveat>", "<task-notification>")
_INTERRUPTED = "[Request interrupted by user"
_SLASH_COMMAND = re.compile(r"/[\w:.-]+(\s|$)")
SYNTHETIC = "<synthetic>"
"""The `message.model` of assistant lines Claude Code writes itself (placeholders, API errors)."""
PLACEHOLDERS = ("No response requested.", "(no content)")
"""Synthetic answers Claude Code writes in place of one (never the model's words)."""
THINKING = ("thinking", "redacted_thinking")
"""Blocks of the model's thinking: never recorded, but they say the model took up the prompt
(a prompt answered only by thinking is a turn without an answer, not no turn)."""
TITLE_CHARS = 200
_SYSTEM_KINDS = {"stop_hook_summary": STOP, "local_command": LOCAL, "compact_boundary": COMPACT}


INPUT_CHARS = 500
"""Longest input summary of a tool call (`tool_input_summary`)."""
INPUT_VALUE_CHARS = 300
"""Longest string value inside an input summary."""
_INPUT_KEYS = (
    "command",
    "file_path",
    "notebook_path",
    "path",
    "pattern",
    "glob",
    "url",
    "query",
    "description",
)
"""Input keys an input summary leads with: what was run, read or changed."""


class LineOrigin(TypedDict):
    """What every record of one transcript line carries: its time, line and session ids, and
    the working directory."""

    ts: str | None
    uuid: str | None
    session_id: str | None
    cwd: str | None


class ToolUse(NamedTuple):
    """One `tool_use` block: the call id, tool name, a one-line title and the input summary."""

    id: str
    name: str
    title: str
    input: str = ""


class Record:
    """One transcript line the turn mapper acts on.

    kind: `prompt` (a real user prompt: not a tool result, not meta, not a command's output, not a
    task notice), `assistant` (text blocks and tool uses of one line), `tool_result` (results of
    earlier tool uses: `(tool_use_id, is_error, output)`), `interrupt` (the user stopped the
    answer), `stop` (the Stop hooks ran: the answer ended), `local` (a local command ran and
    printed its output: the command before it gets no answer), `compact` (the context was
    compacted: tool uses before it get no result), `notice` (a task notice or local-command
    caveat written as a user line: never a prompt), or a message typed while Claude Code was
    busy: `queued` (its text), `unqueued` (it becomes the next prompt), `delivered` (it went into
    the running turn as a steer) or `cleared` (every queued message taken back). Other hosts'
    readers also give `steer` (a message with its `text` the user sent into the running turn).
    An `assistant` record may name the `model` that wrote it and its message's token `usage`
    (prompt, output); a `prompt` lists the `images` pasted into it (media type, bytes).
    """

    __slots__ = (
        "kind",
        "ts",
        "uuid",
        "session_id",
        "cwd",
        "text",
        "message_id",
        "texts",
        "tool_uses",
        "results",
        "api_error",
        "model",
        "usage",
        "images",
    )

    def __init__(
        self,
        kind: str,
        ts: str | None = None,
        uuid: str | None = None,
        session_id: str | None = None,
        cwd: str | None = None,
        text: str = "",
        message_id: str | None = None,
        texts: list[str] | None = None,
        tool_uses: list[ToolUse] | None = None,
        results: list[tuple[str, bool, str]] | None = None,
        api_error: bool = False,
        model: str | None = None,
        usage: tuple[int, int] | None = None,
        images: list[tuple[str, int]] | None = None,
    ) -> None:
        self.kind, self.ts, self.uuid, self.session_id, self.cwd = kind, ts, uuid, session_id, cwd
        self.text, self.message_id, self.api_error = text, message_id, api_error
        self.model, self.usage = model, usage
        self.images = images or []
        self.texts = texts or []
        self.tool_uses = tool_uses or []
        self.results = results or []


class Batch:
    """Records read from a transcript after an offset; `offset` is where the next read starts,
    `lines` counts non-blank complete lines, `bad` those that are not JSON (`bad_lines`: their
    1-based numbers), `truncated` says the last line was cut off, `rest` counts the bytes after
    `offset` left unread (`read_file` with a limit)."""

    __slots__ = ("records", "offset", "lines", "bad", "truncated", "bad_lines", "rest")

    def __init__(self, records: list[Record], offset: int) -> None:
        self.records = records
        self.offset = offset
        self.lines = 0
        self.bad = 0
        self.truncated = False
        self.bad_lines: list[int] = []
        self.rest = 0


def _texts_of(content: Any) -> list[str]:
    """The non-empty texts of a message's content: a plain string, or its `text` blocks."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return [
        b["text"]
        for b in (blocks if isinstance(blocks, list) else [])
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        if b["text"]
    ]


def _text_of(content: Any) -> str:
    """The text of a user message: a plain string, or the `text` blocks of a block list."""
    return "\n".join(_texts_of(content))


def _images_of(content: Any) -> list[tuple[str, int]]:
    """The images pasted into a user message: (media type, size in bytes of the base64 data, 0
    when the image is given another way)."""
    if not isinstance(content, list):
        return []
    images = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "image":
            continue
        source = block.get("source")
        source = source if isinstance(source, dict) else {}
        media, data = source.get("media_type"), source.get("data")
        data = data if isinstance(data, str) else ""
        size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
        images.append((media[:128] if isinstance(media, str) and media else "image", size))
    return images


def _command_prompt(text: str) -> str | None:
    """`/name args` for a slash-command line (`<command-name>/review</command-name>...`)."""
    match = _COMMAND.search(text)
    if not match:
        return None
    args = _COMMAND_ARGS.search(text)
    value = args.group("args").strip() if args else ""
    return f"{match.group('name')} {value}".strip()


def tool_title(name: str, tool_input: Any) -> str:
    """A one-line title of a tool call from its input (command, path, pattern, url, query...)."""
    title = ""
    if isinstance(tool_input, dict):
        for key in (
            "description",
            "command",
            "file_path",
            "notebook_path",
            "path",
            "pattern",
            "url",
            "query",
            "prompt",
        ):
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                title = value
                break
        else:
            title = next((v for v in tool_input.values() if isinstance(v, str) and v.strip()), "")
    title = " ".join(title.split())
    return title[:TITLE_CHARS] or name


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> Any:
    """`value` with every string inside it cut to `INPUT_VALUE_CHARS`."""
    if isinstance(value, str):
        return _cut(value, INPUT_VALUE_CHARS)
    if isinstance(value, dict):
        return {str(k): _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def tool_input_summary(tool_input: Any) -> str:
    """A bounded summary of a tool call's input: its compact JSON, the keys naming what was run,
    read or changed (`command`, `file_path`, `pattern`...) first, every string cut to
    `INPUT_VALUE_CHARS` and the whole to `INPUT_CHARS` (a plain string input is that string)."""
    if tool_input is None or tool_input == {}:
        return ""
    if isinstance(tool_input, str):
        return _cut(tool_input, INPUT_CHARS)
    if isinstance(tool_input, dict):
        first = {k: tool_input[k] for k in _INPUT_KEYS if k in tool_input}
        tool_input = first | {k: v for k, v in tool_input.items() if k not in first}
    text = json.dumps(_short(tool_input), ensure_ascii=False, separators=(",", ":"), default=str)
    return _cut(text, INPUT_CHARS)


def _user_record(line: dict[str, Any], common: LineOrigin) -> Record | None:
    content = (line.get("message") or {}).get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        results = [
            (str(b.get("tool_use_id") or ""), bool(b.get("is_error")), _text_of(b.get("content")))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        return Record(TOOL_RESULT, results=[r for r in results if r[0]], **common)
    text = _text_of(content).strip()
    images = _images_of(content)
    if not text and not images:
        return None
    if text.startswith(_INTERRUPTED):
        return Record(INTERRUPT, **common)
    if text.startswith(_LOCAL_OUTPUT):
        return Record(LOCAL, **common)
    if text.startswith(_NOT_PROMPTS):  # a notice may have been queued: the queue drops it
        return Record(NOTICE, text=text, **common)
    if "<command-name>" in text:
        command = _command_prompt(text)
        if not command:
            return None
        text = command
    return Record(PROMPT, text=text, images=images, **common)


def _api_error(line: dict[str, Any]) -> str:
    """The text of a `system` `api_error` line (a failed call to the model, retried): "API
    Error: <status> <message>", as Claude Code shows it."""
    error = line.get("error")
    status = error.get("status") if isinstance(error, dict) else None
    message, body = None, error
    while isinstance(body, dict) and message is None:  # the provider's body, nested
        found = body.get("message")
        message = found if isinstance(found, str) and found.strip() else None
        body = body.get("error")
    head = f"API Error: {status}" if isinstance(status, int) else "API Error"
    return f"{head} {message.strip()}" if message else head


def _meta_record(line: dict[str, Any]) -> Record | None:
    """A user line Claude Code wrote itself (`isMeta`: a skill's text, a caveat, a scheduled
    task's prompt): never a prompt; one with text is a `META` record, which ends the open turn
    when the queue just gave it back (a scheduled prompt starting work of its own)."""
    if line.get("type") != "user":
        return None
    if not _text_of((line.get("message") or {}).get("content")).strip():
        return None
    ts = line.get("timestamp") if isinstance(line.get("timestamp"), str) else None
    return Record(META, ts=ts)


def _queue_record(line: dict[str, Any]) -> Record | None:
    """A message typed while Claude Code was busy: `enqueue` (its text), `dequeue` (it comes
    back as the next prompt's user line), `remove` (it went into the running turn with no user
    line of its own) or `popAll` (the user took every queued message back to edit); newer
    versions name the message (`content`) on the last three too."""
    ts = line.get("timestamp") if isinstance(line.get("timestamp"), str) else None
    content = line.get("content")
    text = content.strip() if isinstance(content, str) else ""
    kind = {"enqueue": QUEUED, "dequeue": UNQUEUED, "remove": DELIVERED, "popAll": CLEARED}.get(
        str(line.get("operation"))
    )
    return Record(kind, ts=ts, text=text) if kind else None


def _queued_command(line: dict[str, Any]) -> Record | None:
    """The message a `remove` delivered into the running turn, as Claude Code 2.1.129 and later
    name it: an `attachment` line of type `queued_command` (`commandMode` prompt) after a
    `remove` without `content`. Other attachments carry nothing a turn needs."""
    attachment = line.get("attachment")
    if not isinstance(attachment, dict) or attachment.get("type") != "queued_command":
        return None
    if attachment.get("commandMode", "prompt") != "prompt":
        return None
    text = _text_of(attachment.get("prompt")).strip()
    ts = line.get("timestamp") if isinstance(line.get("timestamp"), str) else None
    return Record(NAMED, ts=ts, text=text) if text else None


def is_steer(text: str) -> bool:
    """Whether a queued message delivered into a running turn is the user's words: not a task
    notice, a background task's record, a local command's output or a slash command (`/name`,
    `/name args`)."""
    return bool(text) and not (
        text.startswith((*_NOT_PROMPTS, *_LOCAL_OUTPUT))
        or _SLASH_COMMAND.match(text)
        or _is_task_record(text)
    )


def _is_task_record(text: str) -> bool:
    """Whether a queued entry is Claude Code's record of a background task or sub-agent (a JSON
    object with `task_id`, `description`, `task_type`: Claude Code 2.1.45 and later queue one per
    task, delivered into the turn when the task ends), not words the user typed."""
    if not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "task_id" in value


def _assistant_record(line: dict[str, Any], common: LineOrigin) -> Record | None:
    """The record of an assistant line; None for a synthetic placeholder (`SYNTHETIC` model,
    e.g. "No response requested."), which Claude Code writes without the model answering.
    A synthetic API error message (`isApiErrorMessage`) is kept: it is the turn's error; other
    synthetic text is a `PARTIAL` record (what the model had streamed when the user
    interrupted it, Claude Code 2.1.8x)."""
    message = line.get("message") or {}
    if message.get("model") == SYNTHETIC and not line.get("isApiErrorMessage"):
        return _partial(message, common)
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return None
    texts, tools, thought = [], [], False
    for block in blocks:
        if not isinstance(block, dict):
            continue
        thought = thought or block.get("type") in THINKING
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if block["text"].strip():
                texts.append(block["text"])
        elif block.get("type") == "tool_use" and block.get("id"):
            name, tool_input = str(block.get("name") or "tool"), block.get("input")
            title, summary = tool_title(name, tool_input), tool_input_summary(tool_input)
            tools.append(ToolUse(str(block["id"]), name, title, summary))
    if not texts and not tools and not thought:
        return None
    model = message.get("model")
    return Record(
        ASSISTANT,
        message_id=str(message.get("id") or line.get("uuid") or ""),
        texts=texts,
        tool_uses=tools,
        api_error=bool(line.get("isApiErrorMessage")),
        model=model if isinstance(model, str) and model and model != SYNTHETIC else None,
        usage=message_usage(message.get("usage")),
        **common,
    )


def _partial(message: dict[str, Any], common: LineOrigin) -> Record | None:
    """A synthetic line's text other than a placeholder, as a `PARTIAL` record (the turn takes it
    as its answer only when an interrupt follows it at once); None otherwise."""
    text = "\n\n".join(t for t in _texts_of(message.get("content")) if t.strip()).strip()
    if not text or text in PLACEHOLDERS:
        return None
    return Record(PARTIAL, texts=[text], **common)


def _count(value: Any) -> int:
    """A token count as written (a non-negative integer), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def message_usage(usage: Any) -> tuple[int, int] | None:
    """(prompt, output) tokens of one API message's `usage`: the prompt counts every input token
    the model read, cached or not (`input_tokens` + `cache_creation_input_tokens` +
    `cache_read_input_tokens`, as Codex and Gemini count theirs); None when there is no usage."""
    if not isinstance(usage, dict):
        return None
    prompt = sum(
        _count(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    output = _count(usage.get("output_tokens"))
    return (prompt, output) if prompt or output else None


def classify(line: Any) -> Record | None:
    """The record of one decoded transcript line, or None when the line carries no turn data.

    Skipped: non-objects, types other than user/assistant/system, system lines other than
    `stop_hook_summary`, `local_command` and `compact_boundary`, meta lines (`isMeta`),
    sidechains (sub-agents, `isSidechain`), compaction summaries (`isCompactSummary`), task
    notices, synthetic placeholder answers (`"model": "<synthetic>"` without
    `isApiErrorMessage`) and empty messages; a message of thinking alone is a record without
    text (the model took up the prompt).
    """
    if not isinstance(line, dict):
        return None
    kind = line.get("type")
    if kind == "queue-operation":
        return _queue_record(line)
    if kind == "attachment":
        return _queued_command(line)
    if kind not in ("user", "assistant", "system"):
        return None
    if line.get("isSidechain") or line.get("isCompactSummary"):
        return None
    if line.get("isMeta"):
        return _meta_record(line)
    if line.get("isVisibleInTranscriptOnly"):
        return None
    if kind == "system" and line.get("subtype") not in (*_SYSTEM_KINDS, "api_error"):
        return None
    common: LineOrigin = {
        "ts": line.get("timestamp") if isinstance(line.get("timestamp"), str) else None,
        "uuid": line.get("uuid") if isinstance(line.get("uuid"), str) else None,
        "session_id": line.get("sessionId") if isinstance(line.get("sessionId"), str) else None,
        "cwd": line.get("cwd") if isinstance(line.get("cwd"), str) else None,
    }
    if kind == "system":
        if line["subtype"] == "api_error":
            return Record(ASSISTANT, texts=[_api_error(line)], api_error=True, **common)
        return Record(_SYSTEM_KINDS[line["subtype"]], **common)
    if kind == "user":
        return _user_record(line, common)
    return _assistant_record(line, common)


def parse_lines(data: bytes, offset: int = 0, final: bool = False) -> Batch:
    """Records of the complete lines in `data` (bytes of a transcript read from `offset`).

    A last line without a newline is left unread (the writer may still be appending to it) unless
    `final` and it parses; one that does not parse is reported as `truncated`. A complete line
    that is not JSON, nests too deep, or that `classify` fails on is counted in `bad` and
    skipped (`ctxdb.capture.reading`): the lines after it are still read.
    """
    batch = Batch(records=[], offset=offset)
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        complete = end >= 0
        end = end if complete else size
        raw = data[start:end]
        decoded: Any = None
        bad = False
        if raw.strip():
            try:
                decoded = decode(raw)
            except ValueError:
                bad = True
        if not complete and (bad or not final):
            batch.truncated = bad
            break
        if raw.strip():
            batch.lines += 1
            if not bad:
                try:
                    record = classify(decoded)
                except LINE_ERRORS:
                    bad = True
                else:
                    if record is not None:
                        batch.records.append(record)
            if bad:
                batch.bad += 1
                batch.bad_lines.append(batch.lines)
        start = end + 1
        batch.offset = offset + min(start, size)
    return batch


def read_from(path: Path, offset: int = 0, final: bool = False) -> Batch:
    """The records of `path` after byte `offset` (see `parse_lines`); a shrunk file is re-read
    from the start. Unreadable when `path` is not a regular file (never blocks)."""
    with open_regular(path) as file:
        return read_file(file, offset, final)


def read_batches(file: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[Batch]:
    """The records of a whole transcript (a cut-off last line that parses included), read
    `limit` bytes at a time: memory stays bounded whatever the file's size."""
    offset = 0
    while True:
        batch = read_file(file, offset, final=True, limit=limit)
        yield batch
        if batch.rest == 0 or batch.offset <= offset:
            return
        offset = batch.offset


def read_file(file: BinaryIO, offset: int = 0, final: bool = False, limit: int = -1) -> Batch:
    """The records of an open transcript after byte `offset`, reading at most `limit` bytes
    (all when negative): `Batch.rest` says how many bytes stay unread. A line longer than
    `limit` is skipped as a bad line, so a reader never stalls on it."""
    size = os.fstat(file.fileno()).st_size
    if offset > size:
        offset = 0
    file.seek(offset)
    data = file.read(limit)
    batch = parse_lines(data, offset, final and offset + len(data) >= size)
    if 0 < limit <= len(data) and batch.offset == offset:
        batch.offset, batch.bad = offset + len(data), batch.bad + 1
        batch.bad_lines.append(batch.lines + 1)
    batch.rest = max(0, size - batch.offset)
    return batch
