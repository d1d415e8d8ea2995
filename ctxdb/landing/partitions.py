"""Date partitions of the landing location: a writer publishes each file into a `dt=YYYY-MM-DD`
folder named by the UTC day it publishes it (`folder`), so that a landing lists the partitions
from its cursor's day on (less `OVERLAP`) instead of every file ever landed
(`ctxdb.landing.listing.list_files`). Files outside any partition (the flat layout written before
partitions, files dropped in by hand) are still listed every run.

Standard library only: the capture writers import it."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path, PurePosixPath

OVERLAP = timedelta(days=1)
"""How far before the landing cursor's day partitions are still listed: a file published into a
partition up to a day late (a clock that disagrees, an upload retried later) still lands; one
later than that lands with a full comparison (`ctxdb land --full`, as for any late file)."""
_NAME = re.compile(r"dt=(\d{4}-\d{2}-\d{2})")


def name(at: datetime) -> str:
    """The partition folder's name for a file published at `at`."""
    return f"dt={at.astimezone(UTC):%Y-%m-%d}"


def folder(parent: Path, at: datetime | None = None) -> Path:
    """The partition folder under `parent` for a file published at `at` (default: now)."""
    return parent / name(at or datetime.now(UTC))


def moved(relative: PurePosixPath, at: datetime | None = None) -> PurePosixPath:
    """`relative`, a file's path, in the partition of `at` (default: now) instead of the one
    its folder names, if any: a file published again later goes where its new time lists it."""
    parent = relative.parent
    if day_of(parent.name) is not None:
        parent = parent.parent
    return PurePosixPath(folder(Path(parent), at).as_posix()) / relative.name


def day_of(folder_name: str) -> date | None:
    """The day a folder named `dt=YYYY-MM-DD` holds; None for any other folder."""
    match = _NAME.fullmatch(folder_name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


def first_listed(since: datetime) -> date:
    """The oldest partition day a listing from the landing cursor `since` reads."""
    return (since.astimezone(UTC) - OVERLAP).date()
