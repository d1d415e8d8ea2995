"""The TTL policy applied at derivation time: each derived row's `expires_at` from the rules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import polars as pl

from ctxdb.settings import RetentionRule, Settings

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
