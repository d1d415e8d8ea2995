"""Conversation search: hybrid retrieval, fusion, recency, snippets, catalog; see docs."""

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
