"""How capture reads the files hosts write (Claude Code transcripts, Codex rollouts, Gemini CLI
sessions): never blocking, never outside the host's folder, never whole.

- `open_regular` opens a file only when it is a regular file, and, given a `root`, only when its
  real path (symlinks resolved) lies under the root's. It opens with `O_NONBLOCK | O_NOFOLLOW` and
  checks the open descriptor with `fstat`, so a FIFO or a device is refused (`Unreadable`) without
  ever waiting on it. Every reader of every host opens its files through it.
- `under_root` says whether a file found in a folder really lies in it (folder imports skip a
  symlink that leads out of the folder they were given).
- `json_lines` reads a JSONL file one line at a time, each at most `MAX_LINE_BYTES` (a longer line
  is skipped without being held), and hands each decoded line to a `parse` function. A line that
  is not JSON, nests too deep to decode (`RecursionError`) or that `parse` fails on is that line's
  failure: counted in `LineCounts.bad`, skipped, and the lines after it are still read.
  `guarded` applies the same rule to one unit of an already decoded document.

Standard library only: the Claude Code hook imports it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

MAX_LINE_BYTES = 32 * 1024 * 1024
"""Longest line (or Gemini CLI message) a reader decodes; a longer one is one bad line."""
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
"""Longest hook payload (JSON on stdin) a hook reads; a longer one is refused, never held."""
SKIP_CHUNK = 1024 * 1024
"""Bytes read at a time while skipping the rest of an over-long line."""
LINE_ERRORS = (ValueError, RecursionError, TypeError, KeyError, AttributeError)
"""What one line's decoding or mapping may raise without stopping the file: not JSON, nested too
deep for the decoder or the mapper, or a shape the mapper did not expect."""

T = TypeVar("T")


class Unreadable(OSError):
    """A file capture will not read (outside its host's folder, not a regular file...)."""


@dataclass
class LineCounts:
    """What reading one file met: non-blank `lines`, `bad` ones (not JSON, too deep, too long,
    or not understood: skipped) and whether the last line was cut off (`truncated`: the host
    may still be writing it)."""

    lines: int = 0
    bad: int = 0
    truncated: bool = False


def _flag(name: str) -> int:
    """An `os.O_*` flag, 0 where the platform has none (Windows)."""
    return getattr(os, name, 0)


def under_root(path: str | Path, root: str | Path) -> bool:
    """True when the real path of `path` (symlinks resolved) lies under the real path of
    `root`."""
    real_root = os.path.realpath(os.path.expanduser(root))
    real = os.path.realpath(os.path.expanduser(path))
    return os.path.commonpath([real_root, real]) == real_root


def open_regular(path: str | Path, root: str | Path | None = None) -> BinaryIO:
    """`path` opened for reading when it is a regular file (and, given `root`, its real path
    lies under `root`'s); else `Unreadable`. Never blocks: the file is opened non-blocking and
    without following a last symlink, and checked on the open descriptor (no FIFO, no device)."""
    real = os.path.realpath(os.path.expanduser(path))
    if root is not None and not under_root(real, root):
        raise Unreadable(f"{path} is outside {root}")
    flags = os.O_RDONLY | _flag("O_NONBLOCK") | _flag("O_CLOEXEC") | _flag("O_NOFOLLOW")
    fd = os.open(real, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Unreadable(f"{path} is not a regular file")
    return open(fd, "rb")


def decode(raw: bytes) -> Any:
    """One JSON line decoded; ValueError when it is not JSON or nests too deep to decode."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deep to decode") from None


def _skip_line(file: BinaryIO) -> bool:
    """Read past the rest of the current line without holding it; False when the file ended
    first (the line has no newline yet)."""
    while chunk := file.read(SKIP_CHUNK):
        end = chunk.find(b"\n")
        if end >= 0:
            file.seek(end + 1 - len(chunk), os.SEEK_CUR)
            return True
    return False


class RawLine(NamedTuple):
    """One line of a file: where it starts, its bytes (None when longer than the bound: skipped
    unread) and whether it ends with a newline."""

    start: int
    data: bytes | None
    complete: bool


def raw_lines(file: BinaryIO, max_line: int = MAX_LINE_BYTES) -> Iterator[RawLine]:
    """The lines of `file` from its position, each read with at most `max_line` bytes held."""
    start = file.tell()
    while line := file.readline(max_line + 1):
        if line.endswith(b"\n"):
            yield RawLine(start, line, True)
        elif len(line) > max_line:
            yield RawLine(start, None, _skip_line(file))
        else:
            yield RawLine(start, line, False)
        start = file.tell()


def decoded_lines(
    file: BinaryIO, counts: LineCounts, max_line: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, int, Any]]:
    """`(line number, start offset, decoded value)` of each line of a JSONL file, read one line
    at a time. A line that is not JSON, too deep or too long is counted in `counts` and skipped; a
    last line without its newline that is not JSON is taken as cut off (`counts.truncated`) and
    ends the read."""
    for number, (start, raw, complete) in enumerate(raw_lines(file, max_line), start=1):
        if raw is not None and not raw.strip():
            continue
        try:
            if raw is None:
                raise ValueError(f"longer than {max_line} bytes")
            value = decode(raw)
        except ValueError:
            if not complete and raw is not None:
                counts.truncated = True
                return
            counts.lines += 1
            counts.bad += 1
            continue
        counts.lines += 1
        yield number, start, value


def json_lines(
    file: BinaryIO,
    counts: LineCounts,
    parse: Callable[[int, Any], Iterable[T]],
    max_line: int = MAX_LINE_BYTES,
) -> Iterator[T]:
    """What `parse(line number, decoded line)` gives for each line of a JSONL file
    (`decoded_lines`); a line `parse` fails on is counted in `counts.bad` and skipped."""
    for number, _, value in decoded_lines(file, counts, max_line):
        yield from guarded(counts, parse, number, value)


def guarded(counts: LineCounts, parse: Callable[..., Iterable[T]], *args: Any) -> list[T]:
    """What `parse(*args)` gives for one unit (a line, a message), or nothing when it fails on it
    (`LINE_ERRORS`; counted in `counts.bad`)."""
    try:
        return list(parse(*args))
    except LINE_ERRORS:
        counts.bad += 1
        return []
