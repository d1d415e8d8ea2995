"""The resource set every asset and job runs with (defaults read the settings object lazily)."""

from __future__ import annotations

from typing import Any

from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource


def build_resources() -> dict[str, Any]:
    return {
        "delta": DeltaResource(),
        "es": ElasticsearchResource(),
        "embedder": EmbedderResource(),
    }
