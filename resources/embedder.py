"""Dagster resource for the embedding model (loaded lazily, once per process)."""

from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ctxdb.embedding.backends import make_embedder
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.runtime import OnnxEmbedder
from ctxdb.settings import get_settings


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 by default. Unset fields keep the settings object's value
    (CTXDB_EMBEDDING_MODEL, CTXDB_EMBEDDING_BATCH_SIZE, CTXDB_EMBEDDING_DEVICE,
    CTXDB_EMBEDDING_BACKEND)."""

    model_name: str | None = None
    batch_size: int | None = None
    device: str | None = None
    backend: str | None = None

    _embedder: SentenceTransformerEmbedder | OnnxEmbedder | None = PrivateAttr(default=None)

    def embedder(self, model_name: str | None = None) -> SentenceTransformerEmbedder | OnnxEmbedder:
        """The run's embedder (weights load on first use and are shared within the process);
        another `model_name` (a reindex to a new model) gets an embedder of its own."""
        if model_name is not None and model_name != self.configured_model():
            return self._build(model_name)
        if self._embedder is None:
            self._embedder = self._build(self.configured_model())
        return self._embedder

    def configured_model(self) -> str:
        return self.model_name or get_settings().embedding.model

    def model_id(self) -> str:
        """The id vectors are stored under: the model name plus the backend that produced them
        (the torch fallback's id when the ONNX backend could not be had)."""
        return self.embedder().model_id

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.embedder()

    def _build(self, model_name: str) -> SentenceTransformerEmbedder | OnnxEmbedder:
        settings = get_settings().embedding
        overrides = {"device": self.device, "backend": self.backend}
        settings = settings.model_copy(update={k: v for k, v in overrides.items() if v})
        return make_embedder(settings, model_name=model_name, batch_size=self.batch_size)
