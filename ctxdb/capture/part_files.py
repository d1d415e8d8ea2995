"""Part files, the one way capture writes events: lines appended to `<name>.jsonl.part` (landing
lists only `*.jsonl` and `.jsonl.gz`, so a part is never read while it grows), fsync'd, then
renamed to a `.jsonl` name (atomic on one file system).

Both writers use it: the recorder's `Spool` (one long-lived process, a name unique per writer:
`seal` keeps it) and the Claude Code hook (one short-lived process after another appending to the
same part: `publish` gives each file a name no other publish can have, `<name>-<random>.jsonl`,
created by a hard link that fails rather than replace a file, so a hook killed after publishing
can never have its file overwritten by the next one). The hook's files are private to the account
(0600, folders 0700).

The importers map a whole session on every import and write, with `Replacement` (streamed line by
line, compared with the file in place, renamed only when it changed), the events no file of an
earlier day holds (`Published`) into the session's file in the partition of the day,
`<folder>/dt=YYYY-MM-DD/<session>.jsonl` (`ctxdb.landing.partitions`): a landing lists recent
partitions only, every event lies in the one file it was landed from (the file erasure rewrites),
and a re-import of an unchanged session writes nothing. Standard library only (and
`ctxdb.landing.partitions`, which is): the hook starts once per event.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ctxdb.landing import partitions

PART = ".jsonl.part"
DONE = ".jsonl"
FILE_MODE = 0o600
DIR_MODE = 0o700
COPY_CHUNK = 1024 * 1024
"""Bytes copied at a time from an old version into its replacement."""


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) and make it 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def encode(events: Iterable[dict[str, Any]]) -> bytes:
    """JSONL bytes of `events` (UTF-8, one object per line, each ending with a newline)."""
    return b"".join(
        json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        + b"\n"
        for e in events
    )


def append(part: Path, events: list[dict[str, Any]]) -> None:
    """Append `events` to `part` (created 0600 with its folder); a line cut off by an earlier
    failed write is ended first, so it stays one bad line instead of swallowing the next event."""
    if not events:
        return
    private_dir(part.parent)
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_APPEND, FILE_MODE)
    with open(fd, "rb+") as file:
        data = encode(events)
        if file.seek(0, os.SEEK_END) > 0:
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":
                data = b"\n" + data
        file.write(data)
        file.flush()


def append_whole_lines(part: Path, lines: list[bytes]) -> None:
    """Append `lines` to `part` after cutting a last line a crash left unfinished (recovery:
    nothing is appended after the cut line), fsync'd."""
    if part.exists():
        content = part.read_bytes()
        os.truncate(part, content.rfind(b"\n") + 1)
    with open(part, "ab") as file:
        file.write(b"".join(lines))
        file.flush()
        os.fsync(file.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (best effort: some file systems refuse it)."""
    with contextlib.suppress(OSError):
        _fsync(path)


def seal(part: Path, into: Path | None = None) -> Path:
    """fsync `part` and rename it to its `.jsonl` name (in the folder `into`, made when missing,
    on the same file system; default: its own), replacing nothing but a file of the same writer
    (its name is unique per writer)."""
    _fsync(part)
    folder = part.parent if into is None else into
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / part.name.removesuffix(".part")
    os.replace(part, final)
    _fsync_dir(folder)
    return final


def publish(part: Path, into: Path | None = None) -> Path | None:
    """fsync `part` and move it to a fresh `<name>-<random>.jsonl` (in the folder `into`, made
    when missing, on the same file system; default: its own); None when there is no such file.
    The new name is created exclusively: an existing file is never replaced."""
    if not part.exists():
        return None
    _fsync(part)
    stem = part.name.removesuffix(".part").removesuffix(DONE)
    folder = part.parent if into is None else into
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        final = folder / f"{stem}-{os.urandom(6).hex()}{DONE}"
        try:
            os.link(part, final)
        except FileExistsError:
            continue
        except OSError:  # no hard links on this file system: a rename to a name nobody has
            if final.exists():
                continue
            os.rename(part, final)
            return final
        os.unlink(part)
        return final


class Replacement:
    """A new version of `path` written line by line and put in place atomically (0600) by
    `commit`, only when its bytes differ from the file there: while they are the same nothing is
    written; at the first difference the part file `<name>.<random>.part` is made from the equal
    prefix and takes the rest. Memory holds one line at a time. Leaving the `with` block without
    `commit` removes the part, and the folders its creation made, and leaves `path` as it was."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.part: Path | None = None
        self._made: Path | None = None
        """The topmost folder the part file's creation made (removed again with it)."""
        self._out: BinaryIO | None = None
        try:
            self._old: BinaryIO | None = open(path, "rb")  # noqa: SIM115 - closed by discard
        except FileNotFoundError:
            self._old = None

    def __enter__(self) -> Replacement:
        return self

    def __exit__(self, *_: object) -> None:
        self.discard()

    def write(self, data: bytes) -> None:
        """Add `data` to the new version."""
        if self._out is None and self._old is not None and self._old.read(len(data)) == data:
            self.size += len(data)
            return
        out = self._out or self._start()
        out.write(data)
        self.size += len(data)

    def _start(self) -> BinaryIO:
        """Open the part file and copy into it the prefix the old version shares."""
        folder = self.path.parent
        while not folder.exists():
            self._made, folder = folder, folder.parent
        private_dir(self.path.parent)
        self.part = self.path.with_name(f"{self.path.name}.{os.urandom(4).hex()}.part")
        self._out = open(os.open(self.part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")
        if self._old is not None:
            self._old.seek(0)
            left = self.size
            while left:
                chunk = self._old.read(min(left, COPY_CHUNK))
                if not chunk:
                    raise OSError(f"{self.path} shrank while it was replaced")
                self._out.write(chunk)
                left -= len(chunk)
            self._old.close()
            self._old = None
        return self._out

    def commit(self) -> bool:
        """Put the new version in place (fsync'd); False (nothing written) when `path` already
        held exactly these bytes."""
        if self._out is None and self._old is not None and not self._old.read(1):
            self.discard()
            return False
        out = self._out or self._start()  # new, or a shorter version of the old file
        out.flush()
        os.fsync(out.fileno())
        out.close()
        assert self.part is not None
        os.replace(self.part, self.path)
        self._out, self.part = None, None
        return True

    def discard(self) -> None:
        """Close the files and remove the part file, if any (no-op after `commit`)."""
        for file in (self._old, self._out):
            if file is not None:
                file.close()
        self._old = self._out = None
        if self.part is not None:
            self.part.unlink(missing_ok=True)
            self.part = None
            folder = self.path.parent
            while self._made is not None and folder.is_relative_to(self._made):
                with contextlib.suppress(OSError):  # not empty: another writer's
                    folder.rmdir()
                folder = folder.parent


def event_ids(path: Path) -> Iterator[str]:
    """The `event_id` of each line of the events file `path` (a line that is no event is passed
    over; a file removed meanwhile holds none)."""
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with file:
        for line in file:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("event_id"), str):
                yield event["event_id"]


class Published:
    """The events files the importers published, per session: `<folder>/<session>.jsonl` (the
    layout before partitions) and `<folder>/dt=YYYY-MM-DD/<session>.jsonl`, one for each day the
    session had new events. A folder's partitions are listed once and remembered; a session's
    files are then looked up by name, one partition after another (never a listing of files)."""

    def __init__(self) -> None:
        self._days: dict[Path, set[Path]] = {}

    def earlier(self, target: Path, today: Path) -> list[Path]:
        """The files published for the session `target` (`<folder>/<session>.jsonl`) outside
        the partition `today`."""
        days = sorted(self._listed(target.parent) - {today})
        return [p for p in [target, *(day / target.name for day in days)] if p.is_file()]

    def ids(self, target: Path, today: Path) -> set[str]:
        """The event ids the files of `earlier` hold."""
        return {i for path in self.earlier(target, today) for i in event_ids(path)}

    def add(self, target: Path, day: Path) -> None:
        """Remember the partition `day`, where a file of `target` was just written."""
        self._listed(target.parent).add(day)

    def _listed(self, folder: Path) -> set[Path]:
        if folder not in self._days:
            self._days[folder] = _partitions(folder)
        return self._days[folder]


def _partitions(folder: Path) -> set[Path]:
    """The day partitions directly under `folder` (none when it is missing)."""
    try:
        with os.scandir(folder) as entries:
            return {
                Path(e.path)
                for e in entries
                if partitions.day_of(e.name) is not None and e.is_dir(follow_symlinks=False)
            }
    except FileNotFoundError:
        return set()
