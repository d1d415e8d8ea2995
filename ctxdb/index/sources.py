"""The Delta sources of each index kind: which tables feed it and how documents are built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from ctxdb.embedding.cache import read_vectors
from ctxdb.embedding.stage import OK
from ctxdb.index.documents import FINGERPRINT, complete_rows, row_base, turn_base, with_stems
from ctxdb.index.mappings import ROWS, TURNS
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
    TIMELINES_SCHEMA,
    TURN_CATALOG,
    TURN_CATALOG_SCHEMA,
    TURN_LOGS,
    TURN_LOGS_SCHEMA,
)

Versions = dict[str, int | None]


@dataclass(frozen=True)
class Source:
    """How one index kind is built from Delta: its tables, base frame and completion step."""

    kind: str
    tables: tuple[str, ...]
    base: Callable[[Mapping[str, pl.DataFrame], str], pl.DataFrame]
    complete: Callable[[DeltaStore, pl.DataFrame, str], pl.DataFrame]
    schemas: Mapping[str, pa.Schema]
    json_columns: tuple[str, ...] = ()
    finish: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    scope: tuple[str, ...] = ()
    """Columns of every source table such that a document depends only on the rows sharing its
    scope value (see `ctxdb.index.changed_docs`)."""
    unique_scope: bool = False
    """Whether every source table holds at most one row per scope value."""
    partition: str = "conversation_id"
    """A column of every source table such that a document depends only on rows sharing its
    value: a full sync builds its documents in parts by a hash of it."""


def _rows_base(frames: Mapping[str, pl.DataFrame], model_id: str) -> pl.DataFrame:
    return row_base(frames[ROLE_ROWS], frames[ROW_EMBEDDINGS], model_id)


def _rows_complete(store: DeltaStore, base: pl.DataFrame, model_id: str) -> pl.DataFrame:
    hashes = base.filter(pl.col("embedding_status") == OK).get_column("text_hash").unique()
    return complete_rows(base, read_vectors(store, model_id, hashes))


ROWS_SOURCE = Source(
    kind=ROWS,
    tables=(ROLE_ROWS, ROW_EMBEDDINGS),
    base=_rows_base,
    complete=_rows_complete,
    finish=with_stems,
    schemas={ROLE_ROWS: ROLE_ROWS_SCHEMA, ROW_EMBEDDINGS: ROW_EMBEDDINGS_SCHEMA},
    scope=("row_id",),
    unique_scope=True,
    partition="row_id",
)


def _turns_base(frames: Mapping[str, pl.DataFrame], model_id: str) -> pl.DataFrame:
    return turn_base(frames[TURN_LOGS], frames[TURN_CATALOG], frames[CONVERSATION_TIMELINES])


def _turns_complete(store: DeltaStore, base: pl.DataFrame, model_id: str) -> pl.DataFrame:
    return base.drop(FINGERPRINT)


TURNS_SOURCE = Source(
    kind=TURNS,
    tables=(TURN_LOGS, TURN_CATALOG, CONVERSATION_TIMELINES),
    base=_turns_base,
    complete=_turns_complete,
    schemas={
        TURN_LOGS: TURN_LOGS_SCHEMA,
        TURN_CATALOG: TURN_CATALOG_SCHEMA,
        CONVERSATION_TIMELINES: TIMELINES_SCHEMA,
    },
    json_columns=("payload",),
    scope=("tenant", "app", "agent", "user_id", "conversation_id"),
)

SOURCES: dict[str, Source] = {ROWS: ROWS_SOURCE, TURNS: TURNS_SOURCE}
