"""The search group (`CTXDB_SEARCH_*`): the arms, their fusion, the recency lift and the
response's size."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from ctxdb.settings.base import GroupSettings, group_config


class SearchSettings(GroupSettings):
    """Hybrid search: the arms, their fusion, the recency lift and the response's size."""

    model_config = group_config("CTXDB_SEARCH_")

    deprecated_names: ClassVar[dict[str, str]] = {
        "CTXDB_RECENCY_HALF_LIFE_DAYS": "recency_half_life_days",
    }

    rrf_k: int = Field(default=5, ge=1, description="Reciprocal-rank-fusion constant.")
    weight_semantic: float = Field(default=1.0, description="RRF weight of the kNN arm.")
    weight_lexical: float = Field(default=1.0, description="RRF weight of the BM25 arm.")
    weight_trigram: float = Field(default=1.0, description="RRF weight of the trigram arm.")
    weight_recency: float = Field(default=0.5, description="Recency lift weight.")
    weight_time: float = Field(
        default=2.0, description="Lift of turns inside the span a query's date names."
    )
    coverage_power: float = Field(
        default=2.0,
        ge=0,
        le=4,
        description="Text arms' RRF contribution scaled by query coverage ** this (0: off).",
    )
    brief_words: int = Field(
        default=12,
        ge=1,
        le=200,
        description="A turn whose longest matched row holds fewer distinct non-stopword words"
        " is scaled down by (n / brief_words) ** brief_power.",
    )
    brief_power: float = Field(
        default=0.5, ge=0, le=4, description="How strongly brief turns are scaled down (0: off)."
    )
    diversity: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Diversity over conversations: each turn already picked from a conversation"
        " scales that conversation's next one by (1 - this) (0: off).",
    )
    answers_first: bool = Field(
        default=True,
        description="Rank a reply just ahead of the turn that asked the question it answers"
        " when both are found (ctxdb.search.fusion.answers_first).",
    )
    focus_names: bool = Field(
        default=True,
        description="Leave out of the searched query a capitalized name (no preposition or article"
        " before it) found in none, or in at least half of ten or more, of the user's"
        " conversations (ctxdb.search.names).",
    )
    split_questions: bool = Field(
        default=True,
        description="Ask the kNN arm each part of a compound question too (a new question after"
        " a '?' or an 'and'), interleaving the parts' rows (ctxdb.search.subquestions).",
    )
    session_weight: float = Field(
        default=1.0,
        ge=0,
        le=2,
        description="Session lift: each kNN row ranks by its cosine plus this x its conversation's"
        " session-row cosine (0: off; ctxdb.search.sessions).",
    )
    session_expand: int = Field(
        default=0,
        ge=0,
        le=20,
        description="The best-matching sessions whose rows a search fetches beside the kNN arm's.",
    )
    recency_half_life_days: float = Field(default=180.0, gt=0)
    num_candidates: int = Field(
        default=200,
        description="kNN num_candidates per shard (at least 1.5 x k is used).",
    )
    knn_k: int = Field(default=50, description="kNN k (rows fetched by the semantic arm).")
    knn_oversample: float = Field(
        default=3.0,
        ge=0,
        le=10,
        description="Quantized indices: oversample x k kNN candidates rescored with the float"
        " vectors (0: off; 1-10).",
    )
    overfetch_rows: int = Field(
        default=4,
        description="Rows fetched per wanted turn in each arm, before per-turn dedup.",
    )
    max_per_conversation: int = Field(
        default=2,
        ge=1,
        description="Turns of one conversation kept when the cap applies.",
    )
    cap_user_scope: bool = Field(
        default=False,
        description="Apply the per-conversation cap in user and agent scope.",
    )
    query_max_chars: int = Field(default=256)
    trigram_min_match: str = Field(
        default="40%", description="minimum_should_match of the trigram arm."
    )
    lexical_min_match: str = Field(
        default="1", description="minimum_should_match of the BM25 arm (content words)."
    )
    fuzzy_min_match: str = Field(
        default="2<60%",
        description="minimum_should_match of the trigram arm's fuzzy words.",
    )
    snippet_chars: int = Field(default=400)
    phrase_boost: float = Field(
        default=0.0, ge=0, description="Boost of the BM25 arm's phrase match (0: off)."
    )
    phrase_slop: int = Field(default=2, ge=0, description="Slop of the phrase match.")
    query_cache_size: int = Field(
        default=1024, ge=0, description="Query embeddings kept in memory (0: no cache)."
    )

    @field_validator("knn_oversample")
    @classmethod
    def _oversample_off_or_at_least_one(cls, value: float) -> float:
        """Elasticsearch takes 0 (off) or 1 to 10."""
        if 0 < value < 1:
            raise ValueError("knn_oversample is 0 (off) or between 1 and 10")
        return value
