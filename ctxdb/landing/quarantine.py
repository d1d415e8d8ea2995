"""Events that validated but cannot land: ownership and purge refusals and re-used event ids
become quarantine rows (the line's own bytes, read again from its file), inserted once per
(source_file, line_number) by a keyed MERGE; files that cannot be read at all become
`quarantined_files` rows."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime

import polars as pl

from ctxdb.landing.listing import CORRUPT_GZIP, LandingFile, Unreadable, read_landing_file
from ctxdb.landing.scan import BOM, EVENT_COLUMNS
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.delta import DeltaStore, sql_in
from ctxdb.storage.object_store import StorageOptions
from ctxdb.storage.tables import (
    QUARANTINE_SCHEMA,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    QUARANTINED_FILES_SCHEMA,
)

log = logging.getLogger(__name__)


OWNER = ["tenant", "app", "user_id"]
PURGED = "purged_conversation"
NOT_KEPT = ""
"""The raw line of a refused event of an erased conversation: its bytes are not kept."""


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
            .then(pl.lit(PURGED))
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


def rejected_to_quarantine(
    rejected: pl.DataFrame, now: datetime, storage_options: StorageOptions | None = None
) -> pl.DataFrame:
    """Quarantine rows for events that validated but cannot be accepted, with their raw lines
    (`raw_lines`; `storage_options`: Delta's, for an `s3://` landing location); an event of an
    erased conversation (a host's file imported again after `ctxdb erase`) is refused without
    its bytes: what was erased never comes back, not even in the quarantine."""
    erased = (rejected["reason"] == PURGED).to_list()
    raw = raw_lines(rejected, storage_options).to_list()
    return pl.DataFrame(
        {
            "source_file": rejected["source_file"],
            "line_number": rejected["line_number"],
            "raw_line": pl.Series(
                [NOT_KEPT if gone else line for line, gone in zip(raw, erased, strict=True)],
                dtype=pl.String,
            ),
            "reason": rejected["reason"],
            "detail": rejected["detail"],
            "event_id": rejected["event_id"],
            "conversation_id": rejected["conversation_id"],
            "quarantined_at": pl.Series([now] * rejected.height, dtype=pl.Datetime("us", "UTC")),
        }
    )


def raw_lines(events: pl.DataFrame, storage_options: StorageOptions | None = None) -> pl.Series:
    """Each event's line as its file holds it (read again: refusals are few), or the event
    re-serialized when the file no longer holds that line (rewritten or gone since)."""
    lines: dict[tuple[str, int], str] = {}
    for (path,), rows in events.group_by("source_file"):
        data = read_landing_file(str(path), storage_options)
        if isinstance(data, Unreadable):
            continue
        split = data.removeprefix(BOM).split(b"\n")
        for number in rows["line_number"]:
            if 0 < number <= len(split):
                line = split[number - 1].removesuffix(b"\r").decode("utf-8", "replace")
                lines[(str(path), number)] = line
    raw = []
    for row in events.select(EVENT_COLUMNS).iter_rows(named=True):
        line = lines.get((row["source_file"], row["line_number"]))
        raw.append(line if line is not None and _holds(line, row) else _serialized(row))
    return pl.Series("raw_line", raw, dtype=pl.String)


def _holds(line: str, event: dict) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("event_id") == event["event_id"]


def _serialized(event: dict) -> str:
    fields = {k: v for k, v in event.items() if k not in ("source_file", "line_number")}
    fields["occurred_at"] = fields["occurred_at"].isoformat()
    fields["payload"] = json.loads(fields["payload"])
    return json.dumps(fields)


def insert_quarantine(store: DeltaStore, rows: pl.DataFrame) -> int:
    """Insert quarantine rows whose (source_file, line_number) is not there yet, in one keyed
    MERGE: a run re-reading a file after a crash, or a concurrent landing of the same file, adds
    nothing twice (the MERGE reads only the files that may hold rows of the same source files:
    `DeltaStore.insert_new`)."""
    return store.insert_new(QUARANTINED_EVENTS, rows, QUARANTINE_KEY, QUARANTINE_SCHEMA)


QUARANTINE_KEY = ["source_file", "line_number"]


FILE_KEY = ["source_file", "size", "mtime", "reason"]


def insert_quarantined_files(
    store: DeltaStore, files: Sequence[tuple[LandingFile, Unreadable]], now: datetime
) -> int:
    """Record files that could not be read, once per path, size, mtime and reason: rows already
    there are left out, and the rest go in with a MERGE keyed on those columns, so two landings
    reading the same bad file at once record it once (the later MERGE reruns on the winner's
    commit and finds the row). A file without an mtime is kept once by the first step only."""
    if not files:
        return 0
    rows = pl.DataFrame(
        {
            "source_file": [f.path for f, _ in files],
            "size": [f.size for f, _ in files],
            "mtime": [f.mtime for f, _ in files],
            "reason": [u.reason for _, u in files],
            "detail": [u.detail for _, u in files],
            "head": [u.head for _, u in files],
            "quarantined_at": [now] * len(files),
        },
        schema=frame_of(QUARANTINED_FILES_SCHEMA.empty_table()).schema,
    )
    present = store.read(QUARANTINED_FILES, QUARANTINED_FILES_SCHEMA, columns=FILE_KEY)
    rows = rows.join(present, on=FILE_KEY, how="anti", nulls_equal=True)
    for row in rows.iter_rows(named=True):
        log.warning(
            "quarantined file %s (%s): %s", row["source_file"], row["reason"], row["detail"]
        )
    return store.insert_new(QUARANTINED_FILES, rows, FILE_KEY, QUARANTINED_FILES_SCHEMA)


def clear_quarantined_files(store: DeltaStore, paths: Sequence[str]) -> int:
    """Remove the quarantine rows of files that have now landed."""
    if not paths or not store.exists(QUARANTINED_FILES):
        return 0
    present = store.read(QUARANTINED_FILES, QUARANTINED_FILES_SCHEMA, columns=["source_file"])
    landed = [p for p in dict.fromkeys(paths) if p in set(present["source_file"].to_list())]
    if not landed:
        return 0
    return store.delete(QUARANTINED_FILES, sql_in("source_file", landed))


def bad_bytes_files(store: DeltaStore) -> pl.DataFrame:
    """Files quarantined for their bytes (`corrupt_gzip`): not read again until they change."""
    return store.read(QUARANTINED_FILES, QUARANTINED_FILES_SCHEMA).filter(
        pl.col("reason") == CORRUPT_GZIP
    )
