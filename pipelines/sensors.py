"""Sensors of the ctxdb code location."""

from __future__ import annotations

from pipelines.fanout import FANOUT_SENSORS
from pipelines.landing_sensor import landing_fanout_sensor, landing_sensor
from pipelines.ops_jobs import OPS_SENSORS

SENSORS: list = [landing_sensor, landing_fanout_sensor, *FANOUT_SENSORS, *OPS_SENSORS]
