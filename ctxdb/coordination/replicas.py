"""Replica settings of every index this project creates (memory indices, the writer lease, the
shared token store), from one layout setting (`CTXDB_INDEX_REPLICAS`)."""

from __future__ import annotations

from typing import Any

DEFAULT_REPLICAS = "0-1"
"""Replicas of every index (`CTXDB_INDEX_REPLICAS`): `auto_expand_replicas` 0-1, so a single
node stays green and on two or more nodes each shard has a copy on another node, and the memory
stays searchable (and the writer lease writable) when one node is lost."""


def replica_settings(replicas: str) -> dict[str, Any]:
    """The index settings for `replicas`: a range (`0-1`, `1-all`) follows the number of nodes
    (`auto_expand_replicas`); a number is a fixed `number_of_replicas`."""
    if replicas.isdigit():
        return {"number_of_replicas": int(replicas), "auto_expand_replicas": "false"}
    return {"auto_expand_replicas": replicas}
