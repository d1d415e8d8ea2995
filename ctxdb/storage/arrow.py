"""Arrow tables as polars frames, typed as frames."""

from __future__ import annotations

from typing import cast

import polars as pl
import pyarrow as pa


def frame_of(table: pa.Table) -> pl.DataFrame:
    """`pl.from_arrow(table)`: zero-copy, not rechunked. polars types `from_arrow` as returning
    a frame or a series (it takes arrays too); an Arrow table always gives a frame."""
    return cast(pl.DataFrame, pl.from_arrow(table))
