"""`ctxdb capture gemini import [PATH]`: Gemini CLI chat sessions as landing files.

Each session file goes through `records` and `HostMapper`; the events no file of an earlier day
holds go to `<landing>/gemini_cli/import/dt=YYYY-MM-DD/<session file>.jsonl` (the day of the
import), rewritten only when its bytes change (see `ctxdb.capture.hosts.import_sessions`). Event
ids are `gm-<user message id>-start|prompt|answer|close` and `gm-<tool call id>`; the project
(`agent`) is the session's `projectHash`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ctxdb.capture.claude_code.importer import EventStream, Mapped, Summary, session_files
from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.gemini.files import open_session
from ctxdb.capture.gemini.session import records
from ctxdb.capture.hosts import HostMapper

ADAPTER = "gemini_cli"
PREFIX = "gm"
SESSIONS = Path("~/.gemini/tmp")


def find_sessions(path: Path) -> list[Path]:
    """The session files at `path` (a file, or every `session-*.json[l]` below a folder)."""
    return session_files(path, "session-*.json*", lambda p: p.suffix in (".json", ".jsonl"))


def session_events(
    path: Path, identity: Identity, settled: bool, clean: Callable[[str], str]
) -> Mapped:
    """The events of one session file, read one message at a time; its last turn is closed once
    the file has `settled`."""
    return Mapped(_session_stream(path, identity, settled, clean))


def _session_stream(
    path: Path, identity: Identity, settled: bool, clean: Callable[[str], str]
) -> EventStream:
    with open_session(path) as session:
        mapper = HostMapper(identity, session.session_id, ADAPTER, PREFIX, clean)
        for record in records(session):
            yield from mapper.feed([record])
        yield from mapper.finish(settled)
    counts = session.counts
    return Summary(session.project_hash, counts.lines, counts.bad, counts.truncated)
