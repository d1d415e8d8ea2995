"""`ctxdb import claude-code [PATH]`: backfill Claude Code transcripts as landing files.

Each transcript (`<project>/<session>.jsonl`; sub-agent files `agent-*.jsonl` are skipped, their
lines are sidechains) goes through the same `TurnMapper` as the hook; the events no file of an
earlier day holds go to the session's file in the day partition of the import,
`<spool>/import/<project>/dt=YYYY-MM-DD/<session>.jsonl`, written atomically and only when its
bytes changed (`part_files.Published`, `Replacement`): a re-import of unchanged transcripts writes
nothing, a grown one writes only its new events and landing reads that day's file alone. The last
turn of a transcript written to within `settle_s` seconds is left open (the hook, or a later
import, closes it).

Transcripts are read through `ctxdb.capture.reading` (regular files only, never blocking; in a
folder, files whose real path leaves it are skipped) 32 MiB at a time. An unreadable line (not
JSON, nested too deep, over 32 MiB) is counted, reported and skipped, never fatal; a cut-off last
line is ignored. Events are written as they are made (`write_sessions`, shared by every host's
importer): memory holds the lines being read and the open turn, never a whole session; an import
on a later day also holds the ids of the session's events in earlier days' files (about 130
bytes each: some 8 MB for a 100 MB Codex rollout, 58,000 events).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ctxdb.capture import part_files
from ctxdb.capture.claude_code.transcript import read_batches
from ctxdb.capture.claude_code.turns import Identity, TurnMapper, safe_id
from ctxdb.capture.reading import MAX_LINE_BYTES, open_regular, under_root
from ctxdb.landing import partitions

SETTLE_S = 300.0
"""A transcript untouched this long is finished: its last turn is closed."""
UNREADABLE = (
    f"not JSON, nested too deep, over {MAX_LINE_BYTES >> 20} MiB, or not a line ctxdb understands"
)
"""What makes a line (or a Gemini CLI message) unreadable: it is skipped, the rest is read."""


@dataclass
class ImportStats:
    """What an import read and wrote."""

    files: int = 0
    lines: int = 0
    bad_lines: int = 0
    truncated: int = 0
    turns: int = 0
    events: int = 0
    written: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    erased: int = 0
    """Events of conversations erased (`ctxdb erase`) left out: an erasure stays one."""
    problems: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    """When each turn read ended (its `turn.closed` time, ISO): the CLI warns of those older than
    the retention period."""


def session_files(
    path: Path, pattern: str, keep: Callable[[Path], bool] = lambda _: True
) -> list[Path]:
    """A host's session files at `path`: the file itself, or every file below the folder whose
    name matches `pattern` and that `keep` accepts, sorted. Symlinked folders are not entered and
    a file whose real path lies outside the folder (a symlink out of it) is left out."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob(pattern) if p.is_file() and keep(p) and under_root(p, path))


def find_transcripts(path: Path) -> list[Path]:
    """The session transcripts at `path` (a file, or every `*.jsonl` below a folder but the
    subagents' own)."""
    return session_files(
        path, "*.jsonl", lambda p: not p.name.startswith("agent-") and "subagents" not in p.parts
    )


@dataclass
class Summary:
    """What reading one session file found besides its events: its project and line counts."""

    project: str | None
    lines: int
    bad: int
    truncated: bool


EventStream = Generator[dict[str, Any], None, Summary]
"""A session file's events, made one at a time while it is read, then its `Summary`."""


class Mapped:
    """One session file mapped to events, lazily: iterating it reads the file once, making one
    event at a time, after which `summary` is set. `events` collects them all in a list (tests,
    small files); the importers stream them (`write_sessions`)."""

    def __init__(self, stream: EventStream) -> None:
        self._stream = stream
        self.summary: Summary | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.summary = yield from self._stream

    @cached_property
    def events(self) -> list[dict[str, Any]]:
        return list(self)


def transcript_events(
    path: Path,
    identity: Identity,
    now: float | None = None,
    settle_s: float = SETTLE_S,
    clean: Callable[[str], str] | None = None,
    output_chars: int = 0,
) -> Mapped:
    """The events of one transcript (its last turn closed once the file has settled; steps carry
    tool output cut to `output_chars`, none when 0)."""
    kwargs = {"clean": clean} if clean else {}
    mapper = TurnMapper(identity, path.stem, {}, output_chars=output_chars, **kwargs)
    return Mapped(_transcript_stream(path, mapper, now, settle_s))


def _transcript_stream(
    path: Path, mapper: TurnMapper, now: float | None, settle_s: float
) -> EventStream:
    lines = bad = 0
    truncated = False
    with open_regular(path) as file:
        for batch in read_batches(file):
            yield from mapper.feed(batch.records)
            lines, bad, truncated = lines + batch.lines, bad + batch.bad, batch.truncated
    settled = (now or time.time()) - path.stat().st_mtime >= settle_s
    yield from mapper.finish(settled)
    return Summary(mapper.state["project"], lines, bad, truncated)


def output_path(spool_dir: Path, transcript: Path) -> Path:
    """The events file that names the session of `transcript`, `<spool>/import/<project>/
    <session>.jsonl`: its events are published beside it, in day partitions (`write_sessions`)."""
    project = safe_id(transcript.parent.name.lstrip("-") or "transcripts")
    return spool_dir / "import" / project / f"{safe_id(transcript.stem)}.jsonl"


def import_transcripts(
    paths: list[Path],
    spool_dir: Path,
    identity: Identity,
    settle_s: float = SETTLE_S,
    clean: Callable[[str], str] | None = None,
    excluded: Callable[[str | None], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    output_chars: int = 0,
    erased: Callable[[str], bool] | None = None,
) -> ImportStats:
    """Write the events of every transcript in `paths` under `spool_dir`, except those of `excluded`
    projects and `erased` conversations; `progress` gets the bytes of each transcript done; steps
    carry tool output cut to `output_chars` (none when 0, as the hook's
    `HookConfig.tool_output_chars`)."""
    now = time.time()
    return write_sessions(
        paths,
        lambda path: transcript_events(path, identity, now, settle_s, clean, output_chars),
        lambda path: output_path(spool_dir, path),
        excluded,
        progress,
        erased=erased,
    )


def write_sessions(
    paths: list[Path],
    read: Callable[[Path], Mapped],
    target: Callable[[Path], Path],
    excluded: Callable[[str | None], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    errors: tuple[type[Exception], ...] = (OSError,),
    erased: Callable[[str], bool] | None = None,
) -> ImportStats:
    """Publish the events `read` maps from each session file in `paths` that no earlier file of its
    `target` holds (`_write_session`), except those of `excluded` projects and `erased`
    conversations; `progress` gets the bytes of each file done. A file whose reading raises one of
    `errors` is counted in `failed` with a one-line reason, and the others are still imported."""
    stats = ImportStats()
    published = part_files.Published()
    for path in paths:
        try:
            done = _write_session(read(path), target(path), published, excluded, erased)
        except errors as exc:
            stats.failed += 1
            stats.problems.append(f"{path}: {exc}")
            continue
        finally:
            if progress is not None:
                progress(os.path.getsize(path) if path.exists() else 0)
        if done is None:
            stats.skipped += 1
            continue
        summary, written = done
        stats.files += 1
        stats.lines += summary.lines
        stats.bad_lines += summary.bad
        stats.truncated += int(summary.truncated)
        stats.ended += written.ended
        stats.turns += len(written.ended)
        stats.events += written.events
        stats.erased += written.erased
        stats.written += int(written.changed)
        stats.unchanged += int(not written.changed)
        if summary.bad:
            stats.problems.append(f"{path}: {summary.bad} lines unreadable (skipped): {UNREADABLE}")
        if summary.truncated:
            stats.problems.append(f"{path}: last line cut off (ignored)")
    return stats


@dataclass
class Written:
    """What one session's import found: its event count, when each turn ended, and whether a
    file of new events was published."""

    events: int = 0
    ended: list[str] = field(default_factory=list)
    changed: bool = False
    erased: int = 0


def _write_session(
    mapped: Mapped,
    target: Path,
    published: part_files.Published,
    excluded: Callable[[str | None], bool] | None,
    erased: Callable[[str], bool] | None = None,
) -> tuple[Summary, Written] | None:
    """Stream the events of `mapped` that no file of an earlier day holds into the session's
    file in today's partition beside `target` (`part_files.Replacement`: one line held at a
    time, renamed into place only when the bytes changed); None, nothing written, when the
    session's project is `excluded`. A session without new events writes no file."""
    written = Written()
    today = partitions.folder(target.parent)
    known = published.ids(target, today)
    with part_files.Replacement(today / target.name) as out:
        for event in mapped:
            written.events += 1
            if event["type"] == "turn.closed":
                written.ended.append(event["occurred_at"])
            if erased is not None and erased(event["conversation_id"]):
                written.erased += 1
            elif event["event_id"] not in known:
                out.write(part_files.encode([event]))
        assert mapped.summary is not None
        if excluded is not None and excluded(mapped.summary.project):
            return None
        written.changed = out.size > 0 and out.commit()
    if written.changed:
        published.add(target, today)
    return mapped.summary, written
