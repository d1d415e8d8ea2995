"""Landing: JSONL files (plain or gzip) -> `raw_turn_events`, with every bad line quarantined.

Parsing is pure (`parse_bytes`): each line becomes either a validated event row or a quarantine
row with its reason; the native scanner (`_native`) checks every line and only the lines it
does not accept go through the pydantic contract. `land` adds the I/O: it lists the landing
directory or object-store prefix, skips files already landed (same path, size and mtime), and
lands the rest in waves. For each wave it drops event ids already present (counted as
duplicates), quarantines events for conversations owned by another identity or already purged,
and commits quarantine -> events -> landed files in a background thread while the next wave is
parsed. Each commit is atomic and each step idempotent, so a run killed between two commits is
completed by the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
from zlib_ng import gzip_ng

from ctxdb.contract.events import (
    ENVELOPE_COLUMNS,
    MAX_EVENT_BYTES,
    SCHEMA_VERSION,
    EventError,
    parse_event,
)
from ctxdb.landing import _native
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    LANDED_FILES_SCHEMA,
    QUARANTINE_SCHEMA,
    QUARANTINED_EVENTS,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
)
from ctxdb.storage.tombstones import purged_among

log = logging.getLogger(__name__)

SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
OWNER = ["tenant", "app", "user_id"]
EVENT_COLUMNS = [
    f.name for f in RAW_EVENTS_SCHEMA if f.name not in ("ingested_at", "landed_version")
]
SCANNED_STRINGS = [c for c in ENVELOPE_COLUMNS if c != "occurred_at"] + ["payload"]
"""String columns the native scanner returns as Arrow string views."""


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


def read_bytes(path: str) -> bytes:
    """The content of one landing file, gunzipped (zlib-ng) when it starts with gzip's magic."""
    fs, real = filesystem(path)
    # A random-access file reads in one piece; an input stream would also gunzip `.gz` names
    # itself, with the slower zlib.
    with fs.open_input_file(real) as file:
        data = file.read()
    return gzip_ng.decompress(data) if data[:2] == b"\x1f\x8b" else data


def parse_bytes(data: bytes, source_file: str, now: datetime, threads: int = 0) -> Parsed:
    """Validate each line of `data`; blank lines are skipped, every other line lands or is
    quarantined.

    The native scanner (`_native`, a Rust mirror of the contract run on `threads` threads)
    validates every line and returns the accepted envelopes as Arrow buffers. Each line it does
    not accept goes through the pydantic contract, which accepts it or names the reason. The
    payload column is the payload's JSON text as written.
    """
    scan = _native.scan_events(data, MAX_EVENT_BYTES, threads)
    slow: dict[str, list] = {name: [] for name in [*ENVELOPE_COLUMNS, "line_number", "raw"]}
    bad: dict[str, list] = {"line_number": [], "raw_line": [], "reason": [], "detail": []}
    for number, start, end in scan["rejected"]:
        line = data[start:end]
        try:
            event = parse_event(line)
        except EventError as exc:
            bad["line_number"].append(number)
            bad["raw_line"].append(_text(line))
            bad["reason"].append(exc.reason)
            bad["detail"].append(exc.detail)
            continue
        for name in ENVELOPE_COLUMNS:
            slow[name].append(getattr(event, name))
        slow["line_number"].append(number)
        slow["raw"].append(_text(line))
    events = _scanned_frame(data, scan)
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
    return pl.from_arrow(pa.table(columns)).select(*ENVELOPE_COLUMNS, "line_number", "payload")


def _contract_frame(slow: dict[str, list]) -> pl.DataFrame:
    """Rows the pydantic contract accepted after the scanner did not; payload cut from the line."""
    raw = slow.pop("raw")
    schema = _polars_schema([*ENVELOPE_COLUMNS, "line_number"], RAW_EVENTS_SCHEMA)
    payload = pl.Series("payload", raw, dtype=pl.String).str.json_path_match("$.payload")
    return pl.DataFrame(slow, schema=schema).with_columns(payload)


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


def parse_files(
    files: Sequence[LandingFile], now: datetime, threads: int = 0
) -> Iterator[tuple[LandingFile, Parsed]]:
    """Each file with its parse, in order, validated on `threads` threads (0: one per core)
    while the next file is read; each parsed file is logged (long landings report as they go)."""
    paths = [f.path for f in files]
    for number, (file, data) in enumerate(zip(files, prefetched(paths), strict=True), start=1):
        parsed = parse_bytes(data, file.path, now, threads)
        log.info(
            "parsed %s (%d/%d): %d valid, %d quarantined",
            file.path,
            number,
            len(files),
            parsed.events.height,
            parsed.quarantine.height,
        )
        yield file, parsed


def waves(
    parsed: Iterable[tuple[LandingFile, Parsed]], rows: int
) -> Iterator[list[tuple[LandingFile, Parsed]]]:
    """Consecutive groups of parsed files holding at least `rows` lines each (the last may hold
    fewer)."""
    wave: list[tuple[LandingFile, Parsed]] = []
    for item in parsed:
        wave.append(item)
        if sum(p.events.height + p.quarantine.height for _, p in wave) >= rows:
            yield wave
            wave = []
    if wave:
        yield wave


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace")[:MAX_EVENT_BYTES]


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
    take no new events. Returns (accepted, rejected with `reason`/`detail`).

    The rules are decided on the distinct (conversation, identity) pairs of the batch, a few
    rows per conversation; the wide frame is joined only when some pair is refused."""
    pairs = events.select("conversation_id", *OWNER).unique(maintain_order=True)
    first = (
        pl.concat([owners.select("conversation_id", *OWNER), pairs])
        .unique("conversation_id", keep="first", maintain_order=True)
        .rename({c: f"owner_{c}" for c in OWNER})
    )
    mismatch = pl.any_horizontal([pl.col(c) != pl.col(f"owner_{c}") for c in OWNER])
    is_purged = pl.col("conversation_id").is_in(purged["conversation_id"].implode())
    refused = (
        pairs.join(first, on="conversation_id", how="left")
        .with_columns(
            pl.when(is_purged)
            .then(pl.lit("purged_conversation"))
            .when(mismatch)
            .then(pl.lit("conversation_owner_mismatch"))
            .alias("reason")
        )
        .filter(pl.col("reason").is_not_null())
        .select("conversation_id", *OWNER, "reason")
    )
    if refused.is_empty():
        none = pl.lit(None, dtype=pl.String)
        return events, events.clear().with_columns(none.alias("reason"), none.alias("detail"))
    marked = events.join(refused, on=["conversation_id", *OWNER], how="left", maintain_order="left")
    rejected = marked.filter(pl.col("reason").is_not_null()).with_columns(
        pl.format("conversation {} (event {})", "conversation_id", "event_id").alias("detail")
    )
    return marked.filter(pl.col("reason").is_null()).drop("reason"), rejected


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


@dataclass
class Wave:
    """One group of files ready to commit: accepted events, quarantine rows and counts."""

    files: list[LandingFile]
    parsed: list[Parsed]
    accepted: pl.DataFrame
    quarantine: pl.DataFrame
    duplicates: pl.DataFrame
    rejected: pl.DataFrame


@dataclass
class EarlierWaves:
    """Events accepted by earlier waves of this run, which may not be committed yet: per wave
    the sorted hashes of their ids (and the ids) for duplicate checks, and each conversation's
    first owner."""

    hashes: list[np.ndarray] = field(default_factory=list)
    ids: list[pl.DataFrame] = field(default_factory=list)
    owners: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"conversation_id": pl.String, **dict.fromkeys(OWNER, pl.String)}
        )
    )

    def add(self, events: pl.DataFrame) -> None:
        if events.is_empty():
            return
        ids = events.select(pl.col("event_id").hash().alias("hash"), "event_id")
        self.hashes.append(np.sort(ids["hash"].to_numpy()))
        self.ids.append(ids)
        owners = events.select("conversation_id", *OWNER).unique()  # one owner each, once accepted
        self.owners = pl.concat([self.owners, owners]).unique("conversation_id", keep="first")

    def contains(self, ids: pl.Series) -> pl.Series:
        """Which of `ids` an earlier wave accepted: a binary search of each wave's sorted hashes
        (no hash table rebuilt per wave), then exact ids for the hashes that match."""
        hashes = ids.hash().to_numpy()
        hit = np.zeros(len(hashes), dtype=bool)
        for wave in self.hashes:
            at = np.searchsorted(wave, hashes).clip(max=len(wave) - 1)
            hit |= wave[at] == hashes
        if not hit.any():
            return pl.Series(hit)
        matched = pl.Series(hashes[hit]).implode()
        earlier = pl.concat(self.ids).filter(pl.col("hash").is_in(matched))
        return ids.is_in(earlier["event_id"].implode())


WAVE_ROWS = 150_000
"""Lines per commit group. A group's commits run in a background thread while the next group is
parsed, so the Delta write overlaps validation; each group commits quarantine -> events ->
landed files on its own."""


def land(
    store: DeltaStore,
    uri: str,
    now: datetime | None = None,
    max_files: int | None = None,
    threads: int = 0,
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
    before = store.version(RAW_TURN_EVENTS)
    earlier = EarlierWaves()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="landing-commit") as committer:
        pending = None
        for group in waves(parse_files(todo, now, threads), WAVE_ROWS):
            wave = prepare(store, before, group, earlier, now)
            earlier.add(wave.accepted)
            stats.lines += sum(p.events.height + p.quarantine.height for p in wave.parsed)
            stats.duplicates += wave.duplicates.height
            stats.quarantined += wave.quarantine.height
            for reason, count in wave.quarantine.group_by("reason").len().iter_rows():
                stats.reasons[reason] = stats.reasons.get(reason, 0) + count
            if pending is not None:
                _count(stats, pending.result())  # commits stay in order; a failure stops the run
            pending = committer.submit(commit, store, wave, now)
        _count(stats, pending.result())
    log.info(
        "landed %d events from %d files (%d duplicates, %d quarantined)",
        stats.landed,
        len(todo),
        stats.duplicates,
        stats.quarantined,
    )
    return stats


def prepare(
    store: DeltaStore,
    before: int | None,
    group: Sequence[tuple[LandingFile, Parsed]],
    earlier: EarlierWaves,
    now: datetime,
) -> Wave:
    """Split a group's parsed events into accepted, duplicate and rejected (ownership) rows.

    Landed events are read at version `before` (where the run started; None: no table yet), so
    the checks cost the same whatever this run has committed since; earlier waves of this run
    are checked from memory."""
    parsed = [p for _, p in group]
    events = pl.concat([p.events for p in parsed])
    fresh, duplicates = drop_known(store, before, events, earlier)
    owners = pl.concat([_owners(store, before, fresh), earlier.owners])
    accepted, rejected = split_conflicts(
        fresh, owners, purged_among(store, fresh["conversation_id"])
    )
    quarantine = pl.concat([*(p.quarantine for p in parsed), rejected_to_quarantine(rejected, now)])
    return Wave([f for f, _ in group], parsed, accepted, quarantine, duplicates, rejected)


def commit(store: DeltaStore, wave: Wave, now: datetime) -> tuple[int, int]:
    """Commit one wave: quarantine, then events, then its landed files (each atomic and
    idempotent, so a run killed between them is completed by the next run). Returns the events
    written and the `raw_turn_events` version they landed as."""
    insert_quarantine(store, wave.quarantine)
    version = store.version(RAW_TURN_EVENTS)
    version = 0 if version is None else version + 1
    rows = wave.accepted.with_columns(
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("ingested_at"),
        pl.lit(version, dtype=pl.Int64).alias("landed_version"),
    )
    written = store.append(RAW_TURN_EVENTS, rows, RAW_EVENTS_SCHEMA)
    store.append(
        LANDED_FILES,
        landed_files_frame(wave.files, wave.parsed, wave.duplicates, wave.rejected, now),
        LANDED_FILES_SCHEMA,
    )
    log.info(
        "committed %d files: %d events as raw_turn_events version %d, %d quarantined",
        len(wave.files),
        written,
        version,
        wave.quarantine.height,
    )
    return written, version


def insert_quarantine(store: DeltaStore, rows: pl.DataFrame) -> int:
    """Append quarantine rows whose (source_file, line_number) is not there yet: a run re-reading
    a file after a crash adds nothing twice. Landing runs one at a time, so reading the keys of
    these files and appending replaces a MERGE (which rewrote files and cost ~0.4 s per wave)."""
    if rows.is_empty():
        return 0
    if store.exists(QUARANTINED_EVENTS):
        present = (
            store.scan(QUARANTINED_EVENTS)
            .filter(pl.col("source_file").is_in(rows["source_file"].unique().implode()))
            .select("source_file", "line_number")
            .collect()
        )
        rows = rows.join(present, on=["source_file", "line_number"], how="anti")
    return store.append(QUARANTINED_EVENTS, rows, QUARANTINE_SCHEMA)


def _count(stats: LandingStats, committed: tuple[int, int]) -> None:
    written, version = committed
    if written:
        stats.landed += written
        stats.landed_version = version


def drop_known(
    store: DeltaStore, before: int | None, events: pl.DataFrame, earlier: EarlierWaves
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split off events whose id is already landed, accepted by an earlier wave of this run, or
    repeated earlier in this batch.

    The test runs on the id column alone; the wide frame is filtered only when something drops.
    """
    ids = events["event_id"]
    keep = first_distinct(ids)
    if before is not None and not events.is_empty():
        known = (
            store.scan(RAW_TURN_EVENTS, before)
            .select("event_id")
            .filter(pl.col("event_id").is_in(ids.implode()))
            .collect()
        )
        if not known.is_empty():
            keep = keep & ~ids.is_in(known["event_id"].implode())
    if earlier.hashes:
        keep = keep & ~earlier.contains(ids)
    if keep.all():
        return events, events.clear()
    return events.filter(keep), events.filter(~keep)


def first_distinct(values: pl.Series) -> pl.Series:
    """`values.is_first_distinct()`, computed by a stable sort of 64-bit hashes.

    Written out because polars' hash-table version costs ~0.4 s per million string ids on two
    cores, a tenth of a landing, where sorting their hashes costs under 0.1 s. Rows whose hash
    repeats an earlier row's are compared by value with that row, and any true hash collision
    falls back to the exact polars method.
    """
    ordered = values.hash().to_frame("hash").with_row_index("row").sort("hash", maintain_order=True)
    order, hashes = ordered["row"], ordered["hash"]
    repeat = (hashes == hashes.shift(1)).fill_null(False)
    if not repeat.any():
        return pl.repeat(True, values.len(), dtype=pl.Boolean, eager=True)
    firsts = order.to_frame("row").select(
        pl.when(~repeat).then(pl.col("row")).forward_fill().alias("first"), "row"
    )
    repeats = firsts.filter(repeat)
    if (values.gather(repeats["row"]) != values.gather(repeats["first"])).any():
        return values.is_first_distinct()
    return ~pl.repeat(False, values.len(), dtype=pl.Boolean, eager=True).scatter(order, repeat)


def _owners(store: DeltaStore, before: int | None, events: pl.DataFrame) -> pl.DataFrame:
    if before is None or events.is_empty():
        return pl.DataFrame(
            schema={"conversation_id": pl.String, **dict.fromkeys(OWNER, pl.String)}
        )
    ids = events["conversation_id"].unique().implode()
    return (
        store.scan(RAW_TURN_EVENTS, before)
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
