"""Small helpers to shape polars frames to the Arrow schemas in ctxdb.storage.tables."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import pyarrow as pa

from ctxdb.storage.arrow import frame_of


def empty(schema: pa.Schema) -> pl.DataFrame:
    """An empty frame with exactly `schema`."""
    return frame_of(schema.empty_table())


def frame(data: pl.DataFrame, schema: pa.Schema) -> pl.DataFrame:
    """`data` with the columns, order and types of `schema` (extra columns dropped)."""
    target = empty(schema).schema
    return data.select([pl.col(name).cast(dtype) for name, dtype in target.items()])


def from_columns(
    columns: dict[str, list], schema: pa.Schema, micros: Sequence[str] = ()
) -> pl.DataFrame:
    """A frame from column lists named as in `schema`, typed without inference; the `micros`
    columns hold epoch microseconds and become the schema's UTC timestamps. List columns are
    built flat through Arrow (polars makes a Series per element of a Python list of lists)."""
    known = empty(schema).schema
    lists = {
        name: _list_column(values) for name, values in columns.items() if _is_list(known[name])
    }
    types = {name: pl.Int64 if name in micros else known[name] for name in columns}
    data = pl.DataFrame(
        [
            lists[name].alias(name) if name in lists else pl.Series(name, values, types[name])
            for name, values in columns.items()
        ]
    )
    return data.with_columns(pl.col(name).cast(known[name]) for name in micros)


def _is_list(dtype: pl.DataType) -> bool:
    return isinstance(dtype, pl.List)


def _list_column(values: list[list[str]]) -> pl.Series:
    """A `list[str]` column from Python lists, in one Arrow array."""
    offsets = [0]
    for value in values:
        offsets.append(offsets[-1] + len(value))
    flat = pa.array([item for value in values for item in value], pa.string())
    return pl.Series(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat))
