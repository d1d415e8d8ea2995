"""Landing: JSONL files (plain or gzip) -> `raw_turn_events`, with every bad line quarantined.

Parsing is pure (`parse_lines`): each line becomes either a validated event row or a quarantine
row with its reason. `land` adds the I/O: it lists the landing directory or object-store prefix,
skips files already landed (same path, size and mtime), drops event ids already present
(anti-join, counted as duplicates), quarantines events for conversations owned by another identity
or already purged, and commits quarantine -> events -> landed files. Each commit is atomic and each
step idempotent, so a run killed between two commits is completed by the next run.
"""

from __future__ import annotations

import gzip
import logging
import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow.fs as pafs

from ctxdb.delta import DeltaStore
from ctxdb.events import (
    ENVELOPE_COLUMNS,
    MAX_EVENT_BYTES,
    SCHEMA_VERSION,
    EventError,
    parse_event,
)
from ctxdb.events_fast import ID_PATTERNS, fast_event
from ctxdb.tables import (
    LANDED_FILES,
    LANDED_FILES_SCHEMA,
    QUARANTINE_SCHEMA,
    QUARANTINED_EVENTS,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
)
from ctxdb.tombstones import purged_among

log = logging.getLogger(__name__)

SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
OWNER = ["tenant", "app", "user_id"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
PARALLEL_MIN_BYTES = 32 * 1024 * 1024
"""Below this much input, files are parsed in-process (worker start-up would cost more)."""
EVENT_COLUMNS = [
    f.name for f in RAW_EVENTS_SCHEMA if f.name not in ("ingested_at", "landed_version")
]


@dataclass(frozen=True)
class LandingFile:
    """One file found under the landing location."""

    path: str
    size: int
    mtime: datetime | None


@dataclass
class Parsed:
    """Valid event rows and quarantine rows parsed from some lines."""

    events: pl.DataFrame
    quarantine: pl.DataFrame


@dataclass
class LandingStats:
    files: int = 0
    skipped_files: int = 0
    lines: int = 0
    landed: int = 0
    duplicates: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    landed_version: int | None = None


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


def read_lines(path: str) -> list[bytes]:
    """The lines of one landing file (gzip detected by its magic bytes), without line ends."""
    fs, real = filesystem(path)
    with fs.open_input_stream(real) as stream:
        data = stream.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.rstrip(b"\r") for line in lines] if b"\r" in data else lines


def parse_lines(lines: Sequence[bytes | str], source_file: str, now: datetime) -> Parsed:
    """Validate each line; blank lines are skipped, everything else lands or is quarantined.

    Each line goes through the fast msgspec mirror of the contract first; a line it rejects goes
    through the pydantic contract, which accepts it or names the reason. Envelope id rules are
    checked on whole columns; the payload column is the payload's JSON text.
    """
    accepted: list = []
    numbers: list[int] = []
    payloads: list[bytes | None] = []
    slow: list[int] = []  # positions whose payload comes from the pydantic path
    kept: list[bytes | str] = []
    bad: dict[str, list] = {"line_number": [], "raw_line": [], "reason": [], "detail": []}

    def reject(number: int, line: bytes | str, exc: EventError) -> None:
        bad["line_number"].append(number)
        bad["raw_line"].append(_text(line))
        bad["reason"].append(exc.reason)
        bad["detail"].append(exc.detail)

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        event = fast_event(line)
        if event is None:
            try:
                event = parse_event(line)
            except EventError as exc:
                reject(number, line, exc)
                continue
            slow.append(len(kept))
            payloads.append(None)
        else:
            payloads.append(bytes(event.payload))
        kept.append(line)
        numbers.append(number)
        accepted.append(event)
    rows = {name: [getattr(e, name) for e in accepted] for name in ENVELOPE_COLUMNS}
    rows["occurred_at"] = [(t - EPOCH) // MICROSECOND for t in rows["occurred_at"]]
    rows["line_number"] = numbers
    rows["payload"] = payloads
    payload = pl.Series("payload", rows.pop("payload"), dtype=pl.Binary).cast(pl.String)
    if slow:
        raw = pl.Series([_text(kept[i]) for i in slow], dtype=pl.String)
        payload = payload.scatter(slow, raw.str.json_path_match("$.payload"))
    schema = _polars_schema([*rows, "payload"], RAW_EVENTS_SCHEMA)
    schema["occurred_at"] = pl.Int64
    events = pl.DataFrame({**rows, "payload": payload}, schema=schema).with_columns(
        pl.col("occurred_at").cast(pl.Datetime("us", "UTC")),
        pl.lit(SCHEMA_VERSION, dtype=pl.Int32).alias("schema_version"),
        pl.lit(source_file).alias("source_file"),
    )
    unsafe = ~pl.all_horizontal(
        [pl.col(column).str.contains(pattern) for column, pattern in ID_PATTERNS.items()]
    )
    flagged = events.with_row_index("position").filter(unsafe)["position"].to_list()
    for position in flagged:
        try:
            parse_event(kept[position])
        except EventError as exc:
            reject(int(events["line_number"][position]), kept[position], exc)
    if flagged:
        events = (
            events.with_row_index("position")
            .filter(~pl.col("position").is_in(flagged))
            .drop("position")
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
        ).sort("line_number"),
        source_file,
        now,
    )
    return Parsed(events=events.select(EVENT_COLUMNS), quarantine=quarantine)


def parse_file(path: str, now: datetime) -> Parsed:
    """Read and parse one landing file (the unit of work of the landing process pool)."""
    return parse_lines(read_lines(path), path, now)


def prefetched(paths: Sequence[str]) -> Iterator[list[bytes]]:
    """The lines of each file in order, the next file read (and gunzipped, which releases the
    GIL) in a background thread while the caller parses the current one."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        ahead = reader.submit(read_lines, paths[0]) if paths else None
        for index in range(len(paths)):
            lines = ahead.result()
            if index + 1 < len(paths):
                ahead = reader.submit(read_lines, paths[index + 1])
            yield lines


def parse_files(files: Sequence[LandingFile], now: datetime, workers: int) -> list[Parsed]:
    """Parse files in order, in `workers` processes when there is enough work to share."""
    total = sum(f.size for f in files)
    paths = [f.path for f in files]
    if workers <= 1 or len(files) < 2 or total < PARALLEL_MIN_BYTES:
        parsed = (
            parse_lines(lines, path, now)
            for path, lines in zip(paths, prefetched(paths), strict=True)
        )
        return _progress(parsed, paths)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ctxdb.landing"])
    with ProcessPoolExecutor(max_workers=min(workers, len(files)), mp_context=context) as pool:
        return _progress(pool.map(parse_file, paths, [now] * len(files)), paths)


def _progress(parsed: Iterable[Parsed], paths: Sequence[str]) -> list[Parsed]:
    """Collect parsed files in order, logging each (long landings report as they go)."""
    done: list[Parsed] = []
    for path, result in zip(paths, parsed, strict=True):
        done.append(result)
        log.info(
            "parsed %s (%d/%d): %d valid, %d quarantined",
            path,
            len(done),
            len(paths),
            result.events.height,
            result.quarantine.height,
        )
    return done


def _text(line: bytes | str) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return text[:MAX_EVENT_BYTES]


def _polars_schema(names: Iterable[str], schema) -> dict[str, pl.DataType]:
    empty = pl.from_arrow(schema.empty_table())
    return {name: empty.schema[name] for name in names}


def quarantine_frame(bad: pl.DataFrame, source_file: str, now: datetime) -> pl.DataFrame:
    """Quarantine rows (QUARANTINE_SCHEMA) from line_number/raw_line/reason/detail columns."""
    return bad.select(
        pl.lit(source_file).alias("source_file"),
        pl.col("line_number").cast(pl.Int64),
        pl.col("raw_line"),
        pl.col("reason"),
        pl.col("detail"),
        pl.col("raw_line").str.json_path_match("$.event_id").alias("event_id"),
        pl.col("raw_line").str.json_path_match("$.conversation_id").alias("conversation_id"),
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("quarantined_at"),
    )


def split_conflicts(
    events: pl.DataFrame, owners: pl.DataFrame, purged: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Separate events that would break ownership: a conversation belongs to the identity that
    first wrote it (`owners`: conversation_id + tenant/app/user_id), and purged conversations
    take no new events. Returns (accepted, rejected with `reason`/`detail`)."""
    first = (
        pl.concat(
            [owners.select("conversation_id", *OWNER), events.select("conversation_id", *OWNER)]
        )
        .unique("conversation_id", keep="first", maintain_order=True)
        .rename({c: f"owner_{c}" for c in OWNER})
    )
    joined = events.join(first, on="conversation_id", how="left")
    mismatch = pl.any_horizontal([pl.col(c) != pl.col(f"owner_{c}") for c in OWNER])
    is_purged = pl.col("conversation_id").is_in(purged["conversation_id"].implode())
    flagged = joined.with_columns(
        pl.when(is_purged)
        .then(pl.lit("purged_conversation"))
        .when(mismatch)
        .then(pl.lit("conversation_owner_mismatch"))
        .alias("reason")
    ).drop([f"owner_{c}" for c in OWNER])
    accepted = flagged.filter(pl.col("reason").is_null()).drop("reason")
    rejected = flagged.filter(pl.col("reason").is_not_null()).with_columns(
        pl.format("conversation {} (event {})", "conversation_id", "event_id").alias("detail")
    )
    return accepted, rejected


def rejected_to_quarantine(rejected: pl.DataFrame, now: datetime) -> pl.DataFrame:
    """Quarantine rows for events that validated but cannot be accepted (raw line re-serialized)."""
    raw = rejected.select(pl.struct(EVENT_COLUMNS[:-2]).struct.json_encode().alias("raw_line"))
    return pl.DataFrame(
        {
            "source_file": rejected["source_file"],
            "line_number": rejected["line_number"],
            "raw_line": raw["raw_line"],
            "reason": rejected["reason"],
            "detail": rejected["detail"],
            "event_id": rejected["event_id"],
            "conversation_id": rejected["conversation_id"],
            "quarantined_at": pl.Series([now] * rejected.height, dtype=pl.Datetime("us", "UTC")),
        }
    )


def pending_files(files: Sequence[LandingFile], landed: pl.DataFrame) -> list[LandingFile]:
    """Files not landed yet (a file counts as landed while its path, size and mtime match)."""
    seen = {
        (row["source_file"], row["size"], row["mtime"])
        for row in landed.select("source_file", "size", "mtime").iter_rows(named=True)
    }
    return [f for f in files if (f.path, f.size, f.mtime) not in seen]


def land(
    store: DeltaStore,
    uri: str,
    now: datetime | None = None,
    max_files: int | None = None,
    workers: int = 1,
) -> LandingStats:
    """Land every pending file under `uri` into `raw_turn_events` (see module docstring)."""
    now = now or datetime.now(UTC)
    files = list_files(uri)
    landed = store.read(LANDED_FILES, LANDED_FILES_SCHEMA, columns=["source_file", "size", "mtime"])
    todo = pending_files(files, landed)
    stats = LandingStats(skipped_files=len(files) - len(todo))
    todo = todo[:max_files] if max_files else todo
    stats.files = len(todo)
    if not todo:
        return stats
    parsed = parse_files(todo, now, workers)
    stats.lines = sum(p.events.height + p.quarantine.height for p in parsed)
    events = pl.concat([p.events for p in parsed])
    quarantine = pl.concat([p.quarantine for p in parsed])
    fresh, duplicates = drop_known(store, events)
    accepted, rejected = split_conflicts(
        fresh, _owners(store, fresh), purged_among(store, fresh["conversation_id"])
    )
    quarantine = pl.concat([quarantine, rejected_to_quarantine(rejected, now)])
    version = store.version(RAW_TURN_EVENTS)
    stats.landed_version = 0 if version is None else version + 1
    stats.duplicates = duplicates.height
    stats.quarantined = quarantine.height
    stats.reasons = dict(quarantine.group_by("reason").len().iter_rows())
    store.insert_new(
        QUARANTINED_EVENTS, quarantine, ["source_file", "line_number"], QUARANTINE_SCHEMA
    )
    rows = accepted.with_columns(
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("ingested_at"),
        pl.lit(stats.landed_version, dtype=pl.Int64).alias("landed_version"),
    )
    stats.landed = store.append(RAW_TURN_EVENTS, rows, RAW_EVENTS_SCHEMA)
    if stats.landed == 0:
        stats.landed_version = None
    store.append(
        LANDED_FILES,
        landed_files_frame(todo, parsed, duplicates, rejected, now),
        LANDED_FILES_SCHEMA,
    )
    log.info(
        "landed %d events from %d files (%d duplicates, %d quarantined)",
        stats.landed,
        len(todo),
        stats.duplicates,
        stats.quarantined,
    )
    return stats


def drop_known(store: DeltaStore, events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split off events whose id is already landed or repeated earlier in this batch."""
    is_first = pl.col("event_id").is_first_distinct()
    first, repeated = events.filter(is_first), events.filter(~is_first)
    if not store.exists(RAW_TURN_EVENTS) or first.is_empty():
        return first, repeated
    known = (
        store.scan(RAW_TURN_EVENTS)
        .select("event_id")
        .filter(pl.col("event_id").is_in(first["event_id"].implode()))
        .collect()
    )
    fresh = first.join(known, on="event_id", how="anti")
    already = first.join(known, on="event_id", how="semi")
    return fresh, pl.concat([repeated, already])


def _owners(store: DeltaStore, events: pl.DataFrame) -> pl.DataFrame:
    if not store.exists(RAW_TURN_EVENTS) or events.is_empty():
        return pl.DataFrame(
            schema={"conversation_id": pl.String, **dict.fromkeys(OWNER, pl.String)}
        )
    ids = events["conversation_id"].unique().implode()
    return (
        store.scan(RAW_TURN_EVENTS)
        .select("conversation_id", *OWNER)
        .filter(pl.col("conversation_id").is_in(ids))
        .unique("conversation_id")
        .collect()
    )


def landed_files_frame(
    files: Sequence[LandingFile],
    parsed: Sequence[Parsed],
    duplicates: pl.DataFrame,
    rejected: pl.DataFrame,
    now: datetime,
) -> pl.DataFrame:
    """One `landed_files` row per file with its per-file counts."""
    dup = dict(duplicates.group_by("source_file").len().iter_rows())
    rej = dict(rejected.group_by("source_file").len().iter_rows())
    rows = []
    for f, p in zip(files, parsed, strict=True):
        quarantined = p.quarantine.height + rej.get(f.path, 0)
        rows.append(
            {
                "source_file": f.path,
                "size": f.size,
                "mtime": f.mtime,
                "lines": p.events.height + p.quarantine.height,
                "landed": p.events.height - dup.get(f.path, 0) - rej.get(f.path, 0),
                "duplicates": dup.get(f.path, 0),
                "quarantined": quarantined,
                "landed_at": now,
            }
        )
    return pl.DataFrame(
        rows, schema=_polars_schema([f.name for f in LANDED_FILES_SCHEMA], LANDED_FILES_SCHEMA)
    )
