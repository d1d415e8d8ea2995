"""Sensors of the ctxdb code location."""

from __future__ import annotations

from pipelines.landing_sensor import landing_sensor
from pipelines.ops_jobs import OPS_SENSORS

SENSORS: list = [landing_sensor, *OPS_SENSORS]
