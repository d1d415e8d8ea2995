"""The resource set every asset and job runs with, built from the settings in one place.

`build_resources(settings)` runs when the code location's Definitions are built (never at
import): each resource's typed fields come from its settings group (`from_settings`), so the
Dagster UI shows the configuration a run gets, and the Elasticsearch connection has one path:
`settings.elasticsearch` -> `ElasticsearchResource` -> the client. Secrets are bound as `EnvVar`s,
resolved when a run starts and shown only by name.
"""

from __future__ import annotations

from typing import Any

from ctxdb.settings import Settings
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource
from resources.mapping_keys import MAPPING_KEYS, MappingKeyIOManager

DISTRIBUTED_PREFILL_MIN_TEXTS = 2000
"""The embedding prefill's threshold where steps run on workers (about 30 s of one core's
embedding: more than a step's fixed start)."""


def build_resources(settings: Settings, distributed: bool = False) -> dict[str, Any]:
    """The resources of a code location; `distributed` when its executor sends steps to workers
    (Celery, Kubernetes), where the embedding prefill pays off by default."""
    prefill = DISTRIBUTED_PREFILL_MIN_TEXTS if distributed else 0
    return {
        "delta": DeltaResource.from_settings(settings),
        "es": ElasticsearchResource.from_settings(settings.elasticsearch),
        "embedder": EmbedderResource.from_settings(settings.embedding, prefill_default=prefill),
        MAPPING_KEYS: MappingKeyIOManager(),
    }
