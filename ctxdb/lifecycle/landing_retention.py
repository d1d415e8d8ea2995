"""Retention in the landing location: expired raw lines are emptied from their files, files with
nothing left are deleted (or archived for `CTXDB_RETENTION_ARCHIVE_DAYS`), and quarantined files
past the default TTL go with their `quarantined_files` rows.

A file is read exactly as landing reads it (`ctxdb.landing.scan.parse_bytes`): an event line
expires at the later of `occurred_at` and its event's `ingested_at`, plus its tenant/app TTL (the
rule raw events expire by in Delta: `ctxdb.record.expiry`), a line
that is not an event (a quarantined line) `retention.days` after the file first landed (the rule
its quarantine row expires by). Expired lines are emptied, not removed, so every other line keeps
the number `raw_turn_events` and `quarantined_events` recorded for it; every byte of a kept line
stays as it was (`landing_lines`). The rewrite goes through a renamed temporary file, and which
lines expire depends only on the line and the cutoff, so a sweep killed part-way is finished by
the next one (the files to visit are recorded in its journal header).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from pyarrow import fs as pafs

from ctxdb.landing.listing import unpack
from ctxdb.landing.scan import parse_bytes
from ctxdb.lifecycle import landing_lines
from ctxdb.lifecycle.purge import columns_of, delete_keys, delete_where, sql_ts
from ctxdb.record.expiry import ttl_days_expr
from ctxdb.settings import Settings
from ctxdb.storage import object_store
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
)

log = logging.getLogger(__name__)

ARCHIVE_DAY = "%Y-%m-%d"
INGESTED = "ingested_at"


@dataclass
class LandingSweep:
    """What one sweep did in the landing location and its archive."""

    lines_removed: int = 0
    files_rewritten: int = 0
    files_removed: int = 0
    files_archived: int = 0
    archive_days_removed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def expired_lines(
    content: bytes,
    source: str,
    cutoff: datetime,
    settings: Settings,
    landed: datetime | None,
    ingested: Callable[[list[str]], pl.DataFrame] | None = None,
) -> set[int]:
    """Numbers of the lines of `content` expired at `cutoff` (`landed`: when the file first
    landed, None when unknown: its non-event lines are kept). An event line expires by the clock
    its raw event does: the later of `occurred_at` and when it landed (`ingested`: event_id ->
    `ingested_at` from `raw_turn_events`; a line whose event is not there counts from `landed`)."""
    parsed = parse_bytes(content, source, cutoff, scanner=settings.landing.scanner)
    days = ttl_days_expr(settings.retention.rules, settings.retention.days, role_column=None)
    events = parsed.events
    if ingested is not None and events.height:
        events = events.join(ingested(events["event_id"].to_list()), on="event_id", how="left")
    else:
        events = events.with_columns(
            pl.lit(None, dtype=events.schema["occurred_at"]).alias(INGESTED)
        )
    landing = pl.col(INGESTED).fill_null(pl.lit(landed, dtype=events.schema["occurred_at"]))
    clock = pl.max_horizontal(pl.col("occurred_at"), landing)
    events = events.filter(clock + pl.duration(days=days) <= cutoff)
    numbers = set(events["line_number"].to_list())
    if landed is not None and landed + timedelta(days=settings.retention.days) <= cutoff:
        numbers |= set(parsed.quarantine["line_number"].to_list())
    return numbers


def landed_times(store: DeltaStore) -> Callable[[list[str]], pl.DataFrame]:
    """A lookup of when events landed: (event_id, ingested_at) of those of `ids` in
    `raw_turn_events`."""

    def lookup(ids: list[str]) -> pl.DataFrame:
        if INGESTED not in columns_of(store, RAW_TURN_EVENTS):
            return pl.DataFrame(schema={"event_id": pl.String, INGESTED: pl.Datetime("us", "UTC")})
        return (
            store.scan(RAW_TURN_EVENTS)
            .filter(pl.col("event_id").is_in(ids))
            .select("event_id", INGESTED)
            .unique("event_id")
            .collect()
        )

    return lookup


def first_landed(store: DeltaStore, sources: Iterable[str]) -> dict[str, datetime]:
    """When each file first landed (its earliest `landed_files` or quarantine row)."""
    wanted = list(sources)
    frames = [
        store.scan(table)
        .filter(pl.col("source_file").is_in(wanted))
        .select("source_file", pl.col(column).alias("at"))
        .collect()
        for table, column in ((LANDED_FILES, "landed_at"), (QUARANTINED_EVENTS, "quarantined_at"))
        if {"source_file", column} <= set(columns_of(store, table))
    ]
    if not frames:
        return {}
    first = pl.concat(frames).group_by("source_file").agg(pl.col("at").min())
    return dict(first.iter_rows())


def sweep_files(
    store: DeltaStore,
    settings: Settings,
    sources: Iterable[str],
    cutoff: datetime,
    result: LandingSweep,
    run_id: str | None = None,
) -> None:
    """Empty the expired lines of each landing file in `sources`; remove (or archive) the files
    left with no line, and forget their `landed_files` rows (a delete tagged with `run_id`)."""
    sources = sorted(set(sources))
    landed = first_landed(store, sources)
    ingested = landed_times(store)
    removed: list[str] = []
    for source in sources:
        filesystem, path = landing_lines.landing_file(settings, source)
        raw = landing_lines.read(filesystem, path)
        if raw is None:
            continue
        content = unpack(raw)
        numbers = expired_lines(content, source, cutoff, settings, landed.get(source), ingested)
        kept, gone = landing_lines.blanked(content, numbers)
        result.lines_removed += gone
        if landing_lines.is_blank(kept):
            _remove(settings, filesystem, path, cutoff, result)
            removed.append(source)
        elif gone:
            landing_lines.rewrite(filesystem, path, raw, kept)
            result.files_rewritten += 1
    forget(store, removed, run_id)


def expire_quarantined_files(
    store: DeltaStore,
    settings: Settings,
    cutoff: datetime,
    result: LandingSweep,
    run_id: str | None = None,
) -> None:
    """Delete (or archive) the landing files quarantined as unreadable before the default-TTL
    cutoff, with their `quarantined_files` and `landed_files` rows."""
    if "quarantined_at" not in columns_of(store, QUARANTINED_FILES):
        return
    before = cutoff - timedelta(days=settings.retention.days)
    expired = (
        store.scan(QUARANTINED_FILES)
        .filter(pl.col("quarantined_at") <= before)
        .select("source_file")
        .unique()
        .collect()["source_file"]
        .to_list()
    )
    for source in expired:
        filesystem, path = landing_lines.landing_file(settings, source)
        if filesystem.get_file_info(path).type == pafs.FileType.File:
            _remove(settings, filesystem, path, cutoff, result)
    forget(store, expired, run_id)
    delete_where(store, QUARANTINED_FILES, f"quarantined_at <= {sql_ts(before)}", run_id)


def forget(store: DeltaStore, sources: list[str], run_id: str | None = None) -> int:
    """Delete the `landed_files` rows of files no longer in the landing location."""
    keys = pl.DataFrame({"source_file": sources}, schema={"source_file": pl.String})
    return delete_keys(store, LANDED_FILES, keys, run_id)


def expire_archive(settings: Settings, cutoff: datetime) -> int:
    """Delete the archive's day folders older than `archive_days` at `cutoff`; returns how many."""
    filesystem, base = _archive(settings)
    if filesystem.get_file_info(base).type != pafs.FileType.Directory:
        return 0
    removed = 0
    for info in filesystem.get_file_info(pafs.FileSelector(base)):
        try:
            day = datetime.strptime(info.base_name, ARCHIVE_DAY).replace(tzinfo=cutoff.tzinfo)
        except ValueError:
            continue
        if day + timedelta(days=settings.retention.archive_days + 1) <= cutoff:
            filesystem.delete_dir(info.path)
            removed += 1
    return removed


def _remove(
    settings: Settings,
    filesystem: pafs.FileSystem,
    path: str,
    cutoff: datetime,
    result: LandingSweep,
) -> None:
    """Delete the landing file at `path`, or move it into today's archive folder."""
    if settings.retention.archive_days == 0:
        filesystem.delete_file(path)
        result.files_removed += 1
        return
    archive_fs, base = _archive(settings)
    target = f"{base.rstrip('/')}/{cutoff.strftime(ARCHIVE_DAY)}/{_relative(settings, path)}"
    archive_fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    pafs.copy_files(path, target, source_filesystem=filesystem, destination_filesystem=archive_fs)
    filesystem.delete_file(path)
    result.files_archived += 1
    log.info("retention: archived landing file %s", path)


def _archive(settings: Settings) -> tuple[pafs.FileSystem, str]:
    root = object_store.absolute(settings.archive_uri)
    return object_store.filesystem(root, settings.object_store_options)


def _relative(settings: Settings, path: str) -> str:
    """`path` relative to the landing root (its name alone when it lies elsewhere)."""
    root = settings.landing_uri
    base = str(Path(root).resolve()) if "://" not in root else root.split("://", 1)[1]
    base = base.rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else path.rsplit("/", 1)[-1]
