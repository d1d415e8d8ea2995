"""Consistency checks of the turn record (run as Dagster asset checks; pure reads of Delta)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    DERIVE_FAILURES,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
    ROLE_ROWS,
    TURN_LOGS,
)
from ctxdb.storage.tombstones import purged_among

TURN = ["tenant", "app", "user_id", "conversation_id", "turn_id"]
SAMPLE = 20


@dataclass
class CheckOutcome:
    """A check's verdict: how many offend, the first `SAMPLE` of them, counts by kind."""

    passed: bool
    count: int
    offenders: list[str] = field(default_factory=list)
    details: dict[str, int] = field(default_factory=dict)

    def summary(self, name: str) -> str:
        """One line naming the check, its count, its non-zero kinds and its offenders."""
        kinds = ", ".join(f"{kind}: {n}" for kind, n in self.details.items() if n)
        shown = "; ".join(self.offenders)
        more = f" (first {len(self.offenders)})" if self.count > len(self.offenders) else ""
        line = f"check {name} failed: {self.count} offender(s)"
        return line + (f" [{kinds}]" if kinds else "") + (f"{more}: {shown}" if shown else "")


def _scan(store: DeltaStore, table: str, columns: list[str]) -> pl.LazyFrame:
    if not store.exists(table):
        return pl.LazyFrame(schema=dict.fromkeys(columns, pl.String))
    return store.scan(table).select(columns)


def _ids(frame: pl.DataFrame) -> list[str]:
    return [
        f"{c}/{t}" for c, t in frame.select("conversation_id", "turn_id").head(SAMPLE).iter_rows()
    ]


def closed_turns_have_one_turn_log(store: DeltaStore) -> CheckOutcome:
    """Every closed turn (not purged, nor of a conversation whose derivation failed: those are
    reported by `derive_failures_report`) has exactly one TurnLog."""
    closed_all = (
        _scan(store, RAW_TURN_EVENTS, [*TURN, "type"])
        .filter(pl.col("type") == "turn.closed")
        .select(TURN)
        .unique()
        .collect()
    )
    purged = purged_among(store, closed_all["conversation_id"])
    failed = _scan(store, DERIVE_FAILURES, ["conversation_id"])
    closed = (
        closed_all.lazy()
        .join(purged.lazy(), on="conversation_id", how="anti")
        .join(failed, on="conversation_id", how="anti")
    )
    logs = _scan(store, TURN_LOGS, TURN).group_by(TURN).len()
    missing = closed.join(logs, on=TURN, how="anti").collect()
    doubled = logs.filter(pl.col("len") > 1).collect()
    return CheckOutcome(
        passed=missing.is_empty() and doubled.is_empty(),
        count=missing.height + doubled.height,
        offenders=_ids(missing) + _ids(doubled),
        details={"missing": missing.height, "duplicated": doubled.height},
    )


def turn_logs_have_user_and_final_rows(store: DeltaStore) -> CheckOutcome:
    """Every TurnLog projects at least one user row and at most one final assistant row, and
    exactly one unless the turn closed cancelled or in error with no answer (a turn stopped
    before the agent wrote anything has none, by design). Offenders name the turn, its status
    and its row counts; `details` counts each kind of fault."""
    rows = (
        _scan(store, ROLE_ROWS, [*TURN, "target"])
        .group_by(TURN)
        .agg(
            (pl.col("target") == "user").sum().alias("users"),
            (pl.col("target") == "assistant").sum().alias("assistants"),
        )
    )
    logs = _turn_statuses(store)
    joined = logs.join(rows, on=TURN, how="left").with_columns(
        pl.col("users").fill_null(0), pl.col("assistants").fill_null(0)
    )
    faults = {
        "no_user_row": pl.col("users") < 1,
        "several_answers": pl.col("assistants") > 1,
        "answered_turn_without_answer_row": (pl.col("assistants") == 0)
        & (pl.col("status") == "ok"),
    }
    bad = (
        joined.with_columns(**faults)
        .filter(pl.any_horizontal(*faults))
        .sort("conversation_id", "turn_id")
        .collect()
    )
    offenders = [
        f"{row['conversation_id']}/{row['turn_id']} (status {row['status']}: "
        f"{row['users']} user, {row['assistants']} assistant rows)"
        for row in bad.head(SAMPLE).iter_rows(named=True)
    ]
    details = {name: int(bad[name].sum()) for name in faults}
    return CheckOutcome(
        passed=bad.is_empty(), count=bad.height, offenders=offenders, details=details
    )


def _turn_statuses(store: DeltaStore) -> pl.LazyFrame:
    """The TurnLogs' keys and close status. A TurnLog derived before `status` existed is
    cancelled when its payload holds the cancelled-without-answer completion, else ok."""
    if not store.exists(TURN_LOGS):
        return pl.LazyFrame(schema=dict.fromkeys([*TURN, "status"], pl.String))
    logs = store.scan(TURN_LOGS)
    if "status" not in logs.collect_schema().names():
        logs = logs.with_columns(pl.lit(None, pl.String).alias("status"))
    legacy = (
        pl.when(pl.col("payload").str.contains('"cancelled":true', literal=True))
        .then(pl.lit("cancelled"))
        .otherwise(pl.lit("ok"))
    )
    return logs.select(*TURN, pl.coalesce("status", legacy).alias("status"))


def role_rows_have_turn_log(store: DeltaStore) -> CheckOutcome:
    """No role row exists without its TurnLog."""
    orphans = (
        _scan(store, ROLE_ROWS, TURN)
        .unique()
        .join(_scan(store, TURN_LOGS, TURN), on=TURN, how="anti")
        .collect()
    )
    return CheckOutcome(passed=orphans.is_empty(), count=orphans.height, offenders=_ids(orphans))


def quarantine_report(store: DeltaStore) -> CheckOutcome:
    """Quarantined lines by reason (reported; quarantine itself is not a failure)."""
    if not store.exists(QUARANTINED_EVENTS):
        return CheckOutcome(passed=True, count=0)
    counts = store.scan(QUARANTINED_EVENTS).group_by("reason").len().collect()
    details = {reason: int(n) for reason, n in counts.iter_rows()}
    return CheckOutcome(passed=True, count=sum(details.values()), details=details)


def quarantined_files_report(store: DeltaStore) -> CheckOutcome:
    """Landing files that could not be read, by reason, with their paths (reported, not a
    failure: the other files landed)."""
    if not store.exists(QUARANTINED_FILES):
        return CheckOutcome(passed=True, count=0)
    files = store.read(QUARANTINED_FILES).sort("source_file")
    details = {reason: int(n) for reason, n in files.group_by("reason").len().iter_rows()}
    offenders = [f"{row[0]}: {row[1]}" for row in files.select("source_file", "detail").rows()]
    return CheckOutcome(
        passed=True, count=files.height, offenders=offenders[:SAMPLE], details=details
    )


def derive_failures_report(store: DeltaStore) -> CheckOutcome:
    """Conversations whose derivation failed, by error type (fails the non-blocking check: each
    is left as it was until a new event or an erasure clears it)."""
    if not store.exists(DERIVE_FAILURES):
        return CheckOutcome(passed=True, count=0)
    failures = store.read(DERIVE_FAILURES).sort("conversation_id")
    details = {kind: int(n) for kind, n in failures.group_by("error_type").len().iter_rows()}
    offenders = [
        f"{row[0]}: {row[1]}: {row[2]}"
        for row in failures.select("conversation_id", "error_type", "error").rows()
    ]
    return CheckOutcome(
        passed=failures.is_empty(),
        count=failures.height,
        offenders=offenders[:SAMPLE],
        details=details,
    )
