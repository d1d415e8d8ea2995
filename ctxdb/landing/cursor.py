"""The landing cursor: which listed files to compare with `landed_files`, in proportion to the new
files rather than to everything ever landed.

The cursor is a floor on file mtimes: the newest mtime in `landed_files` (read from the Delta
file statistics, not the rows) less `CURSOR_LAG`. A listed file at or above the floor (or
without an mtime) is compared with the `landed_files` rows at or above the floor; that read
pushes `mtime >= floor` into the Delta scan, so files of older landings are skipped by their
statistics. A listed file below the floor is taken as handled.

The rule for late files: a file that appears with an mtime below the floor (copied with its old
mtime, an upload that finished long after it started) is landed only by a full comparison:
`ctxdb land --full`, the asset's `full` config, or the landing sensor, which compares everything
whenever the part of the listing below the floor changes (`pipelines/landing_sensor.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ctxdb.landing.listing import LandingFile
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, LANDED_FILES_SCHEMA

CURSOR_LAG = timedelta(hours=1)
"""How far below the newest landed mtime files are still compared: covers files written while a
landing ran and clocks that disagree a little."""
COMPARED = ["source_file", "size", "mtime"]


def landing_floor(store: DeltaStore) -> datetime | None:
    """The newest mtime in `landed_files` (from the Delta file statistics) less `CURSOR_LAG`;
    None when nothing has landed."""
    dt = store.table(LANDED_FILES)
    if dt is None:
        return None
    newest = pc.max(pa.table(dt.get_add_actions(flatten=True))["max.mtime"]).as_py()
    return None if newest is None else newest - CURSOR_LAG


def split(
    files: Sequence[LandingFile], floor: datetime | None
) -> tuple[list[LandingFile], list[LandingFile]]:
    """`files` at or above `floor` (or without an mtime), and those below it."""
    if floor is None:
        return list(files), []
    recent = [f for f in files if f.mtime is None or f.mtime >= floor]
    older = [f for f in files if f.mtime is not None and f.mtime < floor]
    return recent, older


def landed_since(store: DeltaStore, floor: datetime | None) -> pl.DataFrame:
    """The path, size and mtime of landed files at or above `floor` (or without an mtime), the
    predicate pushed into the Delta scan; every landed file when `floor` is None."""
    dt = store.table(LANDED_FILES)
    if dt is None:
        return frame_of(LANDED_FILES_SCHEMA.empty_table()).select(COMPARED)
    mtime = pc.field("mtime")
    bound = pa.scalar(floor, LANDED_FILES_SCHEMA.field("mtime").type) if floor else None
    rows = dt.to_pyarrow_dataset().to_table(
        columns=COMPARED, filter=None if bound is None else (mtime >= bound) | mtime.is_null()
    )
    return frame_of(rows)
