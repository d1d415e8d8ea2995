"""Small helpers to shape polars frames to the Arrow schemas in ctxdb.storage.tables."""

from __future__ import annotations

import polars as pl
import pyarrow as pa


def empty(schema: pa.Schema) -> pl.DataFrame:
    """An empty frame with exactly `schema`."""
    return pl.from_arrow(schema.empty_table())


def frame(data: pl.DataFrame, schema: pa.Schema) -> pl.DataFrame:
    """`data` with the columns, order and types of `schema` (extra columns dropped)."""
    target = empty(schema).schema
    return data.select([pl.col(name).cast(dtype) for name, dtype in target.items()])


def from_rows(rows: list[dict], schema: pa.Schema) -> pl.DataFrame:
    """A frame from row dicts whose keys are columns of `schema`, typed without inference."""
    known = empty(schema).schema
    return pl.DataFrame(rows, schema={name: known[name] for name in rows[0]})
