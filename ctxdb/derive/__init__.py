"""Derivation of the turn record from `raw_turn_events`: TurnLogs, timelines, role rows, turn
catalog and replay artifacts (pure polars/pydantic functions), plus the incremental runner."""
