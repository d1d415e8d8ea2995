"""The Delta sources of each index kind: which tables feed it and how documents are built."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ctxdb.delta import DeltaStore
from ctxdb.embedding import OK, read_vectors
from ctxdb.es.mappings import ROWS
from ctxdb.index.documents import complete_rows, row_base
from ctxdb.index.incremental import Source
from ctxdb.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA, ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA


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
    schemas={ROLE_ROWS: ROLE_ROWS_SCHEMA, ROW_EMBEDDINGS: ROW_EMBEDDINGS_SCHEMA},
)

SOURCES: dict[str, Source] = {ROWS: ROWS_SOURCE}
