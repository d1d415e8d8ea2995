"""Part files, the one way capture writes events: lines appended to `<name>.jsonl.part` (landing
lists only `*.jsonl` and `.jsonl.gz`, so a part is never read while it grows), fsync'd, then
renamed to a `.jsonl` name (atomic on one file system).

Both writers use it: the recorder's `Spool` (one long-lived process, a name unique per writer:
`seal` keeps it) and the Claude Code hook (one short-lived process after another appending to the
same part: `publish` gives each file a name no other publish can have, `<name>-<random>.jsonl`,
created by a hard link that fails rather than replace a file, so a hook killed after publishing
can never have its file overwritten by the next one). The hook's files are private to the account
(0600, folders 0700).

The importers map a whole session on every import; `Additions` publishes only the events no
earlier file of that session holds (`Published`: found by name in the importer's folder and its
day partitions), into the partition of the day it publishes them, so a landing lists recent
partitions only and every event lies in the one file it was first landed from (the file erasure
rewrites). A re-import of an unchanged session writes nothing. Standard library only (and
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


def _claim(part: Path, final: Path) -> bool:
    """Give `part` the name `final` if no file has it (a hard link, which fails rather than
    replace a file; a rename where the file system has no hard links); False when one has."""
    try:
        os.link(part, final)
    except FileExistsError:
        return False
    except OSError:  # no hard links on this file system: a rename to a name nobody has
        if final.exists():
            return False
        os.rename(part, final)
        return True
    os.unlink(part)
    return True


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
        if _claim(part, final):
            return final


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
    """The events files the importers published so far, per session: `<folder>/<stem>.jsonl`
    (one whole file, the layout before partitions) and `<folder>/dt=YYYY-MM-DD/<stem>.<n>.jsonl`
    (`Additions`). Each folder is listed once (its partitions included) and remembered."""

    def __init__(self) -> None:
        self._listed: dict[Path, dict[str, list[Path]]] = {}

    def files(self, target: Path) -> list[Path]:
        """The files published for the session whose events file is named `target`."""
        if target.parent not in self._listed:
            self._listed[target.parent] = _sessions(target.parent)
        return self._listed[target.parent].get(target.name.removesuffix(DONE), [])

    def ids(self, target: Path) -> set[str]:
        """The event ids the files published for the session `target` hold."""
        return {event_id for path in self.files(target) for event_id in event_ids(path)}

    def add(self, target: Path, published: Path) -> None:
        """Remember `published`, a new file of the session `target`."""
        self.files(target)  # the folder listed first
        self._listed[target.parent].setdefault(target.name.removesuffix(DONE), []).append(published)


def _sessions(folder: Path) -> dict[str, list[Path]]:
    """The events files in `folder` and in its day partitions, by session (the name up to its
    first dot: session names have none)."""
    found: dict[str, list[Path]] = {}
    folders = [folder]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and partitions.day_of(entry.name):
                folders.append(Path(entry.path))
            elif entry.name.endswith(DONE) and not entry.name.startswith("."):
                found.setdefault(entry.name.split(".", 1)[0], []).append(Path(entry.path))
    return found


class Additions:
    """The events of one session that no published file holds yet (`known`, their ids), written
    line by line to a part file in `folder` and published by `commit` as `<stem>.<n>.jsonl` (`n`:
    how many events were published before), a name created exclusively. Memory holds one line
    at a time besides `known`. Leaving the `with` block without `commit` removes the part, and
    the folders its creation made."""

    def __init__(self, folder: Path, stem: str, known: set[str]) -> None:
        self.folder = folder
        self.stem = stem
        self.known = known
        self.part: Path | None = None
        self._made: Path | None = None
        """The topmost folder the part file's creation made (removed again with it)."""
        self._out: BinaryIO | None = None

    def __enter__(self) -> Additions:
        return self

    def __exit__(self, *_: object) -> None:
        self.discard()

    def write(self, event: dict[str, Any]) -> bool:
        """Add `event` unless its id is known; True when it was added."""
        if event.get("event_id") in self.known:
            return False
        (self._out or self._start()).write(encode([event]))
        return True

    def _start(self) -> BinaryIO:
        folder = self.folder
        while not folder.exists():
            self._made, folder = folder, folder.parent
        private_dir(self.folder)
        self.part = self.folder / f".{self.stem}.{os.urandom(4).hex()}.part"
        self._out = open(os.open(self.part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")
        return self._out

    def commit(self) -> Path | None:
        """Publish the events added (fsync'd); None, nothing written, when there are none. When
        another writer took the name first (the same session imported twice at once), the
        events its file holds are left out of this one, which takes the next name."""
        if self._out is None or self.part is None:
            return None
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        self._out = None
        count = len(self.known)
        while True:
            final = self.folder / f"{self.stem}.{count}{DONE}"
            if _claim(self.part, final):
                self.part = None
                _fsync_dir(self.folder)
                return final
            self.known.update(event_ids(final))
            if not _keep_unknown(self.part, self.known):
                self.discard()
                return None
            count = max(count + 1, len(self.known))

    def discard(self) -> None:
        """Close and remove the part file, if any (no-op after `commit`), and the folders its
        creation made."""
        if self._out is not None:
            self._out.close()
            self._out = None
        if self.part is not None:
            self.part.unlink(missing_ok=True)
            self.part = None
            folder = self.folder
            while self._made is not None and folder.is_relative_to(self._made):
                with contextlib.suppress(OSError):  # not empty: another writer's
                    folder.rmdir()
                folder = folder.parent


def _keep_unknown(part: Path, known: set[str]) -> int:
    """Rewrite `part` (fsync'd) without the lines whose event id is `known`; the lines kept."""
    kept = 0
    fresh = part.with_name(f"{part.name}.{os.urandom(4).hex()}")
    with (
        open(part, "rb") as lines,
        open(os.open(fresh, os.O_WRONLY | os.O_CREAT, FILE_MODE), "wb") as out,
    ):
        for line in lines:
            if json.loads(line).get("event_id") not in known:
                out.write(line)
                kept += 1
        out.flush()
        os.fsync(out.fileno())
    os.replace(fresh, part)
    return kept
