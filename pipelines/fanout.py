"""Fan-out of the embedding and index stages over the shard partitions (issue 17 item 4).

`memory_job` still lands, derives, embeds and indexes in one run (its embedding and index steps
cover every shard). The fan-out path splits it:

- `records_job` lands and derives (the global writer: one run at a time);
- `shards_after_records` then requests one `shards_job` run per shard partition of
  `role_row_embeddings` and `search_index`; the instance runs them side by side (dagster.yaml: one
  run per `dagster/partition` value), each in its own process, or on Celery / Kubernetes workers
  (docs/scale-out.md). A backfill of `shards_job` (UI or `dagster job backfill`) does the same;
- `checks_after_shards` runs `index_checks_job` (the whole-index asset checks) once no shard run
  is in flight any more.

`landing_fanout_sensor` starts `records_job` for new landing files; it is off by default (the
landing sensor starts `memory_job`): turn one on and the other off to fan out.
"""

from __future__ import annotations

from dagster import (
    AssetSelection,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    RunStatusSensorContext,
    SkipReason,
    define_asset_job,
    run_status_sensor,
)

from assets.embedding_prefill import embedding_prefill
from assets.embeddings import role_row_embeddings
from assets.search_index import search_index
from assets.shards import SHARD_TAG, shard_count
from pipelines.ops_jobs import WRITER_TAGS
from pipelines.step_errors import FAILURE_HOOKS

SHARD_ASSETS = AssetSelection.assets(*role_row_embeddings.keys, *search_index.keys)
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]

records_job = define_asset_job(
    "records_job",
    # the shard runs embed in parallel themselves: no prefill before them
    selection=AssetSelection.all() - SHARD_ASSETS - AssetSelection.assets(embedding_prefill),
    description="Land new events and derive the turn record; the shards embed and index after.",
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
)

shards_job = define_asset_job(
    "shards_job",
    selection=SHARD_ASSETS.without_checks(),
    description="Embed and index one shard of conversations (one run per partition).",
    hooks=FAILURE_HOOKS,
)

index_checks_job = define_asset_job(
    "index_checks_job",
    selection=AssetSelection.checks_for_assets(*role_row_embeddings.keys, *search_index.keys),
    description="The whole-index asset checks, after every shard ran.",
)


def shard_requests(parent_run_id: str) -> list[RunRequest]:
    """One `shards_job` run per shard partition, keyed by the run that made the change."""
    return [
        RunRequest(
            run_key=f"shards-{parent_run_id}-{index}",
            partition_key=str(index),
            tags={SHARD_TAG: str(index), "ctxdb/after_run": parent_run_id},
        )
        for index in range(shard_count())
    ]


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[records_job],
    request_job=shards_job,
    description="records_job succeeded -> one shards_job run per shard.",
)
def shards_after_records(context: RunStatusSensorContext):
    return shard_requests(context.dagster_run.run_id)


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[shards_job],
    request_job=index_checks_job,
    description="The last shard run of a fan-out succeeded -> the whole-index checks.",
)
def checks_after_shards(context: RunStatusSensorContext):
    parent = context.dagster_run.tags.get("ctxdb/after_run", context.dagster_run.run_id)
    running = context.instance.get_runs(
        filters=RunsFilter(job_name=shards_job.name, statuses=IN_FLIGHT), limit=1
    )
    if running:
        return SkipReason(f"shard run {running[0].run_id} is still in flight")
    return RunRequest(run_key=f"checks-{parent}")


FANOUT_JOBS: list = [records_job, shards_job, index_checks_job]
FANOUT_SENSORS: list = [shards_after_records, checks_after_shards]
