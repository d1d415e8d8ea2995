"""The ctxdb Dagster code location: assets, checks, jobs, schedules, sensors and resources."""

from __future__ import annotations

from dagster import (
    Definitions,
    load_asset_checks_from_package_module,
    load_assets_from_package_module,
)

import assets
from assets.lifecycle import retention_tables
from pipelines.jobs import JOBS
from pipelines.resources import build_resources
from pipelines.schedules import SCHEDULES
from pipelines.sensors import SENSORS

defs = Definitions(
    assets=[*load_assets_from_package_module(assets), *retention_tables],
    asset_checks=load_asset_checks_from_package_module(assets),
    jobs=JOBS,
    schedules=SCHEDULES,
    sensors=SENSORS,
    resources=build_resources(),
)
