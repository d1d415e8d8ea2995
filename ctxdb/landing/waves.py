"""Landing in waves: parsed files grouped into waves, each checked against landed events and
earlier waves (duplicate ids, conversation owners), then committed quarantine -> events -> landed
files."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import polars as pl

from ctxdb.landing.files import LandingFile
from ctxdb.landing.quarantine import (
    OWNER,
    insert_quarantine,
    rejected_to_quarantine,
    split_conflicts,
)
from ctxdb.landing.scan import Parsed, polars_schema
from ctxdb.storage.delta import DeltaStore
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
        rows, schema=polars_schema([f.name for f in LANDED_FILES_SCHEMA], LANDED_FILES_SCHEMA)
    )
