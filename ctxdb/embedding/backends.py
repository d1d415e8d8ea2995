"""The configured embedder: torch (sentence-transformers) or ONNX Runtime fp32 / int8."""

from __future__ import annotations

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.runtime import BACKENDS, OnnxEmbedder
from ctxdb.settings import EmbeddingSettings


def make_embedder(
    settings: EmbeddingSettings, *, model_name: str | None = None, batch_size: int | None = None
) -> SentenceTransformerEmbedder | OnnxEmbedder:
    """The embedder `settings.backend` names (CTXDB_EMBEDDING_BACKEND), loaded on first use."""
    if settings.backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {settings.backend!r}; expected {BACKENDS}")
    name = model_name or settings.model
    size = batch_size or settings.batch_size
    if settings.backend == "torch":
        return SentenceTransformerEmbedder(
            name, batch_size=size, device=settings.device, threads=settings.threads
        )
    return OnnxEmbedder(
        name,
        quantize=settings.backend == "onnx-int8",
        batch_size=size,
        threads=settings.threads,
        cache_dir=settings.onnx_cache_dir,
    )
