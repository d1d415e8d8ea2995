"""A session file imported while one of its turns was still running, then again once it grew.

Real transcripts (tests/data/*/SOURCE.md) cut right after a tool call in the middle of a turn, as
a file reads when the tool runs longer than the import's settle window: the importer closes
that turn provisionally. When the whole file is imported later, what the host wrote supersedes
what was inferred, nothing is quarantined, and every TurnLog equals the one an import of the
whole file at once derives. Each case goes through the real landing and derivation.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import FIXTURES

from ctxdb.capture.claude_code.importer import import_transcripts
from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.importer import rollout_events
from ctxdb.capture.gemini.importer import session_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import REPLAY_ARTIFACTS, REPLAY_SCHEMA, TURN_LOGS, TURN_LOGS_SCHEMA

DATA = Path(__file__).parent / "data"
IDENTITY = Identity(tenant="local", app="coding", user_id="ann")
COMPARED = ["conversation_id", "turn_id", "status", "error_type", "ended_at", "payload", "title"]
"""What a TurnLog says (not when it was written, nor the ids of the events it came from)."""
REPLAYED = ["conversation_id", "turn_id", "seq", "name", "data"]


def _import_claude_code(path: Path, spool: Path) -> None:
    import_transcripts([path], spool, IDENTITY, settle_s=0)


def _importer(read: Callable) -> Callable[[Path, Path], None]:
    return lambda path, spool: import_sessions([path], spool, IDENTITY, read, settle_s=0)


def _cut_lines(source: Path, marker: str) -> list[bytes]:
    """A JSONL transcript as it read right after its middle tool call (`marker` in the line)
    and right after the next one: two reads while a tool ran."""
    lines = source.read_bytes().splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines[:-1]) if marker.encode() in line]
    middle = len(calls) // 2
    return [b"".join(lines[: at + 1]) for at in calls[middle : middle + 2]]


def _cut_gemini(source: Path) -> list[bytes]:
    """A Gemini CLI session as it read after the first answer that called tools, more of its
    turn still to come."""
    session = json.loads(source.read_text())
    messages = session["messages"]
    at = next(
        i
        for i, m in enumerate(messages[:-1])
        if m.get("toolCalls") and messages[i + 1]["type"] != "user"
    )
    return [json.dumps({**session, "messages": messages[: at + 1]}).encode()]


CASES = {
    "claude-code": (
        FIXTURES / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl",
        lambda source: _cut_lines(source, '"type":"tool_use"'),
        _import_claude_code,
    ),
    "claude-code-answering": (  # the model at work after a tool returned
        FIXTURES / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl",
        lambda source: _cut_lines(source, '"type":"tool_result"'),
        _import_claude_code,
    ),
    "codex": (
        DATA / "codex" / "rollout-2026-06-22T12-11-14-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl",
        lambda source: _cut_lines(source, '"type":"function_call"'),
        _importer(rollout_events),
    ),
    "codex-before-task-events": (  # a 2025 rollout: no task_started / task_complete lines
        DATA / "codex" / "rollout-2025-09-19T09-02-12-01996135-afde-7911-97f0-d863511eca56.jsonl",
        lambda source: _cut_lines(source, '"type":"function_call_output"'),
        _importer(rollout_events),
    ),
    "gemini": (
        DATA / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json",
        _cut_gemini,
        _importer(session_events),
    ),
}


def _derived(settings: Settings, import_one: Callable, path: Path) -> pl.DataFrame:
    """Import `path` (settled), land and derive; the TurnLogs, with nothing quarantined."""
    import_one(path, Path(settings.landing_uri) / "spool")
    store = DeltaStore(settings.delta_uri)
    assert land(store, settings.landing_uri).quarantined == 0
    derive(store, settings)
    return store.read(TURN_LOGS, TURN_LOGS_SCHEMA).select(COMPARED).sort("ended_at", "turn_id")


def _replayed(settings: Settings) -> pl.DataFrame:
    replay = DeltaStore(settings.delta_uri).read(REPLAY_ARTIFACTS, REPLAY_SCHEMA)
    return replay.select(REPLAYED).sort(REPLAYED)


@pytest.mark.parametrize("host", list(CASES))
def test_a_turn_running_at_import_takes_what_the_host_wrote_once_the_file_grows(
    settings: Settings, tmp_path: Path, host: str
) -> None:
    source, cut, import_one = CASES[host]
    whole_settings = settings.replace(home=tmp_path / "whole")
    whole = _derived(whole_settings, import_one, shutil.copy(source, tmp_path / source.name))

    growing = tmp_path / "growing" / source.parent.name / source.name
    growing.parent.mkdir(parents=True)
    for snapshot in cut(source):
        growing.write_bytes(snapshot)
        os.utime(growing, (0, 0))  # idle since long ago: settled
        early = _derived(settings, import_one, growing)
        assert 0 < early.height <= whole.height
        running = early.join(whole, on=["conversation_id", "turn_id"], suffix="_whole").filter(
            pl.col("payload") != pl.col("payload_whole")
        )
        assert running.height == 1  # the turn cut mid-way, closed provisionally

    shutil.copy(source, growing)
    assert _derived(settings, import_one, growing).equals(whole)
    assert _replayed(settings).equals(_replayed(whole_settings))
