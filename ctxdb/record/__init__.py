"""The turn record derived from landed events: TurnLogs, timelines, role rows, catalog, replay.
In: `raw_turn_events`; out: the five derived Delta tables, incrementally, with their checks.
"""
