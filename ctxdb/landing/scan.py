"""Parsing landing bytes into event rows and quarantine rows. A scanner validates every line
against a mirror of the contract: the native one (`_native`, Rust, every core, Arrow string views
into the bytes) when it is built, else the pure-Python one (`mirror`, msgspec and polars). The
lines a scanner does not accept go through the pydantic contract, which accepts them or names the
reason. Both scanners land the same rows (`tests/test_landing_scanners.py`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa

from ctxdb.contract.events import (
    ENVELOPE_COLUMNS,
    MAX_EVENT_BYTES,
    SCHEMA_VERSION,
    EventError,
    parse_event,
)
from ctxdb.landing import mirror
from ctxdb.landing.listing import LandingFile, Unreadable, prefetched
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.object_store import StorageOptions
from ctxdb.storage.tables import (
    RAW_EVENTS_SCHEMA,
)

log = logging.getLogger(__name__)

_native: ModuleType | None
try:
    from ctxdb.landing import _native
except ImportError:  # built only where cargo was present at install
    _native = None

SCANNERS = ("auto", "native", "python")

EVENT_COLUMNS = [
    f.name for f in RAW_EVENTS_SCHEMA if f.name not in ("ingested_at", "landed_version")
]

SCANNED_STRINGS = [c for c in ENVELOPE_COLUMNS if c != "occurred_at"] + ["payload"]
"""String columns the native scanner returns as Arrow string views."""


BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some editors write at the start of a file; not part of line 1."""


@dataclass
class Parsed:
    """Valid event rows and quarantine rows parsed from some lines; `unreadable` when the file
    could not be read at all (then both frames are empty)."""

    events: pl.DataFrame
    quarantine: pl.DataFrame
    unreadable: Unreadable | None = None


def scanner_in_use(scanner: str = "auto") -> str:
    """The scanner that `scanner` (a `CTXDB_LANDING_SCANNER` value) runs: `native` or `python`;
    `auto` takes the native one when it is built."""
    if scanner not in SCANNERS:
        raise ValueError(f"landing scanner must be one of {', '.join(SCANNERS)}: {scanner!r}")
    if scanner == "native" and _native is None:
        raise RuntimeError("the native landing scanner is not built (install ctxdb with cargo)")
    if scanner == "auto":
        return "python" if _native is None else "native"
    return scanner


def parse_bytes(
    data: bytes, source_file: str, now: datetime, threads: int = 0, scanner: str = "auto"
) -> Parsed:
    """Validate each line of `data`; blank lines are skipped, every other line lands or is
    quarantined. A UTF-8 byte order mark at the start of `data` is dropped.

    The scanner (`scanner_in_use(scanner)`; the native one runs on `threads` threads) validates
    every line; each line it does not accept goes through the pydantic contract, which accepts it
    or names the reason. The payload column is the payload's JSON text as written.
    """
    if data.startswith(BOM):
        data = data[len(BOM) :]
    if scanner_in_use(scanner) == "native" and _native is not None:
        scan = _native.scan_events(data, MAX_EVENT_BYTES, threads)
        events = _scanned_frame(data, scan)
        rejected = [(number, data[start:end]) for number, start, end in scan["rejected"]]
    else:
        events, rejected = mirror.scan(data, MAX_EVENT_BYTES)
    slow: dict[str, list] = {name: [] for name in [*ENVELOPE_COLUMNS, "line_number", "payload"]}
    bad: dict[str, list] = {"line_number": [], "raw_line": [], "reason": [], "detail": []}
    for number, line in rejected:
        try:
            event = parse_event(line)
            payload = payload_as_written(line)
        except EventError as exc:
            bad["line_number"].append(number)
            bad["raw_line"].append(_text(line))
            bad["reason"].append(exc.reason)
            bad["detail"].append(exc.detail)
            continue
        for name in ENVELOPE_COLUMNS:
            slow[name].append(getattr(event, name))
        slow["line_number"].append(number)
        slow["payload"].append(payload)
    if slow["line_number"]:
        events = pl.concat([events, _contract_frame(slow)]).sort("line_number")
    events = events.with_columns(
        pl.lit(SCHEMA_VERSION, dtype=pl.Int32).alias("schema_version"),
        pl.lit(source_file).alias("source_file"),
    )
    quarantine = quarantine_frame(
        pl.DataFrame(
            bad,
            schema={
                "line_number": pl.Int64,
                "raw_line": pl.String,
                "reason": pl.String,
                "detail": pl.String,
            },
        ),
        source_file,
        now,
    )
    return Parsed(events=events.select(EVENT_COLUMNS), quarantine=quarantine)


def _scanned_frame(data: bytes, scan: dict) -> pl.DataFrame:
    """The rows the native scanner accepted, as Arrow string views into `data` and the
    scanner's buffers of unescaped strings (no copy, no per-row Python work)."""
    rows = scan["rows"]
    whole = pa.py_buffer(data)
    buffers = [whole.slice(start, end - start) for start, end in scan["windows"]]
    buffers += [pa.py_buffer(extra) for extra in scan["extra"]]

    def array(kind: pa.DataType, values: bytes, *data_buffers: pa.Buffer) -> pa.Array:
        return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(values), *data_buffers])

    columns = {name: array(pa.string_view(), scan[name], *buffers) for name in SCANNED_STRINGS}
    columns["occurred_at"] = array(pa.timestamp("us", "UTC"), scan["occurred_at"])
    columns["line_number"] = array(pa.int64(), scan["line_number"])
    return frame_of(pa.table(columns)).select(*ENVELOPE_COLUMNS, "line_number", "payload")


class _Payload(msgspec.Struct):
    payload: msgspec.Raw


_PAYLOAD = msgspec.json.Decoder(_Payload)


def payload_as_written(line: bytes) -> str:
    """The JSON text of the payload of a line the contract accepted, as written (the last one of
    a repeated key, as the contract reads it); `malformed_json` when the line is not strict JSON
    (a NaN or Infinity literal the contract's parser tolerates under a repeated key)."""
    try:
        return bytes(_PAYLOAD.decode(line).payload).decode()
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventError("malformed_json", f"not strict JSON: {exc}") from None


def _contract_frame(slow: dict[str, list]) -> pl.DataFrame:
    """Rows the pydantic contract accepted after the scanner did not."""
    schema = polars_schema([*ENVELOPE_COLUMNS, "line_number", "payload"], RAW_EVENTS_SCHEMA)
    return pl.DataFrame(slow, schema=schema)


def parse_files(
    files: Sequence[LandingFile],
    now: datetime,
    threads: int = 0,
    scanner: str = "auto",
    storage_options: StorageOptions | None = None,
) -> Iterator[tuple[LandingFile, Parsed]]:
    """Each file with its parse, in order, validated by `scanner` (the native one on `threads`
    threads, 0: one per core) while the next file is read (`storage_options`: Delta's, for an
    `s3://` location); each parsed file is logged (long landings report as they go)."""
    paths = [f.path for f in files]
    contents = prefetched(paths, storage_options)
    for number, (file, data) in enumerate(zip(files, contents, strict=True), start=1):
        if isinstance(data, Unreadable):
            empty = parse_bytes(b"", file.path, now, threads, scanner)
            yield file, Parsed(empty.events, empty.quarantine, unreadable=data)
            continue
        parsed = parse_bytes(data, file.path, now, threads, scanner)
        log.info(
            "parsed %s (%d/%d): %d valid, %d quarantined",
            file.path,
            number,
            len(files),
            parsed.events.height,
            parsed.quarantine.height,
        )
        yield file, parsed


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace")[:MAX_EVENT_BYTES]


def polars_schema(names: Iterable[str], schema) -> dict[str, pl.DataType]:
    empty = frame_of(schema.empty_table())
    return {name: empty.schema[name] for name in names}


class _Ids(msgspec.Struct):
    event_id: Any = None
    conversation_id: Any = None


_IDS = msgspec.json.Decoder(_Ids)


def _ids(raw_line: str) -> tuple[str | None, str | None]:
    """A raw line's event and conversation ids as JSON path matching gives them (a string as
    is, another value as its JSON text), read by msgspec, which reads lines polars does not (a
    number past 64 bits, nesting past 127 levels); (None, None) when it cannot read the line."""
    try:
        ids = _IDS.decode(raw_line)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nesting past msgspec's limit
        return None, None
    return _text_of(ids.event_id), _text_of(ids.conversation_id)


def _text_of(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def quarantine_frame(bad: pl.DataFrame, source_file: str, now: datetime) -> pl.DataFrame:
    """Quarantine rows (QUARANTINE_SCHEMA) from line_number/raw_line/reason/detail columns."""
    read = [_ids(line) for line in bad["raw_line"]]
    found = {
        name: pl.Series([ids[i] for ids in read], dtype=pl.String)
        for i, name in enumerate(("event_id", "conversation_id"))
    }
    return bad.select(
        pl.lit(source_file).alias("source_file"),
        pl.col("line_number").cast(pl.Int64),
        pl.col("raw_line"),
        pl.col("reason"),
        pl.col("detail"),
        *(
            pl.col("raw_line").str.json_path_match(f"$.{name}").fill_null(ids).alias(name)
            for name, ids in found.items()
        ),
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("quarantined_at"),
    )
