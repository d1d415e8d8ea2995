"""IO manager of the values a dynamic step gets from its mapping key alone (one shard of the
embedding prefill: `assets.embedding_prefill`).

A dynamic output's value normally goes through storage every step can read, which on Celery or
Kubernetes workers means a shared file system or bucket. A value that is its own mapping key
needs none: the output is checked and dropped, and the mapped step reads its input back from the
key it runs under.
"""

from __future__ import annotations

from dagster import ConfigurableIOManager, InputContext, OutputContext

MAPPING_KEYS = "mapping_keys"
"""The resource key the code locations bind `MappingKeyIOManager` to."""


class MappingKeyIOManager(ConfigurableIOManager):
    """Stores nothing: a dynamic output's value must equal its mapping key."""

    def handle_output(self, context: OutputContext, obj: str) -> None:
        if obj != context.mapping_key:
            raise ValueError(f"value {obj!r} is not its mapping key {context.mapping_key!r}")

    def load_input(self, context: InputContext) -> str:
        upstream = context.upstream_output
        if upstream is None or upstream.mapping_key is None:
            raise ValueError("mapping_keys only loads the outputs of a dynamic step")
        return upstream.mapping_key
