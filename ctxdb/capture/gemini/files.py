"""Gemini CLI session files read one message at a time, whatever their size.

A `session-*.json` file is one JSON document, `{sessionId, projectHash, ..., messages: [...]}`.
It is streamed with ijson (its yajl2 C backend): a first pass reads the metadata (it stops at
`messages` once `sessionId` and `projectHash` are known, as Gemini CLI writes them first), a
second pass builds the messages one by one. A message nested deeper than `MAX_DEPTH` or holding
more than `MAX_LINE_BYTES` of text is one bad message: counted, skipped, never built whole.

A `session-*.jsonl` file is folded the way Gemini CLI's loader folds it (see
`ctxdb.capture.gemini.session`), but from the byte offsets of the lines: the fold keeps, per
message id, where its latest version starts, and the messages are then read back one at a time.
Memory holds one message, the ids and the metadata, never the file.

Both formats: a bad line or message (not JSON, too deep, too long) is counted in
`Session.counts` and skipped, and the messages after it are still read. A `.json` document that
is cut off or not JSON is a ValueError (the file fails; Gemini CLI rewrites it whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import ijson

from ctxdb.capture.reading import (
    MAX_LINE_BYTES,
    LineCounts,
    decode,
    decoded_lines,
    guarded,
    open_regular,
)

MAX_DEPTH = 900
"""Deepest nesting a message may have (about what `json.loads` decodes in a JSONL line)."""
META_KEYS = ("sessionId", "projectHash")
_STARTS = {"start_map": dict, "start_array": list}
_ENDS = frozenset({"end_map", "end_array"})
_BAD = object()
"""A message that was too deep or too long to build."""


class Session(NamedTuple):
    """One session file opened: its id, project hash, its messages (read lazily, in order, while
    the file is open) and what reading them met (`counts`, complete once they are read)."""

    session_id: str
    project_hash: str | None
    messages: Iterator[dict[str, Any]]
    counts: LineCounts


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str) else 8


def _build(first: str, events: Iterator[tuple[str, Any]]) -> Any:
    """The value whose `first` event (`start_map` / `start_array`) was just read, built from
    `events` up to its end; `_BAD` (the events still consumed) when it nests deeper than
    `MAX_DEPTH` or holds more than `MAX_LINE_BYTES`."""
    root = _STARTS[first]()
    stack: list[list[Any]] = [[root, None]]  # [container, pending map key]
    size, bad = 0, False
    for event, value in events:
        if event in _ENDS:
            stack.pop()
            if not stack:
                return _BAD if bad else root
            continue
        if event == "map_key":
            stack[-1][1], size = value, size + len(value)
            continue
        item = _STARTS[event]() if event in _STARTS else value
        size += _size(value)
        bad = bad or size > MAX_LINE_BYTES or len(stack) >= MAX_DEPTH
        container, key = stack[-1]
        if not bad and isinstance(container, dict):
            container[key] = item
        elif not bad and container is not None:
            container.append(item)
        if event in _STARTS:
            stack.append([None if bad else item, None])
    raise ValueError("session document cut off")


def _items(events: Iterator[tuple[str, Any]], counts: LineCounts) -> Iterator[dict[str, Any]]:
    """The objects of the array whose `start_array` was just read, one at a time."""
    for event, value in events:
        if event == "end_array":
            return
        item = _build(event, events) if event in _STARTS else value
        counts.lines += 1
        if isinstance(item, dict):
            yield item
        elif item is _BAD:
            counts.bad += 1
    raise ValueError("session document cut off")


def _events(file: BinaryIO) -> Iterator[tuple[str, Any]]:
    """ijson's parse events of a document (`ijson.JSONError` becomes ValueError)."""
    file.seek(0)
    try:
        yield from ijson.basic_parse(file, use_float=True)
    except ijson.JSONError as exc:
        raise ValueError(f"not a JSON document: {exc}") from None


def _top_values(events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, str, Any]]:
    """`(key, event, value)` of the first event of each value of the top-level object (the rest
    of a value is passed over unless the caller reads it from `events`, and then stops)."""
    depth, key = 0, None
    for event, value in events:
        if depth == 0 and event != "start_map":
            raise ValueError("not a Gemini CLI session (not a JSON object)")
        if depth == 1 and key is not None:
            yield key, event, value
        key = value if depth == 1 and event == "map_key" else None
        depth += (event in _STARTS) - (event in _ENDS)


def _document_meta(file: BinaryIO) -> dict[str, Any]:
    """The metadata strings of a session document, and `messages` True when it has a list."""
    meta: dict[str, Any] = {}
    for key, event, value in _top_values(_events(file)):
        if key in META_KEYS and event == "string":
            meta[key] = value
        elif key == "messages" and event == "start_array":
            meta["messages"] = True
            if all(k in meta for k in META_KEYS):
                break
    return meta


def _document_messages(file: BinaryIO, counts: LineCounts) -> Iterator[dict[str, Any]]:
    """The messages of a session document, one at a time."""
    events = _events(file)
    for key, event, _ in _top_values(events):
        if key == "messages" and event == "start_array":
            yield from _items(events, counts)
            return


def _fold_line(
    record: Any, start: int, meta: dict[str, Any], where: dict[str, tuple[int, int]]
) -> list[None]:
    """Fold one JSONL record into `meta` and `where` (message id -> (start of the line holding
    its latest version, its index in that line's `messages` list, or -1 for the line itself))."""
    if not isinstance(record, dict):
        return []
    if isinstance(record.get("$rewindTo"), str):
        ids = list(where)
        cut = ids.index(record["$rewindTo"]) if record["$rewindTo"] in ids else 0
        for key in ids[cut:]:
            del where[key]
    elif isinstance(record.get("id"), str):
        where[record["id"]] = (start, -1)
    elif isinstance(record.get("$set"), dict) or isinstance(record.get("sessionId"), str):
        update = record.get("$set", record)
        if isinstance(update.get("messages"), list):
            where.clear()
            for index, message in enumerate(update["messages"]):
                if isinstance(message, dict) and isinstance(message.get("id"), str):
                    where[message["id"]] = (start, index)
        meta.update({k: v for k, v in update.items() if k != "messages"})
    return []


def _message_at(
    file: BinaryIO, message_id: str, start: int, index: int, cache: dict[int, Any]
) -> list[dict[str, Any]]:
    """The message `message_id` read back from the line at `start` (`cache`: the last line
    decoded); ValueError when the line no longer holds it (the file was rewritten)."""
    if start not in cache:
        file.seek(start)
        cache.clear()
        cache[start] = decode(file.readline(MAX_LINE_BYTES + 1))
    record = cache[start]
    if index >= 0:
        record = record.get("$set", record)["messages"][index]
    if not isinstance(record, dict) or record.get("id") != message_id:
        raise ValueError(f"message {message_id} changed while it was read")
    return [record]


def _jsonl_messages(
    file: BinaryIO, where: dict[str, tuple[int, int]], counts: LineCounts
) -> Iterator[dict[str, Any]]:
    """The folded messages of a JSONL session, read back one at a time."""
    cache: dict[int, Any] = {}
    for message_id, (start, index) in where.items():
        yield from guarded(counts, _message_at, file, message_id, start, index, cache)


def _jsonl_session(file: BinaryIO, name: str) -> Session:
    counts = LineCounts()
    meta: dict[str, Any] = {}
    where: dict[str, tuple[int, int]] = {}
    for _, start, record in decoded_lines(file, counts):
        guarded(counts, _fold_line, record, start, meta, where)
    return _session(meta, name, _jsonl_messages(file, where, counts), counts)


def _document_session(file: BinaryIO, name: str) -> Session:
    meta = _document_meta(file)
    if not meta.get("messages"):
        raise ValueError("not a Gemini CLI session (no messages list)")
    counts = LineCounts()
    return _session(meta, name, _document_messages(file, counts), counts)


def _session(
    meta: dict[str, Any], name: str, messages: Iterator[dict[str, Any]], counts: LineCounts
) -> Session:
    session, digest = meta.get("sessionId"), meta.get("projectHash")
    return Session(
        session if isinstance(session, str) else name,
        digest if isinstance(digest, str) else None,
        messages,
        counts,
    )


@contextmanager
def open_session(path: Path) -> Iterator[Session]:
    """The session in `path` (a `.json` document or `.jsonl` records), its messages read while
    the context is open; `Unreadable` when it is not a regular file (never blocks), ValueError
    when it is no session."""
    with open_regular(path) as file:
        if path.suffix == ".jsonl":
            yield _jsonl_session(file, path.stem)
        else:
            yield _document_session(file, path.stem)
