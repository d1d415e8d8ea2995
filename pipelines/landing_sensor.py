"""Sensor: start the main job when new or changed JSONL files appear under the landing location.

The cursor (JSON) remembers the pending files' digest, how many runs were requested for it and
the last run key. A run is requested when the pending files change, or again (next attempt, a new
run key) when the run requested for the same files failed or was canceled, so an outage is caught
up without waiting for a new file. While the last requested run is queued or running, nothing is
requested: that run lands whatever is pending when it starts.

Only files from the landing floor on (`ctxdb.landing.cursor`) are compared with `landed_files`,
so a tick reads the landed rows of recent files only. The cursor keeps the floor of the last tick
and the digest of the listed files below it. A tick lists and compares the files from the lower
of the kept and the current floor on: the listing is the landing's own
(`ctxdb.landing.listing.list_files` from that floor: files outside date partitions and the recent
partitions), and the digest covers the files below the kept floor that such a listing holds
(`within`), so old partitions are never listed. When the part of the listing below the kept floor
changed (a file appeared late with an old mtime), it compares every listed file instead, and a
pending file below the current floor makes the run land with `full`. A new floor and digest are
kept only while no pending file lies below them, so such a file is compared on every tick until
it has landed.

`landing_sensor` starts `memory_job`; `landing_fanout_sensor` (off by default) starts
`records_job` instead, after which the shards embed and index in parallel (pipelines/fanout.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from assets.shards import all_shards_tags
from ctxdb.landing.cursor import landed_since, landing_floor, split
from ctxdb.landing.listing import LandingFile, list_files, pending_files, within
from ctxdb.landing.quarantine import bad_bytes_files
from pipelines.fanout import records_job
from pipelines.jobs import memory_job
from resources.delta import DeltaResource
from resources.settings import SettingsResource

RUN_KEY_TAG = "dagster/run_key"
IN_FLIGHT = {
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.MANAGED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.SUSPENDED,
    DagsterRunStatus.CANCELING,
}
RETRY = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass(frozen=True)
class Cursor:
    """What the sensor requested last: for which pending files, which attempt, which run key;
    and the landing floor of the last tick (ISO) with the digest of the listed files below it."""

    digest: str = ""
    attempt: int = 0
    run_key: str = ""
    floor: str = ""
    older: str = ""

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        """The cursor from its JSON (a cursor of the old format, a bare digest, starts over)."""
        try:
            return cls(**json.loads(text or "{}"))
        except (ValueError, TypeError):
            return cls()

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def digest(files: list[LandingFile]) -> str:
    """A short hash of the pending files (path, size, mtime)."""
    text = "\n".join(f"{f.path}\0{f.size}\0{f.mtime}" for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compared_from(cursor: Cursor, floor: datetime | None) -> datetime | None:
    """The mtime from which listed files are compared: the lower of the kept and the current
    landing floor; None (every file) without either."""
    if not cursor.floor or floor is None:
        return None
    return min(datetime.fromisoformat(cursor.floor), floor)


def last_status(context: SensorEvaluationContext, run_key: str) -> DagsterRunStatus | None:
    """Status of the newest run launched with `run_key` (None when there is none)."""
    if not run_key:
        return None
    runs = context.instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    return runs[0].status if runs else None


@sensor(job=memory_job, minimum_interval_seconds=30, description="New landing files -> main job.")
def landing_sensor(
    context: SensorEvaluationContext, settings: SettingsResource, delta: DeltaResource
):
    """One run per set of pending files, requested again while its runs fail (over every
    shard partition at once)."""
    return request_landing(context, settings, delta, all_shards_tags())


@sensor(
    job=records_job,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.STOPPED,
    description="New landing files -> records_job, then the shards in parallel (fan-out).",
)
def landing_fanout_sensor(
    context: SensorEvaluationContext, settings: SettingsResource, delta: DeltaResource
):
    """`landing_sensor` for the fan-out path: turn this on and `landing_sensor` off."""
    return request_landing(context, settings, delta, {})


def request_landing(
    context: SensorEvaluationContext,
    settings: SettingsResource,
    delta: DeltaResource,
    run_tags: dict[str, str],
) -> RunRequest | SkipReason:
    """The run request (with `run_tags`) for the pending landing files, or why there is none."""
    uri = settings.get().landing_uri
    store = delta.store()
    floor = landing_floor(store)
    cursor = Cursor.parse(context.cursor)
    since = compared_from(cursor, floor)
    files = list_files(uri, store.storage_options, since=since)
    recent, older = split(files, since)
    if since is not None and digest(older) != cursor.older:
        since, recent = None, files
    pending = pending_files(recent, landed_since(store, since), bad_bytes_files(store))
    full = floor is not None and any(f.mtime is not None and f.mtime < floor for f in pending)
    if floor is not None and not full:
        below = within(uri, split(files, floor)[1], floor)
        kept = replace(cursor, floor=floor.isoformat(), older=digest(below))
        if kept != cursor:
            cursor = kept
            context.update_cursor(cursor.dumps())
    if not pending:
        return SkipReason(f"no new files under {uri}")
    status = last_status(context, cursor.run_key)
    if status in IN_FLIGHT:
        return SkipReason(f"run {cursor.run_key} is {status.value}; it lands what is pending")
    current = digest(pending)
    if current == cursor.digest and status not in RETRY:
        return SkipReason("pending files already requested")
    attempt = cursor.attempt + 1 if current == cursor.digest else 1
    full_config = {"full": True} if full else {}
    request = replace(
        cursor, digest=current, attempt=attempt, run_key=f"landing-{current}-{attempt}"
    )
    context.update_cursor(request.dumps())
    if attempt > 1 and status is not None:  # a retry: the last run ended in a RETRY status
        context.log.info(f"run {cursor.run_key} ended {status.value}; requesting attempt {attempt}")
    return RunRequest(
        run_key=request.run_key,
        run_config={"ops": {"raw_turn_events": {"config": {"path": uri, **full_config}}}},
        tags={
            "ctxdb/landing_files": str(len(pending)),
            "ctxdb/landing_attempt": str(attempt),
            **run_tags,
        },
    )
