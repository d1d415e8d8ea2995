"""The hook's spool files: events appended to `<name>.jsonl.part`, published by a rename.

Landing lists only `*.jsonl` (and `.jsonl.gz`), so a `.part` file is never read while a turn is
still being written; `publish` fsyncs it and renames it to `<name>.jsonl` (atomic on one file
system). Standard library only (the hook imports it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def encode(events: Iterable[dict[str, Any]]) -> bytes:
    """JSONL bytes of `events` (UTF-8, one object per line, each ending with a newline)."""
    return b"".join(
        json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        + b"\n"
        for e in events
    )


def append(part: Path, events: list[dict[str, Any]]) -> None:
    """Append `events` to `part` (created with its folder); a line cut off by an earlier failed
    write is ended first, so it stays one bad line instead of swallowing the next event."""
    if not events:
        return
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part, "ab+") as file:
        data = encode(events)
        if file.tell() > 0:
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":
                data = b"\n" + data
        file.write(data)
        file.flush()


def publish(part: Path) -> Path | None:
    """fsync `part` and rename it to its `.jsonl` name; None when there is no such file."""
    if not part.exists():
        return None
    with open(part, "rb+") as file:
        os.fsync(file.fileno())
    final = part.with_name(part.name.removesuffix(".part"))
    os.replace(part, final)
    return final


def write_atomic(path: Path, data: bytes) -> bool:
    """Write `data` to `path` through a `.part` file and a rename; False (nothing written) when
    the file already holds exactly these bytes."""
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(part, path)
    return True
