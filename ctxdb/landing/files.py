"""Landing files: listing JSONL files (plain or gzip) under a directory or object-store prefix,
reading them in one piece (zlib-ng gunzip) ahead of the parser, and telling which are pending."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl
import pyarrow.fs as pafs
from zlib_ng import gzip_ng

log = logging.getLogger(__name__)


SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


@dataclass(frozen=True)
class LandingFile:
    """One file found under the landing location."""

    path: str
    size: int
    mtime: datetime | None


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path of a local directory or an object-store URI."""
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), uri


def list_files(uri: str) -> list[LandingFile]:
    """Every JSONL file (plain or gzip) under `uri`, recursively, sorted by path."""
    fs, base = filesystem(uri)
    if fs.get_file_info(base).type == pafs.FileType.NotFound:
        return []
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    files = [
        LandingFile(
            path=_display(uri, base, info.path),
            size=int(info.size or 0),
            mtime=info.mtime.replace(tzinfo=UTC)
            if info.mtime and info.mtime.tzinfo is None
            else info.mtime,
        )
        for info in infos
        if info.type == pafs.FileType.File and info.path.endswith(SUFFIXES)
    ]
    return sorted(files, key=lambda f: f.path)


def _display(uri: str, base: str, path: str) -> str:
    if "://" not in uri:
        return path
    scheme = uri.split("://", 1)[0]
    return f"{scheme}://{path}"


def read_bytes(path: str) -> bytes:
    """The content of one landing file, gunzipped (zlib-ng) when it starts with gzip's magic."""
    fs, real = filesystem(path)
    # A random-access file reads in one piece; an input stream would also gunzip `.gz` names
    # itself, with the slower zlib.
    with fs.open_input_file(real) as file:
        data = file.read()
    return gzip_ng.decompress(data) if data[:2] == b"\x1f\x8b" else data


def prefetched(paths: Sequence[str]) -> Iterator[bytes]:
    """The content of each file in order, the next file read (and gunzipped, which releases the
    GIL) in a background thread while the caller parses the current one."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        ahead = reader.submit(read_bytes, paths[0]) if paths else None
        for index in range(len(paths)):
            data = ahead.result()
            if index + 1 < len(paths):
                ahead = reader.submit(read_bytes, paths[index + 1])
            yield data


def pending_files(files: Sequence[LandingFile], landed: pl.DataFrame) -> list[LandingFile]:
    """Files not landed yet (a file counts as landed while its path, size and mtime match)."""
    seen = {
        (row["source_file"], row["size"], row["mtime"])
        for row in landed.select("source_file", "size", "mtime").iter_rows(named=True)
    }
    return [f for f in files if (f.path, f.size, f.mtime) not in seen]
