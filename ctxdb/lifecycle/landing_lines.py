"""Landing files rewritten without an erased scope's lines or a sweep's expired lines, read
exactly as landing reads them.

Landing tells a gzip file by its magic bytes (`ctxdb.landing.listing.unpack`), drops a UTF-8 byte
order mark at the start, and splits the content on `\\n` only; a line is one event or one
quarantined line. Erasure does the same, so the two agree on what a line is byte for byte: every
byte of a line it keeps (invalid UTF-8, `\\r`, U+2028 inside a string, ...) stays as it was, and a
removed line goes whole. A file is rewritten through a temporary file renamed over it (gzip again
when it was gzip), so a crash leaves the old file or the new one, never a truncated one.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from pyarrow import fs as pafs

from ctxdb.landing.listing import is_gzip, unpack
from ctxdb.landing.scan import BOM
from ctxdb.lifecycle.scope import Scope
from ctxdb.settings import Settings
from ctxdb.storage import object_store

TMP_SUFFIX = ".erase-tmp"
"""Suffix of a rewrite in progress (landing lists only *.jsonl / *.ndjson names)."""


def without_scope(content: bytes, scope: Scope) -> tuple[bytes, int]:
    """`content` with every line of `scope` emptied, and how many lines were. The other lines
    keep their numbers, so a line of another user quarantined before keeps its quarantine key
    when landing reads the rewritten file again (landing skips blank lines)."""
    bom = BOM if content.startswith(BOM) else b""
    lines = content[len(bom) :].split(b"\n")
    erased = [scope.in_line(line) for line in lines]
    kept = [b"" if gone else line for line, gone in zip(lines, erased, strict=True)]
    return bom + b"\n".join(kept), sum(erased)


def scope_lines(content: bytes, scope: Scope) -> int:
    """How many lines of `content` belong to `scope`."""
    body = content[len(BOM) :] if content.startswith(BOM) else content
    return sum(scope.in_line(line) for line in body.split(b"\n"))


def blanked(content: bytes, numbers: set[int]) -> tuple[bytes, int]:
    """`content` with the lines numbered `numbers` (1-based, as landing numbers them) emptied,
    and how many non-blank lines were emptied. Every other byte stays as it was and the other
    lines keep their numbers (landing skips blank lines)."""
    bom = BOM if content.startswith(BOM) else b""
    lines = content[len(bom) :].split(b"\n")
    gone = sum(1 for n in numbers if 0 < n <= len(lines) and lines[n - 1].strip())
    kept = [b"" if n in numbers else line for n, line in enumerate(lines, 1)]
    return bom + b"\n".join(kept), gone


def is_blank(content: bytes) -> bool:
    """True when no line of `content` holds anything but whitespace (or a byte order mark)."""
    return not content.removeprefix(BOM).strip()


def scrub(settings: Settings, sources: list[str], scope: Scope) -> int:
    """Rewrite each landing file in `sources` with the lines of `scope` emptied; returns how many.

    The rewritten file has a new size and mtime, so landing reads it again: every line left is
    already landed and counted as a duplicate, and the erased lines are gone for good.
    """
    removed = 0
    for source in sources:
        filesystem, path = landing_file(settings, source)
        raw = read(filesystem, path)
        if raw is None:
            continue
        kept, gone = without_scope(unpack(raw), scope)
        if not gone:
            continue
        rewrite(filesystem, path, raw, kept)
        removed += gone
    return removed


def rewrite(filesystem: pafs.FileSystem, path: str, raw: bytes, content: bytes) -> None:
    """Replace the file whose bytes were `raw` with `content` (gzip again when it was gzip)."""
    _replace(filesystem, path, gzip.compress(content, mtime=0) if is_gzip(raw) else content)


def count(settings: Settings, sources: list[str], scope: Scope) -> dict[str, int]:
    """Lines of `scope` in each landing file of `sources` (files gone count 0)."""
    counts: dict[str, int] = {}
    for source in sources:
        raw = read(*landing_file(settings, source))
        counts[source] = 0 if raw is None else scope_lines(unpack(raw), scope)
    return counts


def landing_file(settings: Settings, source: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a landed file (`source_file` as landing recorded it), an
    object store reached with the settings' storage options."""
    options = settings.object_store_options
    if "://" in source:
        return object_store.filesystem(source, options)
    root = settings.landing_uri
    if "://" not in root:
        return object_store.filesystem(str(rebased(Path(root).resolve(), Path(source))))
    filesystem, base = object_store.filesystem(root, options)
    base = base.rstrip("/")
    return filesystem, source if source.startswith(base + "/") else f"{base}/{source}"


def rebased(root: Path, source: Path) -> Path:
    """Where a landed file recorded as `source` lies under the landing root `root` now.

    Landing records local files by absolute path. When the home was moved, copied or restored
    elsewhere, such a path names the old location: the file is this memory's copy under `root`
    whose path ends with the longest tail of `source` found there. A path under `root` (or a
    relative one) is taken as it is; one with no copy under `root` stays where it was recorded
    (a landing root outside the home that did not move).
    """
    if not source.is_absolute():
        return root / source
    if source.is_relative_to(root):
        return source
    parts = source.parts[1:]
    for start in range(len(parts)):
        candidate = root.joinpath(*parts[start:])
        if candidate.is_file():
            return candidate
    return source


def read(filesystem: pafs.FileSystem, path: str) -> bytes | None:
    """The raw bytes of a file (None when it is gone)."""
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        return None
    with filesystem.open_input_file(path) as handle:
        return handle.read()


def _replace(filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write `data` to a temporary file beside `path` and move it over `path`."""
    tmp = path + TMP_SUFFIX
    with filesystem.open_output_stream(tmp, compression=None) as out:
        out.write(data)
    filesystem.move(tmp, path)
