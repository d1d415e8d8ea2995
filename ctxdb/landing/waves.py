"""Landing in waves: parsed files grouped into waves, each checked against landed events and
earlier waves (duplicate ids, re-used ids, conversation owners), then committed quarantine ->
events -> landed files."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import polars as pl

from ctxdb.contract.events import ENVELOPE_COLUMNS
from ctxdb.landing.listing import LandingFile
from ctxdb.landing.quarantine import (
    OWNER,
    clear_quarantined_files,
    insert_quarantine,
    insert_quarantined_files,
    rejected_to_quarantine,
    split_conflicts,
)
from ctxdb.landing.scan import Parsed, polars_schema
from ctxdb.storage.arrow import owned
from ctxdb.storage.delta import DeltaStore, among
from ctxdb.storage.tables import (
    LANDED_FILES,
    LANDED_FILES_SCHEMA,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
)
from ctxdb.storage.tombstones import purged_among

log = logging.getLogger(__name__)


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
    """Events accepted by earlier waves of this run: per wave the sorted hashes of their ids (and
    the ids) for duplicate checks, each conversation's first owner, and the events of the latest
    wave (its commit may still be running; earlier waves are read back from the table)."""

    hashes: list[np.ndarray] = field(default_factory=list)
    ids: list[pl.DataFrame] = field(default_factory=list)
    owners: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"conversation_id": pl.String, **dict.fromkeys(OWNER, pl.String)}
        )
    )
    latest: pl.DataFrame | None = None

    def add(self, events: pl.DataFrame) -> None:
        self.latest = events
        if events.is_empty():
            return
        ids = owned(events.select(pl.col("event_id").hash().alias("hash"), "event_id"))
        self.hashes.append(np.sort(ids["hash"].to_numpy()))
        self.ids.append(ids)
        owners = owned(events.select("conversation_id", *OWNER).unique())  # once accepted, kept
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
    fresh, dropped = drop_known(store, before, events, earlier)
    duplicates, reused = split_reused_ids(store, events, dropped, earlier)
    owners = pl.concat([_owners(store, before, fresh), earlier.owners])
    accepted, refused = split_conflicts(
        fresh, owners, purged_among(store, fresh["conversation_id"])
    )
    rejected = pl.concat([refused, reused])
    refusals = rejected_to_quarantine(rejected, now, store.storage_options)
    quarantine = pl.concat([*(p.quarantine for p in parsed), refusals])
    return Wave([f for f, _ in group], parsed, accepted, quarantine, duplicates, rejected)


def commit(
    store: DeltaStore,
    wave: Wave,
    now: datetime,
    fence: Callable[[], None],
    after: int | None,
) -> tuple[int, int, int | None]:
    """Commit one wave: quarantine, then events, then its landed files (each atomic and keyed,
    so a run killed between them is completed by the next run, and a concurrent landing of the
    same files adds nothing twice); unreadable files go to `quarantined_files` instead of
    `landed_files`. `fence` runs before each commit (the writer lease's check: it raises when the
    lease was lost).

    `after` is the `raw_turn_events` version this run's duplicate checks cover (the version it
    started from, then its own last commit), None once another writer has committed in between.
    While it holds, the events are appended as exactly version `after + 1` (`append_after`);
    when another writer committed since, they go in with a MERGE that inserts only ids not in
    the table (`insert_at_next_version` on `event_id`): whatever runs beside it, an event id is
    stored once. Returns the events written, the version they landed as, and the `after` of the
    next wave."""
    fence()
    insert_quarantine(store, wave.quarantine)
    unreadable = [(f, p.unreadable) for f, p in zip(wave.files, wave.parsed, strict=True)]
    insert_quarantined_files(store, [(f, u) for f, u in unreadable if u is not None], now)
    written, version = 0, -1
    if not wave.accepted.is_empty():
        fence()
        written, version, after = _insert_events(store, wave.accepted, now, fence, after)
    fence()
    store.insert_new(
        LANDED_FILES,
        landed_files_frame(wave.files, wave.parsed, wave.duplicates, wave.rejected, now),
        LANDED_FILE_KEY,
        LANDED_FILES_SCHEMA,
    )
    clear_quarantined_files(store, [f.path for f, u in unreadable if u is None])
    log.info(
        "committed %d files: %d events as raw_turn_events version %d, %d quarantined",
        len(wave.files),
        written,
        version,
        wave.quarantine.height,
    )
    return written, version, after


def _insert_events(
    store: DeltaStore,
    accepted: pl.DataFrame,
    now: datetime,
    fence: Callable[[], None],
    after: int | None,
) -> tuple[int, int, int | None]:
    def rows(version: int) -> pl.DataFrame:
        return accepted.with_columns(
            pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("ingested_at"),
            pl.lit(version, dtype=pl.Int64).alias("landed_version"),
        )

    if after is not None:
        version = store.append_after(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA, rows, after)
        if version is not None:
            return accepted.height, version, version
        log.warning("raw_turn_events moved past version %d: merging on event_id from now", after)
    written, version = store.insert_at_next_version(
        RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA, ["event_id"], rows, fence
    )
    if written < accepted.height:
        log.warning(
            "%d events of this wave were landed meanwhile by a concurrent writer; skipped",
            accepted.height - written,
        )
    return written, version, None


LANDED_FILE_KEY = ["source_file", "size", "mtime"]


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
            .filter(among(pl.col("event_id"), ids))
            .select("event_id")
            .collect()
        )
        if not known.is_empty():
            keep = keep & ~ids.is_in(known["event_id"].implode())
    if earlier.hashes:
        keep = keep & ~earlier.contains(ids)
    if keep.all():
        return events, events.clear()
    return events.filter(keep), events.filter(~keep)


CONTENT = [c for c in ENVELOPE_COLUMNS if c != "event_id"] + ["payload"]
"""What an event id stands for: a dropped event whose id first came with other values here is a
re-used id (a conflict, quarantined), not a duplicate."""
REUSED_ID = "event_id_conflict"


def split_reused_ids(
    store: DeltaStore, events: pl.DataFrame, dropped: pl.DataFrame, earlier: EarlierWaves
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split the events `drop_known` dropped into duplicates (the same event again) and re-used
    ids (`reason`/`detail` set): another owner or other content than the event that first came
    with the id (landed, accepted by an earlier wave, or earlier in this batch). Payloads are
    compared as JSON values, so a re-serialized copy is a duplicate. Every dropped event is
    compared, also one read again from the file and line it landed from: a file rewritten in
    place with other text under the same ids is a conflict, not a duplicate."""
    marked = dropped.with_row_index("_row")
    rows: list[int] = []
    details: list[str] = []
    if not marked.is_empty():
        first = _first_holders(store, events, marked, earlier)
        joined = marked.join(
            first, on="event_id", how="left", suffix="_first", maintain_order="left"
        )
        differs = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}_first")) for c in CONTENT])
        for row in joined.filter(differs).iter_rows(named=True):
            fields = [c for c in CONTENT if not _same(c, row[c], row[f"{c}_first"])]
            if not fields:
                continue
            owner = [c for c in fields if c in OWNER]
            what = "another owner" if owner else "other " + ", ".join(fields)
            rows.append(row["_row"])
            details.append(f"event_id {row['event_id']} was first landed with {what}")
    reused = pl.DataFrame(
        {"_row": rows, "detail": details}, schema={"_row": pl.UInt32, "detail": pl.String}
    )
    conflicts = (
        marked.join(reused, on="_row", maintain_order="left")
        .with_columns(pl.lit(REUSED_ID).alias("reason"))
        .select(*dropped.columns, "reason", "detail")
    )
    return marked.join(reused, on="_row", how="anti").drop("_row"), conflicts


def _first_holders(
    store: DeltaStore, events: pl.DataFrame, dropped: pl.DataFrame, earlier: EarlierWaves
) -> pl.DataFrame:
    """For each id in `dropped`, the content of the event that first came with it: landed (the
    table as committed so far: before this run and earlier waves), in the latest wave (its commit
    may be running), else the first of this batch."""
    unique = dropped["event_id"].unique()
    ids = unique.implode()
    columns = ["event_id", *CONTENT]
    found = [events.filter(pl.col("event_id").is_in(ids)).select(columns)]
    if earlier.latest is not None:
        found.insert(0, earlier.latest.filter(pl.col("event_id").is_in(ids)).select(columns))
    if store.exists(RAW_TURN_EVENTS):
        landed = (
            store.scan(RAW_TURN_EVENTS)
            .filter(among(pl.col("event_id"), unique))
            .sort("landed_version", "source_file", "line_number")
            .select(columns)
            .collect()
        )
        found.insert(0, landed)
    return pl.concat(found).unique("event_id", keep="first", maintain_order=True)


def _same(column: str, value: object, first: object) -> bool:
    if value == first:
        return True
    if column != "payload" or not isinstance(value, str) or not isinstance(first, str):
        return False
    return json.loads(value) == json.loads(first)


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
    return (
        store.scan(RAW_TURN_EVENTS, before)
        .filter(among(pl.col("conversation_id"), events["conversation_id"].unique()))
        .select("conversation_id", *OWNER)
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
        if p.unreadable is not None:
            continue
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
        rows, schema=polars_schema([f.name for f in LANDED_FILES_SCHEMA], LANDED_FILES_SCHEMA)
    )
