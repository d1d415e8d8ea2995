"""Jobs of the ctxdb code location."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipelines.fanout import FANOUT_JOBS
from pipelines.ops_jobs import OPS_JOBS, WRITER_TAGS
from pipelines.reindex import reindex_job
from pipelines.step_errors import FAILURE_HOOKS

memory_job = define_asset_job(
    "memory_job",
    selection=AssetSelection.all(),
    description="Land new events, derive the turn record, embed and index: the main job.",
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
)

JOBS: list = [memory_job, reindex_job, *OPS_JOBS, *FANOUT_JOBS]
