"""Asset checks of the turn record: offending conversation/turn ids go to the check metadata.

The structural checks are blocking: when the turn record is broken (a closed turn without its
TurnLog, a TurnLog without its rows, an orphan row), embedding and indexing do not run on it. A
failing check also logs one error line naming its count, faults and offenders, so
`ctxdb jobs run` (`dagster job execute`) prints them, not only the run's metadata.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    MetadataValue,
    asset_check,
)

from ctxdb.record import checks
from ctxdb.record.checks import CheckOutcome
from resources.delta import DeltaResource


def _result(
    outcome: CheckOutcome,
    severity: AssetCheckSeverity,
    context: AssetCheckExecutionContext | None = None,
) -> AssetCheckResult:
    """The check's result with its count, offenders and details as metadata; a failure is also
    logged (with `context`) as one line the CLI shows."""
    if context is not None and not outcome.passed:
        context.log.error(outcome.summary(context.check_specs[0].key.to_user_string()))
    return AssetCheckResult(
        passed=outcome.passed,
        severity=severity,
        metadata={
            "count": outcome.count,
            "offenders": MetadataValue.json(outcome.offenders),
            "details": MetadataValue.json(outcome.details),
        },
    )


@asset_check(
    asset=AssetKey("turn_logs"),
    description="Every closed turn has exactly one TurnLog.",
    blocking=True,
)
def one_turn_log_per_closed_turn(
    context: AssetCheckExecutionContext, delta: DeltaResource
) -> AssetCheckResult:
    return _result(
        checks.closed_turns_have_one_turn_log(delta.store()), AssetCheckSeverity.ERROR, context
    )


@asset_check(
    asset=AssetKey("role_rows"),
    description=(
        "Every TurnLog has at least one user row and one final assistant row (none when the "
        "turn closed cancelled or in error before any answer)."
    ),
    blocking=True,
)
def user_and_final_assistant_rows(
    context: AssetCheckExecutionContext, delta: DeltaResource
) -> AssetCheckResult:
    return _result(
        checks.turn_logs_have_user_and_final_rows(delta.store()), AssetCheckSeverity.ERROR, context
    )


@asset_check(
    asset=AssetKey("role_rows"),
    description="No role row exists without its TurnLog.",
    blocking=True,
)
def role_rows_have_turn_log(
    context: AssetCheckExecutionContext, delta: DeltaResource
) -> AssetCheckResult:
    return _result(checks.role_rows_have_turn_log(delta.store()), AssetCheckSeverity.ERROR, context)


@asset_check(
    asset=AssetKey("raw_turn_events"),
    description="Quarantined lines by reason (reported, never a failure by itself).",
)
def quarantine_count(delta: DeltaResource) -> AssetCheckResult:
    return _result(checks.quarantine_report(delta.store()), AssetCheckSeverity.WARN)


@asset_check(
    asset=AssetKey("quarantined_files"),
    description="Landing files that could not be read at all, by reason (reported, not a failure).",
)
def quarantined_files_count(delta: DeltaResource) -> AssetCheckResult:
    return _result(checks.quarantined_files_report(delta.store()), AssetCheckSeverity.WARN)


@asset_check(
    asset=AssetKey("derive_failures"),
    description="Conversations whose derivation raised (left as they were; the rest derived).",
)
def derive_failures_count(
    context: AssetCheckExecutionContext, delta: DeltaResource
) -> AssetCheckResult:
    return _result(checks.derive_failures_report(delta.store()), AssetCheckSeverity.WARN, context)
