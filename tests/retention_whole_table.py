"""The retention sweep's cache comparison as it was before issue 26 item 3, every referenced hash
read at once: the oracle of tests/test_retention_streaming.py and the baseline
bench/bench_retention_streaming.py measures."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import EMBEDDINGS, ROLE_ROWS


def whole_table_stale(store: DeltaStore, before: datetime) -> pl.DataFrame:
    """The cache entries older than `before` whose hash no role row references, from whole
    tables (the computation the cache prune in parts replaces)."""
    referenced = store.scan(ROLE_ROWS).select("text_hash").unique().collect()
    return (
        store.scan(EMBEDDINGS)
        .filter(pl.col("created_at") < before)
        .select("model_id", "text_hash")
        .collect()
        .join(referenced, on="text_hash", how="anti")
    )
