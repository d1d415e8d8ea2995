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


def build_resources(settings: Settings) -> dict[str, Any]:
    return {
        "delta": DeltaResource.from_settings(settings),
        "es": ElasticsearchResource.from_settings(settings.elasticsearch),
        "embedder": EmbedderResource.from_settings(settings.embedding),
        MAPPING_KEYS: MappingKeyIOManager(),
    }
