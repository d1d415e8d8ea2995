"""Sensor: start the main job when new or changed JSONL files appear under the landing location."""

from __future__ import annotations

import hashlib

from dagster import RunRequest, SensorEvaluationContext, SkipReason, sensor

from ctxdb.landing.files import list_files, pending_files
from ctxdb.settings import get_settings
from ctxdb.storage.tables import LANDED_FILES, LANDED_FILES_SCHEMA
from pipelines.jobs import memory_job
from resources.delta import DeltaResource


@sensor(job=memory_job, minimum_interval_seconds=30, description="New landing files -> main job.")
def landing_sensor(context: SensorEvaluationContext, delta: DeltaResource):
    """Run key = hash of the pending files (path, size, mtime), also kept as the cursor."""
    uri = get_settings().landing_uri
    landed = delta.store().read(
        LANDED_FILES, LANDED_FILES_SCHEMA, columns=["source_file", "size", "mtime"]
    )
    pending = pending_files(list_files(uri), landed)
    if not pending:
        return SkipReason(f"no new files under {uri}")
    digest = hashlib.sha256(
        "\n".join(f"{f.path}\0{f.size}\0{f.mtime}" for f in pending).encode()
    ).hexdigest()[:16]
    if digest == context.cursor:
        return SkipReason("pending files already requested")
    context.update_cursor(digest)
    return RunRequest(
        run_key=f"landing-{digest}",
        run_config={"ops": {"raw_turn_events": {"config": {"path": uri}}}},
        tags={"ctxdb/landing_files": str(len(pending))},
    )
