"""The resource set every asset and job runs with, built from the settings in one place.

`build_resources(settings)` runs when the code location's Definitions are built (never at
import): the `settings` resource pins the loaded settings (`SettingsResource.from_settings`:
every field that differs from its default, secrets left to the environment of the run), and
every other resource takes its values from it, so no two resources can disagree on a path, the
index prefix or the model.
"""

from __future__ import annotations

from typing import Any

from ctxdb.settings import Settings
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource
from resources.mapping_keys import MAPPING_KEYS, MappingKeyIOManager
from resources.settings import SettingsResource


def build_resources(settings: Settings, distributed: bool = False) -> dict[str, Any]:
    """The resources of a code location over `settings`; `distributed` when its executor sends
    steps to workers (Celery, Kubernetes), where the embedding prefill pays off by default."""
    pinned = SettingsResource.from_settings(settings)
    return {
        "settings": pinned,
        "delta": DeltaResource(settings=pinned),
        "es": ElasticsearchResource(settings=pinned),
        "embedder": EmbedderResource(settings=pinned, distributed=distributed),
        MAPPING_KEYS: MappingKeyIOManager(),
    }
