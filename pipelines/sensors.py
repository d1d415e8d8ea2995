"""Sensors of the ctxdb code location."""

from __future__ import annotations

SENSORS: list = []
