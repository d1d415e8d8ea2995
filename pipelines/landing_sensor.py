"""Sensor: start the main job when new or changed JSONL files appear under the landing location.

The cursor (JSON) remembers the pending files' digest, how many runs were requested for it and
the last run key. A run is requested when the pending files change, or again (next attempt, a new
run key) when the run requested for the same files failed or was canceled, so an outage is caught
up without waiting for a new file. While the last requested run is queued or running, nothing is
requested: that run lands whatever is pending when it starts.

`landing_sensor` starts `memory_job`; `landing_fanout_sensor` (off by default) starts
`records_job` instead, after which the shards embed and index in parallel (pipelines/fanout.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from assets.shards import ALL_SHARDS_TAGS
from ctxdb.landing.files import LandingFile, list_files
from ctxdb.landing.run import files_to_land
from ctxdb.settings import get_settings
from pipelines.fanout import records_job
from pipelines.jobs import memory_job
from resources.delta import DeltaResource

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
    """What the sensor requested last: for which pending files, which attempt, which run key."""

    digest: str = ""
    attempt: int = 0
    run_key: str = ""

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


def last_status(context: SensorEvaluationContext, run_key: str) -> DagsterRunStatus | None:
    """Status of the newest run launched with `run_key` (None when there is none)."""
    if not run_key:
        return None
    runs = context.instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    return runs[0].status if runs else None


@sensor(job=memory_job, minimum_interval_seconds=30, description="New landing files -> main job.")
def landing_sensor(context: SensorEvaluationContext, delta: DeltaResource):
    """One run per set of pending files, requested again while its runs fail (over every
    shard partition at once)."""
    return request_landing(context, delta, ALL_SHARDS_TAGS)


@sensor(
    job=records_job,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.STOPPED,
    description="New landing files -> records_job, then the shards in parallel (fan-out).",
)
def landing_fanout_sensor(context: SensorEvaluationContext, delta: DeltaResource):
    """`landing_sensor` for the fan-out path: turn this on and `landing_sensor` off."""
    return request_landing(context, delta, {})


def request_landing(
    context: SensorEvaluationContext, delta: DeltaResource, run_tags: dict[str, str]
) -> RunRequest | SkipReason:
    """The run request (with `run_tags`) for the pending landing files, or why there is none."""
    uri = get_settings().landing_uri
    pending = files_to_land(delta.store(), list_files(uri))
    if not pending:
        return SkipReason(f"no new files under {uri}")
    cursor = Cursor.parse(context.cursor)
    status = last_status(context, cursor.run_key)
    if status in IN_FLIGHT:
        return SkipReason(f"run {cursor.run_key} is {status.value}; it lands what is pending")
    current = digest(pending)
    if current == cursor.digest and status not in RETRY:
        return SkipReason("pending files already requested")
    attempt = cursor.attempt + 1 if current == cursor.digest else 1
    request = Cursor(current, attempt, f"landing-{current}-{attempt}")
    context.update_cursor(request.dumps())
    if attempt > 1:
        context.log.info(f"run {cursor.run_key} ended {status.value}; requesting attempt {attempt}")
    return RunRequest(
        run_key=request.run_key,
        run_config={"ops": {"raw_turn_events": {"config": {"path": uri}}}},
        tags={
            "ctxdb/landing_files": str(len(pending)),
            "ctxdb/landing_attempt": str(attempt),
            **run_tags,
        },
    )
