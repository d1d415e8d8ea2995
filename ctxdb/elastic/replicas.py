"""Replica settings of every index this project creates (memory indices, the writer lease, the
shared token store), from one layout setting (`CTXDB_ELASTICSEARCH_REPLICAS`), and the one way an
existing index is brought to that setting."""

from __future__ import annotations

import logging
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch

from ctxdb.settings.elasticsearch import ElasticsearchSettings

log = logging.getLogger(__name__)

DEFAULT_REPLICAS: str = ElasticsearchSettings.model_fields["replicas"].default
"""Replicas of every index (the default of `CTXDB_ELASTICSEARCH_REPLICAS`, `0-1`):
`auto_expand_replicas` 0-1, so a single node stays green and on two or more nodes each shard has
a copy on another node, and the memory stays searchable (and the writer lease writable) when one
node is lost."""


def replica_settings(replicas: str) -> dict[str, Any]:
    """The index settings for `replicas`: a range (`0-1`, `1-all`) follows the number of nodes
    (`auto_expand_replicas`); a number is a fixed `number_of_replicas`."""
    if replicas.isdigit():
        return {"number_of_replicas": int(replicas), "auto_expand_replicas": "false"}
    return {"auto_expand_replicas": replicas}


def replica_state(es: Elasticsearch, index: str) -> dict[str, str | None]:
    """`number_of_replicas` and `auto_expand_replicas` of `index` as its live settings hold them
    (`auto_expand_replicas` None when off)."""
    found = es.indices.get_settings(index=index, name="index.*replicas", flat_settings=True)
    live = next(iter(found.body.values()))["settings"]
    expand = live.get("index.auto_expand_replicas")
    return {
        "number_of_replicas": live.get("index.number_of_replicas"),
        "auto_expand_replicas": None if expand in (None, "false") else expand,
    }


def apply_replicas(es: Elasticsearch, index: str, replicas: str) -> bool:
    """Give `index` the replicas `replicas` asks for (`replica_settings`) when its live settings
    differ; True when they were changed. Replicas are a dynamic setting: no reindex needed."""
    wanted = replica_settings(replicas)
    state = replica_state(es, index)
    if state["auto_expand_replicas"] == wanted["auto_expand_replicas"] or (
        state["auto_expand_replicas"] is None
        and state["number_of_replicas"] == str(wanted.get("number_of_replicas"))
    ):
        return False
    es.indices.put_settings(index=index, settings=wanted)
    log.info("%s: replicas %s -> %s", index, state, wanted)
    return True


def ensure_single_shard_index(
    es: Elasticsearch, index: str, mappings: dict[str, Any], replicas: str
) -> None:
    """Create a one-shard index with `mappings` and the replicas `replicas` asks for; when it
    exists already (created earlier, or by another process just now), bring its replicas to
    `replicas` instead (`apply_replicas`). Any other refusal is raised."""
    try:
        es.indices.create(
            index=index,
            settings={"number_of_shards": 1, **replica_settings(replicas)},
            mappings=mappings,
        )
    except BadRequestError as exc:
        if exc.error != "resource_already_exists_exception":
            raise
        apply_replicas(es, index, replicas)
