"""What a pack is built from, read from Delta inside the principal's identity: the live turns
(TurnLog accounting, catalog texts, titles) of one conversation, one project (`project_filter`)
or the whole user, and the steps rows of a few of them. Nothing outside `user_id` (and `tenant`
when the principal has one) is read; expired rows (`expires_at <= now`) are left out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import polars as pl

from ctxdb.contract.identity import Principal
from ctxdb.contract.projects import agent_for_project, looks_like_folder
from ctxdb.pack.models import ContextRequest
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    TURN_CATALOG,
    TURN_LOGS,
)

KEY = ["tenant", "app", "agent", "user_id", "conversation_id"]
TURN_COLUMNS = [
    *KEY,
    "turn_id",
    "started_at",
    "ended_at",
    "status",
    "error_type",
    "title",
    "first_user_text",
    "last_assistant_text",
    "conversation_title",
    "expires_at",
]


def project_filter(project: str) -> pl.Expr:
    """The rows of a project: a folder matches the rows recorded with it as `project`, and rows
    recorded without a project (before the column existed, or a host that gives none) under its
    agent id (`agent_for_project`); anything else is an agent id."""
    if not looks_like_folder(project):
        return pl.col("agent") == project
    agent = (pl.col("agent") == agent_for_project(project)) & pl.col("project").is_null()
    return (pl.col("project") == project) | agent


def _mine(principal: Principal, request: ContextRequest, now: datetime) -> pl.Expr:
    """The identity boundary, liveness and the request's conversation, as one filter (the
    project is applied to TurnLogs alone: `read_turns`)."""
    keep = (pl.col("user_id") == principal.user_id) & (pl.col("expires_at") > now)
    if principal.tenant:
        keep &= pl.col("tenant") == principal.tenant
    if request.conversation_id is not None:
        keep &= pl.col("conversation_id") == request.conversation_id
    return keep


def _scan(
    store: DeltaStore,
    table: str,
    where: pl.Expr,
    columns: Sequence[str],
    stamp: str = "updated_at",
) -> pl.DataFrame:
    """`columns` and `stamp` (renamed `updated_at`) of the rows of `table` matching `where`
    (empty when the table is missing); a column the table predates is null."""
    if store.table(table) is None:
        return pl.DataFrame()
    with store.guarded(table, "open"):
        lazy = store.scan(table)
        have = set(lazy.collect_schema().names())
        if "project" not in have:  # derived before the column existed
            lazy = lazy.with_columns(pl.lit(None, pl.String).alias("project"))
            have.add("project")
        lazy = lazy.filter(where)
        wanted = [pl.col(c) if c in have else pl.lit(None, pl.String).alias(c) for c in columns]
        return lazy.select(*wanted, pl.col(stamp).alias("updated_at")).collect()


def read_turns(
    store: DeltaStore, principal: Principal, request: ContextRequest, now: datetime
) -> pl.DataFrame:
    """The live turns in scope, one row each (TURN_COLUMNS), oldest first."""
    where = _mine(principal, request, now)
    scoped = where if request.project is None else where & project_filter(request.project)
    logs = _scan(
        store,
        TURN_LOGS,
        scoped,
        [*KEY, "turn_id", "started_at", "ended_at", "status", "error_type", "title", "expires_at"],
    )
    if logs.is_empty():
        return pl.DataFrame(schema={c: pl.String for c in TURN_COLUMNS})
    logs = logs.sort("updated_at").unique([*KEY, "turn_id"], keep="last").drop("updated_at")
    where &= pl.col("conversation_id").is_in(logs["conversation_id"].unique().to_list())
    catalog = _scan(
        store, TURN_CATALOG, where, [*KEY, "turn_id", "first_user_text", "last_assistant_text"]
    )
    if not catalog.is_empty():
        catalog = catalog.sort("updated_at").unique([*KEY, "turn_id"], keep="last")
        logs = logs.join(catalog.drop("updated_at"), on=[*KEY, "turn_id"], how="left")
    timelines = _scan(store, CONVERSATION_TIMELINES, where, [*KEY, "title"])
    if not timelines.is_empty():
        timelines = timelines.sort("updated_at").unique(KEY, keep="last").drop("updated_at")
        logs = logs.join(timelines.rename({"title": "conversation_title"}), on=KEY, how="left")
    logs = logs.with_columns(
        pl.lit(None, pl.String).alias(c) for c in TURN_COLUMNS if c not in logs.columns
    )
    return logs.select(TURN_COLUMNS).sort(["started_at", "conversation_id", "turn_id"])


def read_steps(
    store: DeltaStore,
    principal: Principal,
    request: ContextRequest,
    now: datetime,
    turns: Sequence[tuple[str, str]],
) -> tuple[dict[tuple[str, str], str], datetime | None]:
    """The steps-row text of each of `turns` (conversation id, turn id) in scope, and the
    earliest expiry among the rows read (None: none read)."""
    if not turns:
        return {}, None
    wanted = set(turns)
    where = (
        _mine(principal, request, now)
        & (pl.col("target") == "steps")
        & pl.col("conversation_id").is_in(sorted({c for c, _ in wanted}))
        & pl.col("turn_id").is_in(sorted({t for _, t in wanted}))
    )
    columns = ["conversation_id", "turn_id", "text", "ordinal", "expires_at"]
    rows = _scan(store, ROLE_ROWS, where, columns, "derived_at")
    if rows.is_empty():
        return {}, None
    rows = rows.sort(["conversation_id", "turn_id", "ordinal", "updated_at"])
    texts = {
        key: text
        for *key_parts, text in rows.select("conversation_id", "turn_id", "text").iter_rows()
        if (key := (key_parts[0], key_parts[1])) in wanted
    }
    return texts, rows["expires_at"].min()  # type: ignore[return-value]
