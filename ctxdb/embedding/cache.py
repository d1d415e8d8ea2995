"""The embeddings cache: vectors in the `embeddings` Delta table keyed by (model id, text hash).

Identical texts are embedded once per model; vectors are appended in chunks so an interrupted run
keeps its progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import polars as pl

from ctxdb.embedding.model import Embedder, encode_with_retry
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import EMBEDDINGS, EMBEDDINGS_SCHEMA

log = logging.getLogger(__name__)

BATCHES_PER_CALL = 8  # batches handed to the embedder at once, which orders them by token length


def cached_hashes(store: DeltaStore, model_id: str, hashes: pl.Series) -> pl.Series:
    """The subset of `hashes` already in the embeddings cache for `model_id`."""
    if not store.exists(EMBEDDINGS) or hashes.is_empty():
        return pl.Series("text_hash", [], dtype=pl.String)
    return (
        store.scan(EMBEDDINGS)
        .filter((pl.col("model_id") == model_id) & pl.col("text_hash").is_in(hashes.implode()))
        .select("text_hash")
        .unique()
        .collect()
        .get_column("text_hash")
    )


def read_vectors(store: DeltaStore, model_id: str, hashes: pl.Series | None = None) -> pl.DataFrame:
    """(text_hash, vector) for `model_id`, optionally limited to `hashes`."""
    if not store.exists(EMBEDDINGS):
        return pl.DataFrame(schema={"text_hash": pl.String, "vector": pl.List(pl.Float32)})
    scan = store.scan(EMBEDDINGS).filter(pl.col("model_id") == model_id)
    if hashes is not None:
        scan = scan.filter(pl.col("text_hash").is_in(hashes.implode()))
    return scan.select("text_hash", "vector").unique("text_hash", keep="first").collect()


class _Progress:
    """Logs rows done / total and rows/s at most every `every_s` seconds."""

    def __init__(self, total: int, every_s: float, sink: Callable[[str], None]) -> None:
        self.total, self.every_s, self.sink = total, every_s, sink
        self.start = self.last = time.monotonic()
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done == self.total:
            rate = self.done / max(now - self.start, 1e-9)
            self.sink(f"embedded {self.done}/{self.total} texts ({rate:.1f} rows/s)")
            self.last = now


def embed_texts(
    store: DeltaStore,
    embedder: Embedder,
    texts: pl.DataFrame,
    *,
    batch_size: int,
    flush_rows: int = 4096,
    progress_every_s: float = 10.0,
    progress: Callable[[str], None] = log.info,
) -> dict[str, str]:
    """Embed unique (text_hash, text) pairs into the cache; returns {text_hash: error} failures.

    Texts are sorted by length and handed to the embedder `BATCHES_PER_CALL` batches at a time,
    so it can order them by token length and batches pad little; vectors are appended to the
    cache every `flush_rows` so an interrupted run keeps its progress.
    """
    ordered = texts.sort(pl.col("text").str.len_chars())
    hashes, values = ordered.get_column("text_hash").to_list(), ordered.get_column("text").to_list()
    tracker = _Progress(len(values), progress_every_s, progress)
    failures: dict[str, str] = {}
    pending_hashes: list[str] = []
    pending_vectors: list[np.ndarray] = []

    def flush() -> None:
        if not pending_hashes:
            return
        now = datetime.now(UTC)
        frame = pl.DataFrame(
            {
                "model_id": [embedder.model_id] * len(pending_hashes),
                "text_hash": pending_hashes,
                "vector": pl.Series(np.vstack(pending_vectors)).cast(pl.List(pl.Float32)),
                "created_at": [now] * len(pending_hashes),
            }
        )
        store.append(EMBEDDINGS, frame, EMBEDDINGS_SCHEMA)
        pending_hashes.clear()
        pending_vectors.clear()

    step = batch_size * BATCHES_PER_CALL
    for start in range(0, len(values), step):
        batch_hashes = hashes[start : start + step]
        vectors, errors = encode_with_retry(embedder, values[start : start + step], batch_size)
        for h, vector, error in zip(batch_hashes, vectors, errors, strict=True):
            if error is None:
                pending_hashes.append(h)
                pending_vectors.append(vector)
            else:
                failures[h] = error
        tracker.add(len(batch_hashes))
        if len(pending_hashes) >= flush_rows:
            flush()
    flush()
    return failures
