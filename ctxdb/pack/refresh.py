"""Keeping pack snapshots (`ctxdb.pack.snapshot`) current: one built where a hook builds a
project's pack itself, and every stale one rebuilt by the main job after its derivation (the
`context_pack_snapshots` asset), so a project's next session starts from a current snapshot."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ctxdb.contract.identity import Principal
from ctxdb.pack.build import read_memory, where
from ctxdb.pack.models import ContextRequest
from ctxdb.pack.snapshot import is_current, last_used, load, snapshot_path, versions, write
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import CONVERSATION_TIMELINES, ROLE_ROWS, TURN_CATALOG, TURN_LOGS

log = logging.getLogger(__name__)
TABLES = (TURN_LOGS, TURN_CATALOG, CONVERSATION_TIMELINES, ROLE_ROWS)
"""The tables a project's pack reads (`ctxdb.pack.memory`)."""
IDLE = timedelta(days=30)
"""A snapshot no hook told or built for this long is removed by the refresh, not rebuilt (its
project's next session builds it again), so a refresh costs the projects people open, not every
project ever opened."""


@dataclass
class RefreshStats:
    current: int = 0
    rebuilt: int = 0
    removed: int = 0
    failed: int = 0


def snapshot_project(
    settings: Settings, store: DeltaStore, principal: Principal, project: str, now: datetime
) -> bool:
    """Write the snapshot of `principal`'s `project` as the memory holds it at `now` (the table
    versions read first); False, and any earlier snapshot removed, when the project has no live
    turn or the data is not in a local folder."""
    packs = settings.packs_path
    if packs is None:
        return False
    path = snapshot_path(packs, principal.tenant, principal.user_id, project)
    read_at = versions(Path(settings.delta_uri), TABLES)
    request = ContextRequest(project=project)
    memory = read_memory(principal, request, now, store)
    if memory.expires is None:  # no live row: nothing worth keeping
        path.unlink(missing_ok=True)
        return False
    owner = (principal.tenant, principal.user_id, project)
    write(path, owner, where(request), read_at, memory.expires, memory.candidates)
    return True


def refresh(settings: Settings, store: DeltaStore, now: datetime) -> RefreshStats:
    """Rebuild every snapshot that is no longer current (remove those of projects without live
    turns, those unused for IDLE, and unreadable ones), keeping when each was last used; one
    failing snapshot is logged and left stale, never stops the others (a stale snapshot is not
    used)."""
    stats = RefreshStats()
    packs = settings.packs_path
    if packs is None or not packs.is_dir():
        return stats
    delta_root = Path(settings.delta_uri)
    for path in sorted(packs.glob("*/*.json")):
        data = load(path)
        if data is None:
            path.unlink(missing_ok=True)
            stats.removed += 1
            continue
        used = last_used(path)
        if used < (now - IDLE).timestamp():
            path.unlink(missing_ok=True)
            stats.removed += 1
            continue
        try:
            if is_current(data, delta_root, now):
                stats.current += 1
                continue
            principal = Principal(user_id=data["user_id"], tenant=data["tenant"])
            kept = snapshot_project(settings, store, principal, data["project"], now)
            if kept:
                os.utime(path, (used, used))  # rebuilt, not used: its last use stays
        except Exception:  # noqa: BLE001 - one user's snapshot never stops the others'
            log.exception("pack snapshot %s could not be rebuilt; left stale (unused)", path)
            stats.failed += 1
            continue
        stats.rebuilt, stats.removed = stats.rebuilt + kept, stats.removed + (not kept)
    return stats
