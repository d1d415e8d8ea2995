"""Tombstones of erased conversations: a hash of each id, so erasure keeps no identifier."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache

import polars as pl

from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import PURGED_CONVERSATIONS, PURGED_CONVERSATIONS_SCHEMA
from ctxdb.text import text_hash


def conversation_key(conversation_id: str) -> str:
    """The tombstone key of a conversation (SHA-256 of its id)."""
    return text_hash(conversation_id)


def _keyed(conversation_ids: pl.Series) -> pl.DataFrame:
    # SHA-256 has no polars expression; it runs once per distinct conversation id.
    ids = conversation_ids.unique().drop_nulls()
    return pl.DataFrame({"conversation_id": ids}).with_columns(
        pl.col("conversation_id")
        .map_elements(conversation_key, return_dtype=pl.String)
        .alias("conversation_key")
    )


def record(store: DeltaStore, conversation_ids: pl.Series, at: datetime) -> int:
    """Tombstone the given conversations (idempotent); returns how many were new."""
    frame = _keyed(conversation_ids).select(
        "conversation_key", pl.lit(at).cast(pl.Datetime("us", "UTC")).alias("purged_at")
    )
    return store.insert_new(
        PURGED_CONVERSATIONS, frame, keys=["conversation_key"], schema=PURGED_CONVERSATIONS_SCHEMA
    )


def purged_among(store: DeltaStore, conversation_ids: pl.Series) -> pl.DataFrame:
    """Those of `conversation_ids` that were erased, as a one-column `conversation_id` frame."""
    empty = pl.DataFrame(schema={"conversation_id": pl.String})
    if conversation_ids.is_empty() or not store.exists(PURGED_CONVERSATIONS):
        return empty
    keys = store.scan(PURGED_CONVERSATIONS).select("conversation_key").collect()
    if keys.is_empty():
        return empty
    return (
        _keyed(conversation_ids)
        .join(keys, on="conversation_key", how="semi")
        .select("conversation_id")
    )


def erased(store: DeltaStore) -> Callable[[str], bool]:
    """Whether a conversation was erased, from the tombstones as they are now (read once; an
    importer asks it of every event)."""
    if not store.exists(PURGED_CONVERSATIONS):
        return lambda _: False
    keys = set(store.scan(PURGED_CONVERSATIONS).select("conversation_key").collect().to_series())
    return cache(lambda conversation_id: conversation_key(conversation_id) in keys)
