"""The ctxdb Dagster code location: assets, checks, jobs, schedules, sensors and resources."""

from __future__ import annotations

from dagster import (
    Definitions,
    ExecutorDefinition,
    load_asset_checks_from_package_module,
    load_assets_from_package_module,
)

import assets
from assets.lifecycle import retention_tables
from ctxdb.settings import get_settings
from pipelines.jobs import JOBS
from pipelines.resources import build_resources
from pipelines.schedules import SCHEDULES
from pipelines.sensors import SENSORS


def build_definitions(executor: ExecutorDefinition | None = None) -> Definitions:
    """Every asset, check, job, schedule, sensor and resource; `executor` runs the steps of every
    job (None: Dagster's default, one process per step; another executor sends steps to
    workers, which turns the embedding prefill on by default). Reads the settings: the
    `settings` resource every other resource reads pins them, and the shard partitions follow
    them."""
    return Definitions(
        assets=[*load_assets_from_package_module(assets), *retention_tables],
        asset_checks=load_asset_checks_from_package_module(assets),
        jobs=JOBS,
        schedules=SCHEDULES,
        sensors=SENSORS,
        resources=build_resources(get_settings(), distributed=executor is not None),
        executor=executor,
    )


defs = build_definitions()
