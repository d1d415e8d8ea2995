"""Per-index status and the numbers the asset checks compare: counts, vector coverage, expiry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import BaseModel

from ctxdb.elastic.replicas import replica_state
from ctxdb.embedding.stage import SKIPPED
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.index.routing import index_layout
from ctxdb.index.versions import KINDS, alias_target, index_meta, version_of


class IndexStatus(BaseModel):
    """What `ctxdb index status` prints for one alias."""

    kind: str
    alias: str
    index: str | None
    version: int | None
    docs: int
    with_vector: int | None
    embeddable: int | None
    coverage_pct: float | None
    size_bytes: int
    model_id: str | None
    layout: dict[str, Any] | None = None
    """`routing`, `vector_index` and `shards` the index was built with (`ctxdb.index.routing`)."""
    number_of_replicas: int | None = None
    auto_expand_replicas: str | None = None
    """The live index's replica settings (`auto_expand_replicas` None when a fixed count)."""
    health: str | None = None
    """green, yellow (a replica unassigned) or red (a primary unassigned) for this index."""


def count(es: Elasticsearch, index: str, query: dict | None = None) -> int:
    return int(es.count(index=index, query=query or {"match_all": {}})["count"])


def vector_coverage(es: Elasticsearch, index: str) -> tuple[int, int, float]:
    """(docs with a vector, docs with embeddable text, percentage; 100 when nothing to embed)."""
    with_vector = count(es, index, {"exists": {"field": "embedding"}})
    embeddable = count(es, index, {"bool": {"must_not": [{"term": {"embedding_status": SKIPPED}}]}})
    pct = 100.0 * with_vector / embeddable if embeddable else 100.0
    return with_vector, embeddable, pct


def expired_ids(
    es: Elasticsearch, index: str, now: datetime | None = None, limit: int = 20
) -> tuple[int, list[str]]:
    """(number of documents past `expires_at`, up to `limit` of their ids)."""
    now = now or datetime.now(UTC)
    query = {"range": {"expires_at": {"lt": now.isoformat()}}}
    response = es.search(index=index, query=query, size=limit, source=False, track_total_hits=True)
    return int(response["hits"]["total"]["value"]), [h["_id"] for h in response["hits"]["hits"]]


def index_status(es: Elasticsearch, prefix: str, kind: str) -> IndexStatus:
    alias = alias_name(prefix, kind)
    index = alias_target(es, alias)
    if index is None:
        return IndexStatus(
            kind=kind,
            alias=alias,
            index=None,
            version=None,
            docs=0,
            with_vector=None,
            embeddable=None,
            coverage_pct=None,
            size_bytes=0,
            model_id=None,
        )
    stats = es.indices.stats(index=index, metric="store")["indices"][index]
    replicas = replica_state(es, index)
    count_setting = replicas["number_of_replicas"]  # the live setting is a string
    with_vector = embeddable = pct = None
    if kind == ROWS:
        with_vector, embeddable, pct = vector_coverage(es, index)
    return IndexStatus(
        kind=kind,
        alias=alias,
        index=index,
        version=version_of(index),
        docs=count(es, index),
        with_vector=with_vector,
        embeddable=embeddable,
        coverage_pct=pct,
        size_bytes=int(stats["total"]["store"]["size_in_bytes"]),
        model_id=index_meta(es, index).get("model_id"),
        layout=index_layout(es, index),
        number_of_replicas=None if count_setting is None else int(count_setting),
        auto_expand_replicas=replicas["auto_expand_replicas"],
        health=es.cluster.health(index=index)["status"],
    )


def all_status(es: Elasticsearch, prefix: str) -> list[IndexStatus]:
    return [index_status(es, prefix, kind) for kind in KINDS]
