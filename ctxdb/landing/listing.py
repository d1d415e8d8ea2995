"""Landing files: listing JSONL files (plain or gzip) under a directory or object-store prefix,
reading them in one piece (zlib-ng gunzip) ahead of the parser, and telling which are pending.

A file that cannot be read is not an error of the run: reading it gives an `Unreadable` (why,
and its first bytes), which landing quarantines as a file while the other files land.

On S3 the landing location is reached with Delta's storage options
(`ctxdb.storage.object_store.filesystem`), so one setting names the endpoint and keys of both."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime

import polars as pl
import pyarrow.fs as pafs
from zlib_ng import gzip_ng, zlib_ng

from ctxdb.landing import partitions
from ctxdb.storage.object_store import StorageOptions, filesystem

log = logging.getLogger(__name__)


SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
HEAD_BYTES = 64
"""How many leading bytes of an unreadable file its quarantine row keeps."""
CORRUPT_GZIP = "corrupt_gzip"
UNREADABLE_FILE = "unreadable_file"
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class LandingFile:
    """One file found under the landing location."""

    path: str
    size: int
    mtime: datetime | None


def list_files(
    uri: str, storage_options: StorageOptions | None = None, since: datetime | None = None
) -> list[LandingFile]:
    """Every JSONL file (plain or gzip) under `uri`, recursively, sorted by path (`filesystem`
    for `storage_options`). With `since` (the landing cursor), date partitions older than its
    day less `partitions.OVERLAP` are not listed: a run lists the files outside partitions and
    the recent partitions, not every file ever landed (`ctxdb.landing.partitions`)."""
    fs, base = filesystem(uri, storage_options)
    if fs.get_file_info(base).type == pafs.FileType.NotFound:
        return []
    if since is None:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    else:
        infos = _walk(fs, base, partitions.first_listed(since))
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


def _walk(fs: pafs.FileSystem, base: str, first: date) -> list[pafs.FileInfo]:
    """What is under `base`, folder by folder, but for partitions older than `first`: a
    partition from `first` on is listed whole, any other folder is walked into."""
    infos: list[pafs.FileInfo] = []
    folders = [base]
    while folders:
        for entry in fs.get_file_info(pafs.FileSelector(folders.pop(), recursive=False)):
            if entry.type != pafs.FileType.Directory:
                infos.append(entry)
                continue
            day = partitions.day_of(entry.base_name)
            if day is None:
                folders.append(entry.path)
            elif day >= first:
                infos += fs.get_file_info(pafs.FileSelector(entry.path, recursive=True))
    return infos


def within(uri: str, files: Sequence[LandingFile], since: datetime) -> list[LandingFile]:
    """The files among `files` (listed under `uri`) that `list_files(uri, since=since)` lists:
    those outside partitions and those in a partition from `partitions.first_listed(since)` on
    (the first `dt=` folder below `uri` decides, as in the listing)."""
    first = partitions.first_listed(since)
    prefix = uri.rstrip("/") + "/"
    return [f for f in files if _listed(f.path.removeprefix(prefix), first)]


def _listed(relative: str, first: date) -> bool:
    for folder in relative.split("/")[:-1]:
        day = partitions.day_of(folder)
        if day is not None:
            return day >= first
    return True


def _display(uri: str, base: str, path: str) -> str:
    if "://" not in uri:
        return path
    scheme = uri.split("://", 1)[0]
    return f"{scheme}://{path}"


@dataclass(frozen=True)
class Unreadable:
    """A landing file whose content could not be read: `reason` is `corrupt_gzip` (the bytes are
    bad: the file stays quarantined until it changes) or `unreadable_file` (reading failed: it is
    tried again by the next run); `head` holds its first bytes when they could be read."""

    reason: str
    detail: str
    head: bytes = b""


def is_gzip(data: bytes) -> bool:
    """True when `data` starts with gzip's magic bytes: a landing file is gzip by its content,
    whatever its name (landing and erasure both tell it this way)."""
    return data[:2] == GZIP_MAGIC


def unpack(data: bytes) -> bytes:
    """The content of a landing file's bytes: gunzipped (zlib-ng) when they are gzip."""
    return gzip_ng.decompress(data) if is_gzip(data) else data


def read_bytes(path: str, storage_options: StorageOptions | None = None) -> bytes:
    """The content of one landing file, gunzipped (zlib-ng) when it starts with gzip's magic."""
    return unpack(_read_raw(path, storage_options))


def read_landing_file(
    path: str, storage_options: StorageOptions | None = None
) -> bytes | Unreadable:
    """`read_bytes`, or why the file cannot be read (a truncated or corrupt gzip member, an I/O
    error); never raises for one bad file."""
    try:
        data = _read_raw(path, storage_options)
    except OSError as exc:
        log.warning("cannot read landing file %s: %s", path, exc)
        return Unreadable(UNREADABLE_FILE, f"{type(exc).__name__}: {exc}")
    if not is_gzip(data):
        return data
    try:
        return gzip_ng.decompress(data)
    # zlib_ng's stub declares `error` an Exception instance; it is the module's exception class.
    except (EOFError, OSError, zlib_ng.error) as exc:  # type: ignore[misc]
        log.warning("landing file %s is not a valid gzip file: %s", path, exc)
        return Unreadable(CORRUPT_GZIP, f"{type(exc).__name__}: {exc}", data[:HEAD_BYTES])


def _read_raw(path: str, storage_options: StorageOptions | None = None) -> bytes:
    fs, real = filesystem(path, storage_options)
    # A random-access file reads in one piece; an input stream would also gunzip `.gz` names
    # itself, with the slower zlib.
    with fs.open_input_file(real) as file:
        return file.read()


def prefetched(
    paths: Sequence[str], storage_options: StorageOptions | None = None
) -> Iterator[bytes | Unreadable]:
    """The content of each file in order (or why it cannot be read), the next file read (and
    gunzipped, which releases the GIL) in a background thread while the caller parses the
    current one."""
    if not paths:
        return
    with ThreadPoolExecutor(max_workers=1) as reader:
        ahead = reader.submit(read_landing_file, paths[0], storage_options)
        for following in paths[1:]:
            data = ahead.result()
            ahead = reader.submit(read_landing_file, following, storage_options)
            yield data
        yield ahead.result()


def pending_files(files: Sequence[LandingFile], *done: pl.DataFrame) -> list[LandingFile]:
    """Files not landed yet: a file counts as done while its path, size and mtime match a row of
    one of `done` (landed files, and files quarantined for bad bytes)."""
    seen = {
        (row["source_file"], row["size"], row["mtime"])
        for frame in done
        for row in frame.select("source_file", "size", "mtime").iter_rows(named=True)
    }
    return [f for f in files if (f.path, f.size, f.mtime) not in seen]
