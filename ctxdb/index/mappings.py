"""Elasticsearch index settings and mappings, defined here only (see docs/elasticsearch.md).

Only analyzers built into the server are used (standard, whitespace), so the mappings create on the
embedded test distribution (no analysis-common module) and on a full cluster alike. Trigrams and
stems are computed by the pipeline and indexed into whitespace-analyzed fields.
"""

from __future__ import annotations

from typing import Any

from ctxdb.elastic.replicas import DEFAULT_REPLICAS, replica_settings

ROWS = "rows"
TURNS = "turns"

VECTOR_INDEX_TYPES = ("hnsw", "int8_hnsw", "bbq_hnsw")
"""`index_options.type` of the embedding field: float HNSW, or HNSW over int8 / binary (BBQ)
quantized vectors (the float vectors stay on disk for rescoring)."""
DEFAULT_VECTOR_INDEX = "int8_hnsw"

_SETTINGS: dict[str, Any] = {
    "number_of_shards": 1,
    "refresh_interval": "5s",
}
"""`refresh_interval`: every writer (sync, retention, erasure, reindex) refreshes when it is
done, so the periodic refresh only shows a long write's rows before it ends. At 5 s instead of
1 s a live sync leaves a fifth of the small segments that every search visits."""

USER_SORT: dict[str, Any] = {
    "sort.field": ["tenant", "user_id", "conversation_id"],
    "sort.order": ["asc", "asc", "asc"],
}
"""Index sorting by owner: a user's documents lie together in every segment, so the term and
vector iterators of a search filtered to that user skip whole blocks of other users' postings
(every search is filtered to one user; without it they step through all of them)."""

_KEYWORD = {"type": "keyword"}
_DATE = {"type": "date"}


def _identity() -> dict[str, Any]:
    return {
        name: _KEYWORD
        for name in ("tenant", "app", "agent", "user_id", "conversation_id", "turn_id")
    }


def rows_mapping(dims: int = 384, vector_index: str = DEFAULT_VECTOR_INDEX) -> dict[str, Any]:
    """Role rows: the searchable units (BM25 text, boosted anchors, the question a reply answers,
    trigrams, stems, vectors)."""
    return {
        "dynamic": "strict",
        "properties": {
            "row_id": _KEYWORD,
            **_identity(),
            "project": _KEYWORD,
            "role": _KEYWORD,
            "target": _KEYWORD,
            "tags": _KEYWORD,
            "event_type": _KEYWORD,
            "batch_id": _KEYWORD,
            "ref": _KEYWORD,
            "path": _KEYWORD,
            "visibility": _KEYWORD,
            "ordinal": {"type": "integer"},
            "ts": _DATE,
            "expires_at": _DATE,
            "text": {"type": "text", "analyzer": "standard"},
            "anchors_text": {"type": "text", "analyzer": "standard"},
            "context": {"type": "text", "analyzer": "standard"},
            "trigrams": {"type": "text", "analyzer": "whitespace", "norms": False},
            "stems": {"type": "text", "analyzer": "whitespace"},
            "embedding": {
                "type": "dense_vector",
                "dims": dims,
                "similarity": "cosine",
                "index": True,
                "index_options": {"type": vector_index, "m": 16, "ef_construction": 100},
            },
            "embedding_status": _KEYWORD,
            "model_id": _KEYWORD,
            "text_hash": _KEYWORD,
        },
    }


def turns_mapping() -> dict[str, Any]:
    """TurnLogs stored for materialization (payload not searched) plus timeline/catalog fields."""
    return {
        "dynamic": "strict",
        "properties": {
            **_identity(),
            "project": _KEYWORD,
            "adapter": _KEYWORD,
            "recording_kind": _KEYWORD,
            "title": {"type": "keyword", "ignore_above": 1024},
            "ordinal": {"type": "integer"},
            "started_at": _DATE,
            "ended_at": _DATE,
            "last_activity_at": _DATE,
            "expires_at": _DATE,
            "error": {"type": "boolean"},
            "status": _KEYWORD,
            "error_type": _KEYWORD,
            "first_user_text": {"type": "text", "index": False},
            "last_assistant_text": {"type": "text", "index": False},
            "payload": {"type": "object", "enabled": False},
        },
    }


def index_body(
    kind: str,
    dims: int = 384,
    *,
    vector_index: str = DEFAULT_VECTOR_INDEX,
    shards: int = 1,
    routed: bool = False,
    sorted_by_user: bool = False,
    replicas: str = DEFAULT_REPLICAS,
) -> dict[str, Any]:
    """The full create-index body for `kind` ('rows' or 'turns').

    `routed` with several shards makes routing required, so a write or get that forgets it
    fails instead of landing on the wrong shard (one shard holds everything either way).
    `sorted_by_user` sorts every segment by user and conversation (`USER_SORT`). `replicas` as
    `replica_settings` reads it."""
    if vector_index not in VECTOR_INDEX_TYPES:
        raise ValueError(f"vector index {vector_index!r} is not one of {VECTOR_INDEX_TYPES}")
    mappings = rows_mapping(dims, vector_index) if kind == ROWS else turns_mapping()
    if routed and shards > 1:
        mappings = {"_routing": {"required": True}, **mappings}
    settings = {**_SETTINGS, "number_of_shards": shards, **replica_settings(replicas)}
    if sorted_by_user:
        settings |= USER_SORT
    return {"settings": settings, "mappings": mappings}


def alias_name(prefix: str, kind: str) -> str:
    """The read/write alias searches use: `<prefix>-rows` or `<prefix>-turns`."""
    return f"{prefix}-{kind}"


def index_name(prefix: str, kind: str, version: int) -> str:
    """A concrete versioned index behind the alias: `<prefix>-rows-v<N>`."""
    return f"{prefix}-{kind}-v{version}"


def turn_doc_id(conversation_id: str, turn_id: str) -> str:
    """Document id of a turn in the turns index."""
    return f"{conversation_id}:{turn_id}"
