"""Arrow tables as polars frames, typed as frames."""

from __future__ import annotations

from typing import cast

import polars as pl
import pyarrow as pa


def frame_of(table: pa.Table) -> pl.DataFrame:
    """`pl.from_arrow(table)`: zero-copy, not rechunked. polars types `from_arrow` as returning
    a frame or a series (it takes arrays too); an Arrow table always gives a frame."""
    return cast(pl.DataFrame, pl.from_arrow(table))


def owned(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every string column copied into buffers of its own.

    The native landing scanner returns string views into the bytes of the whole landing file, and
    polars keeps the views (select, unique and cast share the buffers), so a few ids kept from a
    wave would keep all of its files alive. Concatenating with an empty string is the one
    expression polars computes into new buffers; polars has no public call that compacts views.
    """
    strings = [name for name, kind in frame.schema.items() if kind == pl.String]
    return frame.with_columns(
        pl.concat_str(pl.col(name), pl.lit("")).alias(name) for name in strings
    )
