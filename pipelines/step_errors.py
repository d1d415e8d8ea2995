"""A failed step's cause as one line in its run's log, e.g. `raw_turn_events failed: cannot write
table raw_turn_events at /srv/delta/raw_turn_events: disk full (no space left on device)`.

Dagster still keeps the full error with its stack in the step's failure event; this hook puts the
line an operator needs first (the same line the CLI prints) into the run's log as an ERROR.
"""

from __future__ import annotations

from dagster import HookContext, failure_hook

from ctxdb.errors import describe


@failure_hook
def failure_line(context: HookContext) -> None:
    """Log the failed step's error as one line."""
    if context.op_exception is not None:
        context.log.error(f"{context.step_key} failed: {describe(context.op_exception)}")


FAILURE_HOOKS = {failure_line}
