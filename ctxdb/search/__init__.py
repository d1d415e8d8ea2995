"""Hybrid search inside the caller's identity: kNN, BM25 and trigram arms, RRF, recency lift.
In: a SearchRequest and a Principal; out: fused hits, materialized turns and catalog listings.
"""

from ctxdb.search.models import (
    MissingQuery,
    NotFound,
    SearchHit,
    SearchRequest,
    SearchResponse,
    SearchUnavailable,
)
from ctxdb.search.service import QueryEmbedder, SearchService

__all__ = [
    "MissingQuery",
    "NotFound",
    "QueryEmbedder",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
    "SearchService",
    "SearchUnavailable",
]
