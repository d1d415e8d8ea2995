"""Run `shards_job` for the partitions given on the command line, one after another, through
Dagster's `execute_job` on the instance in $DAGSTER_HOME: with `--celery` first, from the Celery
code location (`pipelines.celery_definitions`, every step sent to Celery workers), else from
`pipelines.definitions` (the multiprocess executor runs each step in a process of its own).
tests/test_fanout.py and tests/test_celery_executor.py start two of these at once, released
together from a start line (the file named by argv[1]) once their imports are done. Writes one
JSON line per run: partition, success, the run's start and end as the instance recorded them,
the materializations' numeric and text metadata, the step, engine and run failures, and per step
the Celery worker that ran it and its start and end."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    JobDefinition,
    execute_job,
    reconstructable,
)


def shards_job() -> JobDefinition:
    from pipelines.definitions import defs

    return defs.resolve_job_def("shards_job")


def celery_shards_job() -> JobDefinition:
    from pipelines.celery_definitions import defs

    return defs.resolve_job_def("shards_job")


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def failure(event: DagsterEvent) -> str:
    """What went wrong in a step, engine or run failure event ("" for any other event)."""
    if event.is_step_failure and event.step_failure_data.error is not None:
        return event.step_failure_data.error.to_string()
    if event.is_engine_event and event.engine_event_data.error is not None:
        return f"{event.message}: {event.engine_event_data.error.to_string()}"
    if event.is_step_failure or event.is_run_failure:
        return event.message or event.event_type_value
    return ""


def steps(instance: DagsterInstance, run_id: str) -> dict[str, dict]:
    """Per step: the Celery worker that ran it (absent under other executors), start and end."""
    out: dict[str, dict] = {}
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        step = out.setdefault(event.step_key, {})
        if event.event_type == DagsterEventType.STEP_START:
            step["start"] = record.timestamp
        elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            step["end"] = record.timestamp
        elif event.is_engine_event and "Celery worker" in event.engine_event_data.metadata:
            step["worker"] = event.engine_event_data.metadata["Celery worker"].value
    return out


def main(go: Path, partitions: list[str]) -> None:
    celery = partitions[:1] == ["--celery"]
    job = reconstructable(celery_shards_job if celery else shards_job)
    with DagsterInstance.get() as instance:
        emit("ready")
        while not go.exists():
            time.sleep(0.002)
        for key in partitions[1:] if celery else partitions:
            with execute_job(job, instance, tags={"dagster/partition": key}) as result:
                assets = {}
                for event in result.get_asset_materialization_events():
                    metadata = event.step_materialization_data.materialization.metadata
                    assets[event.asset_key.to_user_string()] = {
                        k: v.value for k, v in metadata.items() if isinstance(v.value, int | str)
                    }
                errors = [failure(event) for event in result.all_events if failure(event)]
                record = instance.get_run_record_by_id(result.run_id)
                run = {"partition": key, "success": result.success, "assets": assets}
                run |= {"start": record.start_time, "end": record.end_time}
                run["steps"] = steps(instance, result.run_id)
                emit(json.dumps({**run, "errors": errors}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
