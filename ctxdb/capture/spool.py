"""A recorder's spool: events appended to part files, published atomically, recovered after a
crash. Parts are sealed, and a dead writer's completed, through `part_files`, which the Claude
Code hook writes through too.

Layout under a spool root (the landing folder's `capture/` for a local landing):

    <dir>/<writer>.lock             held (flock) while the writer's process lives
    <dir>/<writer>.open             journal of the writer's open turns (JSON lines)
    <dir>/<writer>-<n>.jsonl.part   events being written (landing never lists `.part` files)
    <dir>/dt=YYYY-MM-DD/<writer>-<n>.jsonl
                                    a published file (fsync'd, then renamed into the date
                                    partition of the day it is published: `landing.partitions`)

A part file is published when it reaches `rotate_bytes` or `rotate_age_s`, and when the writer
closes. For an object-store landing the spool is local and each published file is uploaded, then
removed. `recover` finds writers whose process died (their lock is free): it closes each of
their open turns with a `turn.closed` event (`status: cancelled`) and publishes their files, so
every event written before the crash lands.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxdb.capture.part_files import DONE, PART, append_whole_lines, seal
from ctxdb.contract.events import SCHEMA_VERSION, parse_event
from ctxdb.landing import partitions
from ctxdb.storage.faults import reached

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no crash recovery across processes
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

TurnKey = tuple[str, str]
"""(conversation_id, turn_id) of a turn."""
ENVELOPE = ("tenant", "app", "agent", "adapter", "user_id", "conversation_id", "turn_id")
Publisher = Callable[[Path], None]
"""Called with each sealed (renamed) `.jsonl` file; uploads it for an object-store landing."""


def writer_name() -> str:
    """A new writer's name: start time, process id and a random tail (unique per writer)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass
class Spool:
    """One writer's files in `directory` (see the module docstring); used by one thread."""

    directory: Path
    rotate_bytes: int
    rotate_age_s: float
    publish: Publisher | None = None
    name: str = field(default_factory=writer_name)
    open_turns: dict[TurnKey, dict[str, Any]] = field(default_factory=dict)
    _lock_fd: int | None = None
    _part_fd: int | None = None
    _part: Path | None = None
    _part_size: int = 0
    _part_started: float = 0.0
    _seq: int = 0
    _dirty: bool = False

    def start(self) -> None:
        """Create the folder and take the writer's lock (held until `close` or death)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._lock_fd = fd

    def _path(self, suffix: str) -> Path:
        return self.directory / f"{self.name}{suffix}"

    def write(
        self, lines: list[bytes], opened: Iterable[dict[str, Any]], closed: Iterable[TurnKey]
    ) -> None:
        """Append `lines` to the part file (all of them or, on an error, none), then note the
        turns `opened` and `closed` in the journal."""
        if self._lock_fd is None:
            self.start()
        if self._part_fd is None:
            self._open_part()
        assert self._part_fd is not None
        data = b"".join(lines)
        try:
            written = 0
            while written < len(data):
                written += os.write(self._part_fd, data[written:])
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._part_fd, self._part_size)
            raise
        self._part_size += len(data)
        self._dirty = True
        entries: list[dict[str, Any]] = [{"open": base} for base in opened]
        entries += [{"close": list(key)} for key in closed]
        for entry in entries:
            if "open" in entry:
                base = entry["open"]
                self.open_turns[(base["conversation_id"], base["turn_id"])] = base
            else:
                self.open_turns.pop(tuple(entry["close"]), None)
        if entries:
            self._journal(entries)

    def _open_part(self) -> None:
        self._seq += 1
        self._part = self._path(f"-{self._seq:06d}{PART}")
        self._part_fd = os.open(self._part, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._part_size = os.fstat(self._part_fd).st_size
        self._part_started = time.monotonic()

    def _journal(self, entries: list[dict[str, Any]]) -> None:
        """Append journal lines; a failure is logged only (`recover` also reads the parts)."""
        data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
        try:
            with open(self._path(".open"), "a", encoding="utf-8") as file:
                file.write(data)
        except OSError as exc:
            log.warning("capture journal %s not written: %s", self._path(".open"), exc)

    def sync(self) -> None:
        """fsync the part file (a closed turn is durable once this returns)."""
        if self._part_fd is not None and self._dirty:
            os.fsync(self._part_fd)
            self._dirty = False

    def due(self) -> float | None:
        """Seconds until the part file is due for rotation by age (None: no part file)."""
        if self._part_fd is None:
            return None
        return self.rotate_age_s - (time.monotonic() - self._part_started)

    def rotate_if_due(self) -> Path | None:
        """Publish the part file when it is big or old enough; the published path, if any."""
        if self._part_fd is None:
            return None
        if self._part_size < self.rotate_bytes and (self.due() or 0) > 0:
            return None
        return self.rotate()

    def rotate(self) -> Path | None:
        """Seal and publish the part file now (the next event opens a new one)."""
        if self._part_fd is None or self._part is None:
            return None
        fd, part = self._part_fd, self._part
        os.fsync(fd)
        os.close(fd)
        self._part_fd, self._part, self._dirty = None, None, False
        if self._part_size == 0:
            part.unlink()
            return None
        final = seal(part, partitions.folder(self.directory))
        self._compact_journal()
        if self.publish is not None:
            self.publish(final)
        return final

    def _compact_journal(self) -> None:
        """Rewrite the journal with only the turns still open (it would grow forever)."""
        journal = self._path(".open")
        if not self.open_turns:
            with contextlib.suppress(FileNotFoundError):
                journal.unlink()
            return
        tmp = self._path(".open.tmp")
        data = "".join(json.dumps({"open": b}) + "\n" for b in self.open_turns.values())
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, journal)

    def close(self) -> Path | None:
        """Publish the part file and release the lock; with turns still open the journal stays,
        so the next start closes them as cancelled. The published path, if any."""
        published = self.rotate()
        if not self.open_turns:
            for suffix in (".open", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    self._path(suffix).unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        return published


@dataclass
class Recovered:
    """What `recover` did: writers found dead, turns it closed as cancelled, files published."""

    writers: int = 0
    cancelled: list[TurnKey] = field(default_factory=list)
    published: list[Path] = field(default_factory=list)


def recover(root: Path, publish: Publisher | None = None) -> Recovered:
    """Close the open turns of every dead writer under `root` as cancelled and publish its files;
    with `publish`, also upload files sealed earlier but never uploaded. Live writers (their
    lock is held) are left alone."""
    done = Recovered()
    if not root.is_dir():
        return done
    for lock in sorted(root.rglob("*.lock")):
        fd = _lock_if_dead(lock)
        if fd is None:
            continue
        try:
            done.writers += 1
            _recover_writer(lock.parent, lock.name.removesuffix(".lock"), done)
            lock.unlink()
        finally:
            os.close(fd)
    if publish is not None:
        for sealed in sorted(root.rglob(f"*{DONE}")):
            publish(sealed)
            done.published.append(sealed)
    return done


def _lock_if_dead(lock: Path) -> int | None:
    """A descriptor holding `lock` when its writer is gone, else None."""
    if fcntl is None:
        return None
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock).st_ino:  # recovered meanwhile by another
            raise FileNotFoundError(lock)
    except OSError:
        os.close(fd)
        return None
    return fd


def _recover_writer(directory: Path, name: str, done: Recovered) -> None:
    parts = sorted(directory.glob(f"{name}-*{PART}"))
    turns = _journal_turns(directory / f"{name}.open")
    closed: set[TurnKey] = set()
    last_seen: dict[TurnKey, str] = {}
    for part in parts:
        for event in _events(part):
            key = (event["conversation_id"], event["turn_id"])
            turns.setdefault(key, {k: event[k] for k in ENVELOPE} | {"at": event["occurred_at"]})
            last_seen[key] = max(last_seen.get(key, ""), event["occurred_at"], key=_instant)
            if event["type"] == "turn.closed":
                closed.add(key)
    still_open = [key for key in turns if key not in closed]
    cancels = [_cancel_event(turns[k], last_seen.get(k, turns[k]["at"])) for k in still_open]
    if cancels:
        target = parts[-1] if parts else directory / f"{name}-recovered{PART}"
        append_whole_lines(target, cancels)
        reached("capture:cancelled")
        parts = parts if parts else [target]
    # The journal goes before any part is sealed: a recovery killed from here on is resumed from
    # the part files alone, whose last one holds the cancels until it is sealed last, so it never
    # writes a cancel again (which, from the journal, would carry another `occurred_at`).
    with contextlib.suppress(FileNotFoundError):
        (directory / f"{name}.open").unlink()
    for part in parts:
        done.published.append(seal(part, partitions.folder(directory)))
        reached("capture:sealed")
    done.cancelled += still_open
    if cancels:
        log.warning("capture: closed %d turn(s) of dead writer %s as cancelled", len(cancels), name)


def _instant(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def _journal_turns(journal: Path) -> dict[TurnKey, dict[str, Any]]:
    """The turns a journal leaves open (a cut-off last line is ignored)."""
    turns: dict[TurnKey, dict[str, Any]] = {}
    try:
        text = journal.read_text(encoding="utf-8")
    except FileNotFoundError:
        return turns
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "open" in entry:
            base = entry["open"]
            turns[(base["conversation_id"], base["turn_id"])] = base
        elif "close" in entry:
            turns.pop(tuple(entry["close"]), None)
    return turns


def _events(part: Path) -> list[dict[str, Any]]:
    """The whole, valid event lines of a part file (a line cut off by the crash is skipped)."""
    events = []
    for line in part.read_bytes().split(b"\n"):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and all(k in event for k in (*ENVELOPE, "occurred_at", "type")):
            events.append(event)
    return events


def cancel_event_id(conversation_id: str, turn_id: str) -> str:
    """The id of the `turn.closed` that recovery writes: the same for every recovery of a turn,
    so recovering twice lands one event."""
    digest = hashlib.sha1(f"{conversation_id}\0{turn_id}\0cancelled".encode()).hexdigest()
    return f"x{digest[:32]}"


def _cancel_event(base: dict[str, Any], at: str) -> bytes:
    event = {
        "event_id": cancel_event_id(base["conversation_id"], base["turn_id"]),
        "schema_version": SCHEMA_VERSION,
        "type": "turn.closed",
        "occurred_at": at,
        **{k: base[k] for k in ENVELOPE},
        "payload": {"status": "cancelled", "error_type": "host_crashed"},
    }
    line = json.dumps(event, ensure_ascii=False).encode("utf-8")
    parse_event(line)
    return line + b"\n"
