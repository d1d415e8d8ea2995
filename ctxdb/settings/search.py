"""The search group (`CTXDB_SEARCH_*`): the ranking knobs (`SearchKnobs`, one model for the
settings' defaults and a request's overrides), the arms' retrieval depth and the response's
size."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from ctxdb.settings.base import GroupSettings, group_config

WEIGHT_MIN, WEIGHT_MAX = 0.0, 2.0
BRIEF_WORDS_MAX = 200
"""The largest `brief_words`."""


class SearchKnobs(BaseModel):
    """Every fusion and ranking knob of a search, validated once: the configured defaults
    (`CTXDB_SEARCH_KNOBS`), with a request's overrides (`SearchRequest.knobs`) applied by
    `with_overrides`. Passed whole to fusion (`ctxdb.search.fusion`) and to explain. A new knob
    is a field here, its use, its row in docs/search-api.md and its test."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rrf_k: int = Field(default=5, ge=1, le=1000, description="Reciprocal-rank-fusion constant k.")
    weight_semantic: float = Field(default=1.0, description="RRF weight of the kNN arm.")
    weight_lexical: float = Field(default=1.0, description="RRF weight of the BM25 arm.")
    weight_trigram: float = Field(default=1.0, description="RRF weight of the trigram arm.")
    weight_recency: float = Field(default=0.5, description="Weight of the recency lift.")
    weight_time: float = Field(
        default=2.0, description="Lift of turns inside the span a query's date names."
    )
    recency_half_life_days: float = Field(
        default=180.0, gt=0, le=3650, description="Half-life of the recency lift, in days."
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
        le=BRIEF_WORDS_MAX,
        description="A turn whose longest matched row holds fewer distinct non-stopword words"
        " is scaled down by (n / brief_words) ** brief_power.",
    )
    brief_power: float = Field(
        default=0.5, ge=0, le=4, description="How strongly brief turns are scaled down (0: off)."
    )
    min_score: float = Field(
        default=0.15,
        ge=0,
        le=1,
        description="Relevance floor: hits whose strongest arm signal (cosine, query coverage)"
        " is below this are dropped (0: keep every hit).",
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
        " when both are found.",
    )
    asked_coverage: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="answers_first moves a reply only when the question it answers holds at"
        " least this share of the query's content stems.",
    )
    max_per_conversation: int = Field(
        default=2, ge=1, le=50, description="Turns of one conversation kept when the cap applies."
    )
    cap_user_scope: bool = Field(
        default=False,
        description="Apply the per-conversation cap in user and agent scope (never in"
        " conversation scope).",
    )
    focus_names: bool = Field(
        default=True,
        description="Leave out of the searched query a capitalized name (no preposition or article"
        " before it) found in none, or in at least half of ten or more, of the caller's"
        " conversations.",
    )
    split_questions: bool = Field(
        default=True,
        description="Ask the kNN arm each part of a compound question too (a new question after"
        " a '?' or an 'and'), interleaving the parts' rows.",
    )
    session_weight: float = Field(
        default=1.0,
        ge=0,
        le=2,
        description="Session lift: each kNN row ranks by its cosine plus this x its conversation's"
        " session-row cosine (0: off).",
    )

    @field_validator(
        "weight_semantic", "weight_lexical", "weight_trigram", "weight_recency", "weight_time"
    )
    @classmethod
    def _clamp_weight(cls, value: float) -> float:
        """Weights are clamped to [0, 2], not refused."""
        return min(WEIGHT_MAX, max(WEIGHT_MIN, float(value)))

    def with_overrides(self, overrides: dict[str, Any]) -> SearchKnobs:
        """These knobs with `overrides` (knob name -> value, strings as the CLI gives them)
        applied, validated as a whole; an unknown name is a ValueError listing the valid ones."""
        unknown = sorted(set(overrides) - set(type(self).model_fields))
        if unknown:
            raise ValueError(
                f"unknown knob(s) {', '.join(unknown)}; valid knobs: {', '.join(knob_names())}"
            )
        if not overrides:
            return self
        try:
            return type(self).model_validate({**self.model_dump(), **overrides})
        except ValidationError as exc:
            raise ValueError(_knob_errors(exc)) from None


PLAIN_RRF = SearchKnobs(
    rrf_k=60,
    weight_recency=0.0,
    recency_half_life_days=7,
    weight_time=0.0,
    coverage_power=0.0,
    brief_power=0.0,
    min_score=0.0,
    answers_first=False,
)
"""Plain reciprocal-rank fusion: k 60, equal weights; no recency or time lift, no coverage or
brevity scaling, no relevance floor, no answers-first reorder (the base of the quality bench's
grid, and what the fusion tests compute by hand)."""


def knob_names() -> list[str]:
    """The names of every knob, in the model's order."""
    return list(SearchKnobs.model_fields)


def _knob_errors(exc: ValidationError) -> str:
    """One line per bad knob: `name: what is wrong`."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
    )


class SearchSettings(GroupSettings):
    """Hybrid search: the ranking knobs, the arms' retrieval depth and the response's size."""

    model_config = group_config("CTXDB_SEARCH_") | {"env_nested_delimiter": "__"}

    knobs: SearchKnobs = Field(
        default_factory=SearchKnobs,
        description='The ranking knobs\' defaults: JSON (`{"rrf_k": 10}`), or one knob per'
        ' variable, `CTXDB_SEARCH_KNOBS__<NAME>` (docs/search-api.md, "Knobs").',
    )
    session_expand: int = Field(
        default=0,
        ge=0,
        le=20,
        description="The best-matching sessions whose rows a search fetches beside the kNN arm's.",
    )
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


class _Overrides(BaseModel):
    """A request's knob overrides: any knob by name (an unset one keeps its default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(
                    f"unknown knob(s) {', '.join(map(str, unknown))};"
                    f" valid knobs: {', '.join(knob_names())}"
                )
        return data

    def given(self) -> dict[str, Any]:
        """The knobs this request sets, by name."""
        return self.model_dump(exclude_none=True)


def _overrides_model() -> type[_Overrides]:
    """`SearchKnobs` with every field optional (default None) and its bounds kept: the typed
    `knobs` object of a request (its JSON Schema lists every knob)."""
    fields: dict[str, Any] = {
        name: (Optional[info.annotation], FieldInfo.merge_field_infos(info, default=None))  # noqa: UP045
        for name, info in SearchKnobs.model_fields.items()
    }
    return create_model("KnobOverrides", __base__=_Overrides, **fields)


if TYPE_CHECKING:
    KnobOverrides = _Overrides
else:
    KnobOverrides = _overrides_model()
