"""Schedules of the ctxdb code location."""

from __future__ import annotations

from pipelines.ops_jobs import OPS_SCHEDULES

SCHEDULES: list = [*OPS_SCHEDULES]
