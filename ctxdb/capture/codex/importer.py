"""`ctxdb capture codex import [PATH]`: Codex CLI rollouts as landing files.

Each rollout goes through `RolloutReader` and `HostMapper`; the events no file of an earlier day
holds go to `<landing>/codex/import/dt=YYYY-MM-DD/<rollout>.jsonl` (the day of the import),
rewritten only when its bytes change (see `ctxdb.capture.hosts.import_sessions`). Event ids are
`cx-<turn>-start|prompt|answer|close` and `cx-<call_id>`; the turn is Codex's own `turn_id` where
the rollout has one, else `<session>-L<line of the prompt>`.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from pathlib import Path

from ctxdb.capture.claude_code.importer import EventStream, Mapped, Summary, session_files
from ctxdb.capture.claude_code.transcript import INTERRUPT, Record
from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.rollout import RolloutReader
from ctxdb.capture.hosts import HostMapper
from ctxdb.capture.reading import LineCounts, json_lines, open_regular

ADAPTER = "codex"
PREFIX = "cx"
SESSIONS = Path("~/.codex/sessions")
OLD_FORMAT = (
    "no session_meta line: a rollout in the format of Codex CLI releases before session_meta "
    "(lines without a `payload`), which ctxdb does not read; nothing imported from it"
)
"""Why a rollout holding lines but no `session_meta` (and so no turn ctxdb reads) fails."""


def find_rollouts(path: Path) -> list[Path]:
    """The rollouts at `path` (a file, or every `rollout-*.jsonl` below a folder)."""
    return session_files(path, "rollout-*.jsonl")


def rollout_events(
    path: Path, identity: Identity, settled: bool, clean: Callable[[str], str]
) -> Mapped:
    """The events of one rollout, read one line at a time (`ctxdb.capture.reading.json_lines`:
    a bad line is counted and skipped); its last turn is closed once the file has `settled` (as
    cancelled when Codex never ended it)."""
    return Mapped(_rollout_stream(path, identity, settled, clean))


def _rollout_stream(
    path: Path, identity: Identity, settled: bool, clean: Callable[[str], str]
) -> EventStream:
    reader = RolloutReader(path.stem)
    counts = LineCounts()
    made = 0
    with open_regular(path) as file:
        records = json_lines(file, counts, reader.records)
        first = next(records, None)  # the session's id is read from the lines before it
        mapper = HostMapper(identity, reader.session_id, ADAPTER, PREFIX, clean)
        for record in chain([first], records) if first is not None else ():
            events = mapper.feed([record])
            made += len(events)
            yield from events
    if settled and (reader.open_task or reader.unanswered):
        events = mapper.feed([Record(INTERRUPT)])
        made += len(events)
        yield from events
    events = mapper.finish(settled)
    if not made and not events and counts.lines > counts.bad and not reader.saw_meta:
        raise ValueError(OLD_FORMAT)
    yield from events
    return Summary(reader.cwd, counts.lines, counts.bad, counts.truncated)
