"""Sensors of the ctxdb code location."""

from __future__ import annotations

from pipelines.landing_sensor import landing_sensor

SENSORS: list = [landing_sensor]
