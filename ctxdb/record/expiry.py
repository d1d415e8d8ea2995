"""The TTL policy applied at derivation time: each derived row's `expires_at` from the rules.

The retention clock of a row is the later of when it happened (`ts`, `ended_at`, ...) and when
ctxdb landed it (`ingested_at` of its events): history imported or landed long after it happened
(`ctxdb import claude-code`, `ctxdb capture codex|gemini import`, a backfill) is kept the full
retention period from its landing instead of arriving already expired. For live capture the two
clocks lie seconds apart. Raw events (`ctxdb.lifecycle.retention`) and landing lines
(`ctxdb.lifecycle.landing_retention`) expire by the same clock, so no derived row outlives or
predates the events it comes from (docs/operations.md, "Retention").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from ctxdb.settings import RetentionRule, Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_TURN_EVENTS

LATEST_EXPIRY = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
"""The latest `expires_at` written: Elasticsearch's date format reads four-digit years only, so a
longer TTL means "never" and is clamped here."""
MAX_TTL_DAYS = 3_650_000
"""TTLs are cut to 10,000 years before they are added, so `ts + ttl` never overflows."""


def ttl_days_expr(
    rules: Sequence[RetentionRule],
    default_days: int,
    *,
    role_column: str | None = "role",
) -> pl.Expr:
    """Per-row TTL in days: the most specific matching rule (tenant, app, role), else the default.

    Rows without a role column (TurnLogs, timelines) only match rules that leave `role` unset.
    """
    days: pl.Expr = pl.lit(default_days, dtype=pl.Int64)
    for rule in sorted(rules, key=_specificity):
        conditions = [pl.lit(True)]
        if rule.tenant is not None:
            conditions.append(pl.col("tenant") == rule.tenant)
        if rule.app is not None:
            conditions.append(pl.col("app") == rule.app)
        if rule.role is not None:
            if role_column is None:
                continue
            conditions.append(pl.col(role_column) == rule.role)
        days = pl.when(pl.all_horizontal(conditions)).then(pl.lit(rule.days)).otherwise(days)
    return days


def expires_at_expr(
    settings: Settings, *, ts_column: str = "ts", role_column: str | None = "role"
) -> pl.Expr:
    """`expires_at` = `ts` + the row's TTL, at most `LATEST_EXPIRY` (derivation computes it once,
    the sweep obeys it)."""
    days = ttl_days_expr(settings.retention.rules, settings.retention.days, role_column=role_column)
    expires = pl.col(ts_column) + pl.duration(days=days.clip(upper_bound=MAX_TTL_DAYS))
    return pl.min_horizontal(expires, pl.lit(LATEST_EXPIRY)).alias("expires_at")


def _specificity(rule: RetentionRule) -> int:
    return sum(value is not None for value in (rule.tenant, rule.app, rule.role))


LANDED_AT = "landed_at"
"""The column `landed_clock` adds: when ctxdb landed the latest event of the turn."""
TURN_KEY = ["conversation_id", "turn_id"]


def landed_clock(raw: pl.DataFrame) -> pl.DataFrame:
    """(conversation_id, turn_id, landed_at): when each turn's latest event landed (its events'
    `ingested_at`); empty when `raw` carries no landing time."""
    if "ingested_at" not in raw.columns:
        return pl.DataFrame(
            schema={"conversation_id": pl.String, "turn_id": pl.String, LANDED_AT: pl.Datetime}
        )
    return raw.group_by(TURN_KEY).agg(pl.col("ingested_at").max().alias(LANDED_AT))


def held_from_landing(
    frame: pl.DataFrame,
    landed: pl.DataFrame,
    settings: Settings,
    *,
    keys: Sequence[str] = tuple(TURN_KEY),
    role_column: str | None = None,
) -> pl.DataFrame:
    """`frame` whose `expires_at` is at least its landing time (`landed`, per `keys`) plus the
    row's TTL: a row that landed after it happened keeps the whole retention period."""
    if frame.is_empty() or landed.is_empty() or "expires_at" not in frame.columns:
        return frame
    per_key = landed.group_by(list(keys)).agg(pl.col(LANDED_AT).max())
    days = ttl_days_expr(settings.retention.rules, settings.retention.days, role_column=role_column)
    from_landing = pl.col(LANDED_AT) + pl.duration(days=days.clip(upper_bound=MAX_TTL_DAYS))
    held = pl.min_horizontal(from_landing, pl.lit(LATEST_EXPIRY))
    dtype = frame.schema["expires_at"]
    return (
        frame.join(per_key, on=list(keys), how="left")
        .with_columns(pl.max_horizontal(pl.col("expires_at"), held.cast(dtype)).alias("expires_at"))
        .drop(LANDED_AT)
    )


def retention_clock(ts_column: str, landed_column: str = "ingested_at") -> pl.Expr:
    """The instant a raw event's TTL counts from: the later of when it happened and when it
    landed."""
    return pl.max_horizontal(pl.col(ts_column), pl.col(landed_column))


@dataclass(frozen=True)
class LateHistory:
    """Turns that were older than their retention period when ctxdb got them (kept that period
    from their landing: `held_from_landing`)."""

    turns: int
    total: int
    oldest: datetime | None = None
    kept_until: datetime | None = None
    days: int = 0

    def notice(self, verb: str = "landed") -> str | None:
        """The one-line warning for a CLI or a run log; None when no turn is late."""
        if not self.turns or self.oldest is None or self.kept_until is None:
            return None
        return (
            f"warning: {self.turns} of {self.total} turns {verb} are older than the"
            f" {self.days}-day retention period (oldest {self.oldest:%Y-%m-%d}); each is kept"
            f" {self.days} days from when ctxdb landed it (until about"
            f" {self.kept_until:%Y-%m-%d}), not from when it happened (docs/operations.md,"
            " Retention)"
        )


def late_history(turns: pl.DataFrame, settings: Settings) -> LateHistory:
    """Which of `turns` (tenant, app, ts: when the turn ended, landed_at: when ctxdb got it)
    were past their TTL when they landed."""
    if turns.is_empty():
        return LateHistory(0, 0)
    days = ttl_days_expr(settings.retention.rules, settings.retention.days, role_column=None)
    scored = turns.with_columns(days.alias("ttl_days"))
    late = scored.filter(pl.col("ts") + pl.duration(days=pl.col("ttl_days")) <= pl.col(LANDED_AT))
    if late.is_empty():
        return LateHistory(0, turns.height)
    longest = int(late["ttl_days"].max())  # type: ignore[arg-type]
    kept = late.select((pl.col(LANDED_AT) + pl.duration(days=pl.col("ttl_days"))).max()).item()
    return LateHistory(late.height, turns.height, late["ts"].min(), kept, longest)  # type: ignore[arg-type]


def late_landed(
    store: DeltaStore, settings: Settings, after: int, upto: int | None = None
) -> LateHistory:
    """`late_history` of the turns with events landed in batches `after` < `landed_version` <=
    `upto` (no upper bound when None)."""
    if store.table(RAW_TURN_EVENTS) is None:
        return LateHistory(0, 0)
    batch = pl.col("landed_version") > after
    if upto is not None:
        batch = batch & (pl.col("landed_version") <= upto)
    turns = (
        store.scan(RAW_TURN_EVENTS)
        .filter(batch)
        .group_by(TURN_KEY)
        .agg(
            pl.col("tenant").first(),
            pl.col("app").first(),
            pl.col("occurred_at").max().alias("ts"),
            pl.col("ingested_at").max().alias(LANDED_AT),
        )
        .collect()
    )
    return late_history(turns, settings)


def last_landed_version(store: DeltaStore) -> int:
    """The highest `landed_version` in `raw_turn_events` (-1 when none)."""
    if store.table(RAW_TURN_EVENTS) is None:
        return -1
    top = store.scan(RAW_TURN_EVENTS).select(pl.col("landed_version").max()).collect().item()
    return -1 if top is None else int(top)
