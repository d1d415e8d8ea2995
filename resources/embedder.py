"""Dagster resource for the embedding model (loaded lazily, once per process)."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import PrivateAttr

from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.model import Embedder
from ctxdb.storage.delta import DeltaStore
from resources.settings import SettingsResource

DISTRIBUTED_PREFILL_MIN_TEXTS = 2000
"""The embedding prefill's threshold where steps run on workers (about 30 s of one core's
embedding: more than a step's fixed start)."""


class EmbedderResource(ConfigurableResource):
    """The model of the settings' `embedding` group (all-MiniLM-L6-v2 by default). `distributed`:
    the code location's executor sends steps to workers (Celery, Kubernetes), where the embedding
    prefill pays off when the settings give no threshold of their own."""

    settings: SettingsResource
    distributed: bool = False

    _embedders: dict[str, Embedder] = PrivateAttr(default_factory=dict)

    def embedder(self, store: DeltaStore, model_name: str | None = None) -> Embedder:
        """The run's embedder of `model_name` (default: the configured model) for the memory in
        `store`, whose vectors decide the `auto` backend; weights load on first use and are
        shared within the process."""
        settings = self.settings.get().embedding
        name = model_name or settings.model
        if name not in self._embedders:
            self._embedders[name] = memory_embedder(settings, store, model_name=name)
        return self._embedders[name]

    def prefill_threshold(self) -> int:
        """Texts to embed from which the prefill fans out (0: never)."""
        given = self.settings.get().embedding.prefill_min_texts
        if given is not None:
            return given
        return DISTRIBUTED_PREFILL_MIN_TEXTS if self.distributed else 0

    def model_id(self, store: DeltaStore) -> str:
        """The id vectors are stored under: the model name plus the backend that produced them
        (the torch fallback's id when the ONNX backend could not be had)."""
        return self.embedder(store).model_id
