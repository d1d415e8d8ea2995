"""Landing: JSONL files (plain or gzip) -> `raw_turn_events`, with every bad line quarantined.

Parsing is pure (`parse_bytes`): each line becomes either a validated event row or a quarantine
row with its reason; a scanner (the native one when built, else the pure-Python mirror) checks
every line and only the lines it does not accept go through the pydantic contract. `land` adds
the I/O: it lists the landing directory or object-store prefix (date partitions only from the
landing cursor's day on, see `partitions`), skips files already landed (same path, size and
mtime; only files from the landing cursor on are compared, see `cursor`), and
lands the rest in waves. A file that cannot be read (a truncated gzip,
an I/O error) is quarantined as a file and the others land. A UTF-8 byte order mark at the start
of a file is dropped. For each wave it drops event ids already present (counted as duplicates;
an id re-used with another owner or other content is quarantined as `event_id_conflict`),
quarantines events for conversations owned by another identity or already purged, and commits
quarantine -> events -> landed files in a background thread while the next wave is parsed. Each
commit is atomic and keyed (a MERGE inserting only rows whose key is not there: `event_id` for
events), so a run killed between two commits is completed by the next run, and two runs at once
store each event once.

This module runs the landing; `files` lists and reads the files, `scan` parses them (a
scanner, then the contract), `waves` checks and commits each wave, `quarantine` turns refused
events into quarantine rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ctxdb.coordination.fencing import fence_of
from ctxdb.landing.cursor import landed_since, landing_floor, split
from ctxdb.landing.listing import LandingFile, list_files, pending_files
from ctxdb.landing.quarantine import bad_bytes_files
from ctxdb.landing.scan import parse_files
from ctxdb.landing.waves import EarlierWaves, Wave, commit, prepare, waves
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
)

log = logging.getLogger(__name__)


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
    quarantined_files: int = 0


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
    scanner: str = "auto",
    writer: AbstractContextManager[object] | None = None,
    full: bool = False,
) -> LandingStats:
    """Land every pending file under `uri` into `raw_turn_events` (see module docstring);
    `scanner` picks the line scanner (`auto`, `native` or `python`; see `scan`). Only files at or
    above the landing cursor are compared with `landed_files` unless `full` (`cursor`).

    Landing is exactly-once by itself: events go in with a MERGE keyed on `event_id`, and
    quarantine and landed-file rows with keyed MERGEs, so two landings of the same files at once
    store every event once (`waves.commit`). `writer` is held around the whole run, from listing
    the pending files to the last commit: the CLI and the Dagster asset pass the writer lease
    (`ctxdb.coordination.lease`), which keeps a second landing (or another writer) from doing the
    same work beside it; when it yields a fence (`ctxdb.coordination.fencing.Fenced`: the lease),
    its `check()` runs before every commit, so a run that lost the lease stops before its next
    commit (`LeaseLost`)."""
    with writer or nullcontext() as held:
        fence = fence_of(held)
        return _land(store, uri, now or datetime.now(UTC), max_files, threads, scanner, fence, full)


def _land(
    store: DeltaStore,
    uri: str,
    now: datetime,
    max_files: int | None,
    threads: int,
    scanner: str,
    fence: Callable[[], None],
    full: bool,
) -> LandingStats:
    floor = None if full else landing_floor(store)
    files = list_files(uri, store.storage_options, since=floor)
    todo = files_to_land(store, files, full)
    stats = LandingStats(skipped_files=len(files) - len(todo))
    todo = _oldest(todo, max_files) if max_files else todo
    stats.files = len(todo)
    if not todo:
        return stats
    store.create(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)
    before = store.version(RAW_TURN_EVENTS)
    after: int | None = before
    earlier = EarlierWaves()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="landing-commit") as committer:
        pending: Future[tuple[Wave, int, int, int | None]] | None = None
        parsed = parse_files(todo, now, threads, scanner, store.storage_options)
        for group in waves(parsed, WAVE_ROWS):
            wave = prepare(store, before, group, earlier, now)
            earlier.add(wave.accepted)
            stats.lines += sum(p.events.height + p.quarantine.height for p in wave.parsed)
            stats.duplicates += wave.duplicates.height
            stats.quarantined += wave.quarantine.height
            stats.quarantined_files += sum(p.unreadable is not None for p in wave.parsed)
            for reason, count in wave.quarantine.group_by("reason").len().iter_rows():
                stats.reasons[reason] = stats.reasons.get(reason, 0) + count
            if pending is not None:
                after = _count(stats, *pending.result())  # in order; a failure stops the run
            pending = committer.submit(_commit, store, wave, now, fence, after)
        if pending is not None:  # always: `todo` is not empty, so there was a wave
            _count(stats, *pending.result())
    log.info(
        "landed %d events from %d files (%d duplicates, %d quarantined)",
        stats.landed,
        len(todo),
        stats.duplicates,
        stats.quarantined,
    )
    return stats


def files_to_land(
    store: DeltaStore, files: list[LandingFile], full: bool = False
) -> list[LandingFile]:
    """The files among `files` to land: not landed, nor quarantined for bad bytes, as they are.
    Only files at or above the landing cursor are compared (with the landed rows above it) unless
    `full`, which compares every file with all of `landed_files`."""
    floor = None if full else landing_floor(store)
    recent, _ = split(files, floor)
    return pending_files(recent, landed_since(store, floor), bad_bytes_files(store))


def _oldest(files: list[LandingFile], count: int) -> list[LandingFile]:
    """The `count` files with the oldest mtimes, in path order: files left for a later run stay
    at or above the cursor that this run moves."""
    first = sorted(files, key=lambda f: (f.mtime is not None, f.mtime or 0, f.path))[:count]
    return sorted(first, key=lambda f: f.path)


def _commit(
    store: DeltaStore, wave: Wave, now: datetime, fence: Callable[[], None], after: int | None
) -> tuple[Wave, int, int, int | None]:
    return (wave, *commit(store, wave, now, fence, after))


def _count(
    stats: LandingStats, wave: Wave, written: int, version: int, after: int | None
) -> int | None:
    """Add a committed wave's events (those a concurrent writer landed first are duplicates);
    returns the `after` of the next wave (`waves.commit`)."""
    stats.duplicates += wave.accepted.height - written
    if written:
        stats.landed += written
        stats.landed_version = version
    return after
