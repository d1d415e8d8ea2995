"""Shard routing by user: every document of a user, and every read of that user, on one shard.

An index records how it was built in its mapping's `_meta` (`routing`, `vector_index`,
`shards`); writes and reads follow what the index records, never the settings, so a settings
change takes effect only through a reindex and an index is never read with a routing it was not
written with. `layout_mismatches` tells where the settings and a live index disagree.

The routing key is a short hash of the user id: stable, free of commas (a search's `routing`
parameter splits on them) and the same for a user in every tenant, so a principal without a
tenant is routed too.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable
from itertools import islice
from typing import Any

from elasticsearch import Elasticsearch, NotFoundError, helpers

from ctxdb.elastic.replicas import DEFAULT_REPLICAS
from ctxdb.index.mappings import DEFAULT_VECTOR_INDEX
from ctxdb.settings import Settings

USER = "user"
NONE = "none"
LOOKUP_CHUNK = 5000
DEFAULT_LAYOUT: dict[str, Any] = {
    "routing": NONE,
    "vector_index": DEFAULT_VECTOR_INDEX,
    "shards": 1,
    "sort": NONE,
    "replicas": DEFAULT_REPLICAS,
}
"""What an index is built with when no layout is given (tools and tests). `replicas` is the one
dynamic field: it is not recorded in `_meta`, the live index's settings hold it, and a sync
applies a changed value in place (`ctxdb.elastic.replicas.apply_replicas`)."""


def settings_layout(settings: Settings) -> dict[str, Any]:
    """The layout new indices are built with: routing, vector index type, shard count,
    document order and replicas."""
    es = settings.elasticsearch
    return {
        "routing": es.routing,
        "vector_index": es.vector_index,
        "shards": es.shards,
        "sort": es.sort,
        "replicas": es.replicas,
    }


def routing_key(user_id: str) -> str:
    """The routing value of every document and read of `user_id`."""
    return hashlib.blake2b(user_id.encode(), digest_size=8).hexdigest()


def index_layout(es: Elasticsearch, index: str) -> dict[str, Any]:
    """`routing`, `vector_index`, `shards` and `sort` of a concrete index (or of the one behind
    an alias): its `_meta`, with `routing` and `sort` "none" for indices built before them."""
    mappings = es.indices.get_mapping(index=index).body
    meta = next(iter(mappings.values()))["mappings"].get("_meta", {})
    return {
        "routing": meta.get("routing", NONE),
        "vector_index": meta.get("vector_index"),
        "shards": meta.get("shards"),
        "sort": meta.get("sort", NONE),
    }


def is_routed(es: Elasticsearch, index: str) -> bool:
    """Whether `index` was built with documents routed by user."""
    return index_layout(es, index)["routing"] == USER


def layout_mismatches(layout: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """One line per layout field where an index differs from the settings (a reindex applies
    the settings)."""
    return [
        f"{field}: index has {layout.get(field)!r}, settings say {value!r}"
        for field, value in wanted.items()
        if layout.get(field) is not None and layout.get(field) != value
    ]


class RoutingLookup:
    """Whether the index behind an alias is routed, cached for `ttl_s` seconds per alias (an
    alias swap to an index of another routing is seen within that time)."""

    def __init__(self, es: Elasticsearch, ttl_s: float = 30.0) -> None:
        self.es = es
        self.ttl_s = ttl_s
        self._seen: dict[str, tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def routed(self, alias: str) -> bool:
        now = time.monotonic()
        with self._lock:
            cached = self._seen.get(alias)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            value = is_routed(self.es, alias)
        except NotFoundError:
            return False  # the search itself reports the missing index
        with self._lock:
            self._seen[alias] = (now, value)
        return value

    def key(self, alias: str, user_id: str) -> str | None:
        """`user_id`'s routing key when the index behind `alias` is routed, else None."""
        return routing_key(user_id) if self.routed(alias) else None


def stored_routing(es: Elasticsearch, index: str, ids: Iterable[str]) -> dict[str, str | None]:
    """The routing each of `ids` was indexed with in `index` (None: without routing), for
    documents a search sees; ids not found are left out. Refresh first to see recent writes."""
    found: dict[str, str | None] = {}
    pending = iter(dict.fromkeys(ids))
    while chunk := list(islice(pending, LOOKUP_CHUNK)):
        hits = helpers.scan(
            es,
            index=index,
            query={"query": {"ids": {"values": chunk}}, "_source": False},
            size=1000,
        )
        found.update((hit["_id"], hit.get("_routing")) for hit in hits)
    return found
