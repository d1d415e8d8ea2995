"""The resource set every asset and job runs with.

Fields left unset keep the settings object's values (read when a run starts, never at import).
Connection secrets present in the environment when the code location loads are bound as
`EnvVar`s, so Dagster resolves them at run launch and shows only their names in the UI.
"""

from __future__ import annotations

import os
from typing import Any

from dagster import EnvVar

from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource

ELASTICSEARCH_ENV = {
    "url": "ELASTICSEARCH_URL",
    "api_key": "ELASTICSEARCH_API_KEY",
    "username": "ELASTICSEARCH_USERNAME",
    "password": "ELASTICSEARCH_PASSWORD",
    "ca_certs": "ELASTICSEARCH_CA_CERTS",
}


def _bound_env(names: dict[str, str]) -> dict[str, EnvVar]:
    return {field: EnvVar(name) for field, name in names.items() if os.environ.get(name)}


def build_resources() -> dict[str, Any]:
    return {
        "delta": DeltaResource(),
        "es": ElasticsearchResource(**_bound_env(ELASTICSEARCH_ENV)),
        "embedder": EmbedderResource(),
    }
