"""Dagster resource for the embedding model (loaded lazily, once per process)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.settings import get_settings


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 by default. Unset fields keep the settings object's value
    (CTXDB_EMBEDDING_MODEL, CTXDB_EMBEDDING_BATCH_SIZE, CTXDB_EMBEDDING_DEVICE)."""

    model_name: str | None = None
    batch_size: int | None = None
    device: str | None = None

    _embedder: SentenceTransformerEmbedder | None = PrivateAttr(default=None)

    def embedder(self, model_name: str | None = None) -> SentenceTransformerEmbedder:
        """The run's embedder (weights load on first use and are shared within the process);
        another `model_name` (a reindex to a new model) gets an embedder of its own."""
        if model_name is not None and model_name != self.model_id():
            return self._build(model_name)
        if self._embedder is None:
            self._embedder = self._build(self.model_id())
        return self._embedder

    def model_id(self) -> str:
        return self.model_name or get_settings().embedding.model

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.embedder()

    def _build(self, model_name: str) -> SentenceTransformerEmbedder:
        settings = get_settings()
        return SentenceTransformerEmbedder(
            model_name=model_name,
            batch_size=self.batch_size or settings.embedding.batch_size,
            device=self.device or settings.embedding.device,
        )
