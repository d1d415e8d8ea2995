"""Poison isolation for derivation: a conversation whose derivation raises is set aside and
recorded in `derive_failures`, and every other conversation is derived.

Derivation runs on the whole batch first; only when that raises are the conversations split in
halves until each failing one stands alone (a few extra passes over small parts). A failure of
every conversation of a batch of several is not poison but a fault of the run (a bug, a missing
dependency): it is raised. Storage and memory errors are always raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import polars as pl

from ctxdb.storage.delta import DeltaStore, sql_in
from ctxdb.storage.errors import StorageError
from ctxdb.storage.tables import DERIVE_FAILURES, DERIVE_FAILURES_SCHEMA

log = logging.getLogger(__name__)

T = TypeVar("T")
ERROR_CHARS = 2_000
"""Longest error message kept (one line)."""
NOT_POISON = (StorageError, OSError, MemoryError)
"""Errors of the run, not of one conversation's data: never isolated."""


@dataclass(frozen=True)
class Failure:
    """One conversation whose derivation raised."""

    conversation_id: str
    error: Exception


def isolate(raw: pl.DataFrame, build: Callable[[pl.DataFrame], T]) -> tuple[list[T], list[Failure]]:
    """`build` over the events of `raw`, in as few parts as its failures allow: the results of
    the parts that built, and the conversations that raised on their own. Raises when every
    conversation of several failed."""
    built, failed = _split(raw, build)
    if failed and not built and len(failed) > 1:
        raise failed[0].error
    return built, failed


def _split(raw: pl.DataFrame, build: Callable[[pl.DataFrame], T]) -> tuple[list[T], list[Failure]]:
    try:
        return [build(raw)], []
    except NOT_POISON:
        raise
    except Exception as exc:  # noqa: BLE001  (recorded per conversation, or raised by isolate)
        conversations = raw["conversation_id"].unique(maintain_order=True)
        if conversations.len() == 1:
            log.warning("derivation of conversation %s failed", conversations[0], exc_info=exc)
            return [], [Failure(conversations[0], exc)]
    half = conversations.len() // 2
    built: list[T] = []
    failed: list[Failure] = []
    for part in (conversations[:half], conversations[half:]):
        events = raw.filter(pl.col("conversation_id").is_in(part.implode()))
        more_built, more_failed = _split(events, build)
        built += more_built
        failed += more_failed
    return built, failed


def failure_rows(raw: pl.DataFrame, failed: list[Failure], now: datetime) -> pl.DataFrame:
    """`derive_failures` rows: each failed conversation's owner, error and newest landed version."""
    errors = pl.DataFrame(
        {
            "conversation_id": [f.conversation_id for f in failed],
            "error_type": [type(f.error).__name__ for f in failed],
            "error": [_one_line(f.error) for f in failed],
        },
        schema={"conversation_id": pl.String, "error_type": pl.String, "error": pl.String},
    )
    owners = raw.group_by("conversation_id").agg(
        pl.col("tenant").first(),
        pl.col("app").first(),
        pl.col("user_id").first(),
        pl.col("landed_version").max(),
    )
    return (
        errors.join(owners, on="conversation_id", how="left")
        .with_columns(pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("failed_at"))
        .select(DERIVE_FAILURES_SCHEMA.names)
    )


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:ERROR_CHARS]


def record_failures(store: DeltaStore, rows: pl.DataFrame) -> None:
    """Keep the latest failure of each conversation."""
    if not rows.is_empty():
        store.upsert(DERIVE_FAILURES, rows, ["conversation_id"], DERIVE_FAILURES_SCHEMA)


def clear_failures(store: DeltaStore, conversations: list[str]) -> int:
    """Remove the entries of conversations that derived now."""
    if not conversations or not store.exists(DERIVE_FAILURES):
        return 0
    present = store.read(DERIVE_FAILURES, DERIVE_FAILURES_SCHEMA, columns=["conversation_id"])
    fixed = present.filter(pl.col("conversation_id").is_in(conversations))
    if fixed.is_empty():
        return 0
    return store.delete(DERIVE_FAILURES, sql_in("conversation_id", fixed["conversation_id"]))
