"""Pack snapshots: what a project's pack is made of (its recent sessions, unfinished turns and
recent work, each with when it happened), kept as one small file per user and project, so that
a SessionStart hook tells the pack without reading Delta (issue 45's cold-start target).

A snapshot is written where a hook builds a project's pack itself and rewritten by the main job
after each change (`ctxdb.pack.refresh`, the `context_pack_snapshots` asset). It records the
Delta version of every table the pack read, taken before reading; it is used only while each of
those tables is still at that version (the newest commit in the table's `_delta_log`: local
storage only) and before the earliest expiry among the rows it was made from, so it never tells
more or less than the memory does: any commit to those tables (a derivation, a retention sweep,
an erasure) makes it stale until it is rebuilt, and an erasure removes the user's snapshots. The
items are told again at the hook's `now` (their ages, the header) and fitted to the hook's
budget: the text is the one `build_pack` gives (tests/test_pack_snapshots.py).

Files are private to the account (0600 in 0700 folders), one folder per user (named by a hash of
tenant and user id, the file by a hash of the project), and each file names its principal and
project, which a reader checks. Standard library, the tokenizer and `fit` only: the hook imports
it without the settings' heavy stages, polars or deltalake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxdb.pack.fit import HEADINGS, Candidate, fit, header, render

FORMAT = 1
"""The snapshot file's format; a file of another format is not used (and rewritten)."""
_COMMIT = re.compile(r"(\d{20})\.json")


def _key(*parts: str | None) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def user_folder(packs: Path, tenant: str | None, user_id: str) -> Path:
    """The folder of one user's snapshots."""
    return packs / _key(tenant, user_id)


def snapshot_path(packs: Path, tenant: str | None, user_id: str, project: str) -> Path:
    """The snapshot of one user's project."""
    return user_folder(packs, tenant, user_id) / f"{_key(project)}.json"


def table_version(delta_root: Path, table: str) -> int | None:
    """The newest committed version of a local Delta table (None: no such table). The newest
    commit file is never cleaned up by a log cleanup, so the listing always holds it."""
    try:
        names = os.listdir(delta_root / table / "_delta_log")
    except OSError:
        return None
    found = [int(m.group(1)) for name in names if (m := _COMMIT.fullmatch(name))]
    return max(found, default=None)


def versions(delta_root: Path, tables: Sequence[str]) -> dict[str, int | None]:
    """The newest version of each of `tables`."""
    return {table: table_version(delta_root, table) for table in tables}


def _encode(c: Candidate) -> dict[str, Any]:
    return {
        "section": c.section,
        "priority": list(c.priority),
        "order": list(c.order),
        "text": c.text,
        "ref": c.ref,
        "ts": c.ts.isoformat() if c.ts is not None else None,
        "age": c.age,
        "age_at": c.age_at,
        "tokens": c.tokens,
    }


def _instant(value: str) -> datetime:
    """An aware time written by `write` (ValueError for anything else)."""
    at = datetime.fromisoformat(value)
    if at.tzinfo is None:
        raise ValueError(f"no time zone: {value!r}")
    return at


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"not a list of integers: {value!r}")
    return tuple(value)


def _decode(item: Mapping[str, Any]) -> Candidate:
    """An item as `_encode` wrote it (ValueError, KeyError or TypeError for anything else)."""
    if item["section"] not in HEADINGS or not isinstance(item["text"], str):
        raise ValueError("not a section, or text not a string")
    if not (isinstance(item["age"], str | None) and isinstance(item["ref"], str | None)):
        raise ValueError("age and ref must be strings or null")
    if type(item["tokens"]) is not int or type(item["age_at"]) is not int:
        raise ValueError("tokens and age_at must be integers")
    ts = _instant(item["ts"]) if item["ts"] is not None else None
    return Candidate(
        item["section"],
        _ints(item["priority"]),
        _ints(item["order"]),
        item["text"],
        item["ref"],
        ts,
        item["age"],
        item["tokens"],
        item["age_at"],
    )


def write(
    path: Path,
    owner: tuple[str | None, str, str],
    where: str,
    read_at: Mapping[str, int | None],
    expires: datetime | None,
    candidates: Sequence[Candidate],
) -> None:
    """Write a snapshot atomically: `owner` (tenant, user id, project), the header's `where`,
    the table versions it was read at, the earliest expiry of its rows, and its items."""
    tenant, user_id, project = owner
    data = {
        "format": FORMAT,
        "tenant": tenant,
        "user_id": user_id,
        "project": project,
        "where": where,
        "versions": dict(read_at),
        "expires": expires.isoformat() if expires is not None else None,
        "candidates": [_encode(c) for c in candidates if c.section != "header"],
    }
    path.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.mkdir(exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".snapshot-", suffix=".tmp")
    try:
        with open(fd, "w") as file:  # mkstemp makes it 0600
            json.dump(data, file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def user_snapshots(packs: Path, tenant: str | None, user_id: str) -> int:
    """How many snapshots a user has."""
    return len(list(user_folder(packs, tenant, user_id).glob("*.json")))


def remove_user(packs: Path, tenant: str | None, user_id: str) -> None:
    """Remove every snapshot of a user (an erasure of any of the user's data)."""
    shutil.rmtree(user_folder(packs, tenant, user_id), ignore_errors=True)


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "tenant": (str, type(None)),
    "user_id": str,
    "project": str,
    "where": str,
    "versions": dict,
    "expires": (str, type(None)),
    "candidates": list,
}


def load(path: Path) -> dict[str, Any] | None:
    """A snapshot file's content; None when it is missing, unreadable, of another format or
    not of a snapshot's shape."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if not all(isinstance(data.get(k), kinds) for k, kinds in _FIELDS.items()):
        return None
    return data


def is_current(data: Mapping[str, Any], delta_root: Path, now: datetime) -> bool:
    """Whether a snapshot still tells what the memory holds at `now`: every table it read at
    the same version, and none of its rows expired."""
    read_at: dict[str, int | None] = data["versions"]
    if not read_at or versions(delta_root, list(read_at)) != read_at:
        return False
    try:
        return data["expires"] is None or now < _instant(data["expires"])
    except ValueError:  # not an aware time: never current
        return False


def told(
    packs: Path,
    delta_root: Path,
    owner: tuple[str | None, str, str],
    budget: int,
    max_chars: int | None,
    now: datetime,
) -> str | None:
    """What a hook tells of `owner`'s (tenant, user id, project) project at `now`, from its
    snapshot: the pack text, or "" when it names no turn; None when there is no current
    snapshot (the caller builds the pack itself)."""
    tenant, user_id, project = owner
    data = load(snapshot_path(packs, tenant, user_id, project))
    if data is None or (data["tenant"], data["user_id"], data["project"]) != owner:
        return None
    if not is_current(data, delta_root, now):
        return None
    try:
        candidates = [_decode(item).at(now) for item in data["candidates"]]
    except (KeyError, TypeError, ValueError):  # not items of a snapshot: built again instead
        return None
    if any(c is None for c in candidates):
        return None
    kept = fit([header(data["where"], budget, now), *filter(None, candidates)], budget, max_chars)
    mark_used(snapshot_path(packs, tenant, user_id, project))
    return render(kept) if any(c.ref for c in kept) else ""


def mark_used(path: Path) -> None:
    """Note that a hook told `path` now: its modification time is when it was last used (a
    refresh keeps that time), so the refresh lets go of projects nobody opens."""
    with contextlib.suppress(OSError):  # a read-only folder still tells it
        os.utime(path)


def last_used(path: Path) -> float:
    """When a hook last told or built `path` (epoch seconds; 0 when it is gone)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
