"""Dagster resource for the embedding model (loaded lazily, once per process)."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import PrivateAttr

from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.model import Embedder
from ctxdb.settings import EmbeddingSettings, get_settings
from ctxdb.storage.delta import DeltaStore


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 by default: the `embedding` settings group's model, batch size, device,
    backend and prefill threshold, filled by `from_settings` (the code location does, when it
    loads). Unset fields keep the process settings' value, as do the group's other fields
    (threads, ONNX cache)."""

    model_name: str | None = None
    batch_size: int | None = None
    device: str | None = None
    backend: str | None = None
    prefill_min_texts: int | None = None

    _embedders: dict[str, Embedder] = PrivateAttr(
        default_factory=dict
    )

    @classmethod
    def from_settings(
        cls, settings: EmbeddingSettings, prefill_default: int = 0
    ) -> EmbedderResource:
        """The group's values; `prefill_default` is the prefill threshold when the group sets
        none (the code location's choice: `pipelines.resources`)."""
        prefill = settings.prefill_min_texts
        return cls(
            model_name=settings.model,
            batch_size=settings.batch_size,
            device=settings.device,
            backend=settings.backend,
            prefill_min_texts=prefill_default if prefill is None else prefill,
        )

    def embedder(
        self, store: DeltaStore, model_name: str | None = None
    ) -> Embedder:
        """The run's embedder of `model_name` (default: the configured model) for the memory in
        `store`, whose vectors decide the `auto` backend; weights load on first use and are
        shared within the process."""
        name = model_name or self.configured_model()
        if name not in self._embedders:
            self._embedders[name] = self._build(name, store)
        return self._embedders[name]

    def prefill_threshold(self) -> int:
        """Texts to embed from which the prefill fans out (0: never, also when unset)."""
        return self.prefill_min_texts or 0

    def configured_model(self) -> str:
        return self.model_name or get_settings().embedding.model

    def model_id(self, store: DeltaStore) -> str:
        """The id vectors are stored under: the model name plus the backend that produced them
        (the torch fallback's id when the ONNX backend could not be had)."""
        return self.embedder(store).model_id

    def _build(
        self, model_name: str, store: DeltaStore
    ) -> Embedder:
        settings = get_settings().embedding
        overrides = {"device": self.device, "backend": self.backend}
        settings = settings.model_copy(update={k: v for k, v in overrides.items() if v})
        return memory_embedder(settings, store, model_name=model_name, batch_size=self.batch_size)
