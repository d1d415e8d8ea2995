"""Hybrid search inside the caller's identity: kNN, BM25 and trigram arms, RRF, recency lift.
In: a SearchRequest and a Principal; out: fused hits, materialized turns and catalog listings.

`SearchService` and `QueryEmbedder` load on first access: importing `ctxdb.search.models` (the
request and response shapes, wanted by the CLI) stays free of the search engine's client
and the embedding stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxdb.search.models import (
    MissingQuery,
    NotFound,
    SearchHit,
    SearchRequest,
    SearchResponse,
)

if TYPE_CHECKING:
    from ctxdb.search.service import QueryEmbedder, SearchService

__all__ = [
    "MissingQuery",
    "NotFound",
    "QueryEmbedder",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
    "SearchService",
]


def __getattr__(name: str) -> Any:
    """`SearchService` and `QueryEmbedder`, imported from `ctxdb.search.service` when asked for."""
    if name in ("QueryEmbedder", "SearchService"):
        from ctxdb.search import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
