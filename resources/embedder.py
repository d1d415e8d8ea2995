"""Dagster resource for the embedding model (loaded lazily, once per process)."""

from __future__ import annotations

from dagster import ConfigurableResource

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.settings import get_settings


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 by default; unset fields fall back to the settings object."""

    model_name: str | None = None
    batch_size: int | None = None
    device: str | None = None

    def embedder(self, model_name: str | None = None) -> SentenceTransformerEmbedder:
        """The embedder (model weights load on first use and are shared within the process)."""
        settings = get_settings()
        return SentenceTransformerEmbedder(
            model_name=model_name or self.model_name or settings.embedding.model,
            batch_size=self.batch_size or settings.embedding.batch_size,
            device=self.device or settings.embedding.device,
        )

    def model_id(self) -> str:
        return self.model_name or get_settings().embedding.model
