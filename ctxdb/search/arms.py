"""The three candidate generators as Elasticsearch request bodies, and their hits as RowHits.

semantic: approximate kNN on `embedding` (cosine), filtered inside the kNN search.
lexical:  BM25 `multi_match` over `anchors_text` (boosted), `text` and `context` (the question a
          reply answers), plus the stemmed query on `stems` (same Snowball stemmer as the
          pipeline).
trigram:  the query's padded word trigrams matched on `trigrams` with a minimum-should-match
          threshold, or query words matched on `text` with edit-distance fuzziness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxdb.embedding.ids import same_model_ids
from ctxdb.search.models import Target
from ctxdb.text import STOPWORDS, stems, trigrams, words

ANCHOR_BOOST = 2.0
STEM_BOOST = 0.5
FUZZY_BOOST = 0.5
MAX_PHRASE_PAIRS = 8
KEY_FIELDS = ["conversation_id", "turn_id", "target", "ts"]
"""What `parse_hits` needs of a row: enough for a search whose rows only steer (session rows)."""
# `context` (the question a reply answers) is read by fusion.answers_first from every arm's rows
SOURCE_FIELDS = [
    *KEY_FIELDS,
    "text",
    "context",
    "path",
    "ref",
    "agent",
]
TEXT_SOURCE_FIELDS = [*SOURCE_FIELDS, "stems", "anchors_text"]  # coverage.py
LEXICAL_FIELDS = [f"anchors_text^{ANCHOR_BOOST}", "text", "context"]
"""The fields the lexical arm's BM25 reads."""


@dataclass(frozen=True)
class RowHit:
    """One role row returned by an arm (rank order is list order)."""

    conversation_id: str
    turn_id: str
    target: Target
    ts: datetime
    score: float
    text: str = ""
    path: str | None = None
    agent: str | None = None
    stems: str = ""
    anchors_text: str = ""
    context: str = ""
    coverage: float = 1.0
    session: float | None = None
    lifted: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.conversation_id, self.turn_id)

    @property
    def identity(self) -> tuple[str, str, str, str | None]:
        """The row itself: its turn, target and path (a turn has several rows)."""
        return (self.conversation_id, self.turn_id, self.target, self.path)


_STOPWORD_RE = re.compile(r"(?<![\w.])(?:" + "|".join(sorted(STOPWORDS)) + r")(?![\w.])", re.I)


def without_stopwords(query: str) -> str:
    """The query text with stopwords blanked, other tokens untouched (for the BM25 analyzer)."""
    stripped = " ".join(_STOPWORD_RE.sub(" ", query).split())
    return stripped or query


def word_pairs(content: str, limit: int = MAX_PHRASE_PAIRS) -> list[str]:
    """Adjacent pairs of the query's content tokens ("surprise party", "party venue")."""
    tokens = [t for t in content.split() if words(t)]
    return [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)][:limit]


def content_words(query: str) -> str:
    """The query without stopwords (the whole query when nothing else is left)."""
    kept = [w for w in words(query) if w not in STOPWORDS]
    return " ".join(kept) if kept else query


def _text_body(
    row_filter: dict[str, Any], should: list[dict[str, Any]], size: int
) -> dict[str, Any]:
    """A text arm's body: rows inside the filter that match any of `should`, with the fields
    coverage reads."""
    return {
        "query": {"bool": {"filter": [row_filter], "should": should, "minimum_should_match": 1}},
        "size": size,
        "track_total_hits": False,
        "_source": TEXT_SOURCE_FIELDS,
    }


def semantic_body(
    vector: list[float],
    row_filter: dict[str, Any],
    *,
    k: int,
    num_candidates: int,
    oversample: float = 0.0,
    model: str | None = None,
) -> dict[str, Any]:
    """kNN on `embedding` with the shared filter applied during the graph search; with `model`
    (the query vector's model name) only rows that model embedded, on any backend, are searched.
    On a quantized index (int8_hnsw, bbq_hnsw) `oversample` > 0 gathers oversample x k
    candidates and rescores them with the float vectors (Elasticsearch ignores it on a float
    index)."""
    if model is not None:
        same_model = {"terms": {"model_id": same_model_ids(model)}}
        row_filter = {"bool": {"filter": [row_filter, same_model]}}
    knn: dict[str, Any] = {
        "field": "embedding",
        "query_vector": vector,
        "k": k,
        "num_candidates": max(num_candidates, k),
        "filter": row_filter,
    }
    if oversample > 0:
        knn["rescore_vector"] = {"oversample": oversample}
    return {
        "knn": knn,
        "size": k,
        "track_total_hits": False,
        "_source": SOURCE_FIELDS,
    }


def lexical_body(
    query: str,
    row_filter: dict[str, Any],
    *,
    size: int,
    min_match: str = "1",
    use_stems: bool = True,
    phrase_boost: float = 0.0,
    phrase_slop: int = 2,
) -> dict[str, Any]:
    """BM25 over anchors (boosted), text and context on the query's content words, at least
    `min_match` of them present; the stemmed words add recall for inflections under the same
    threshold.
    Proximity: each pair of adjacent content words found within `phrase_slop` positions of each
    other adds its phrase score times `phrase_boost` (0: off)."""
    content = without_stopwords(query)
    should: list[dict[str, Any]] = [
        {
            "multi_match": {
                "query": content,
                "fields": LEXICAL_FIELDS,
                "type": "best_fields",
                "tie_breaker": 0.3,
                "minimum_should_match": min_match,
            }
        }
    ]
    stemmed = stems(content)
    if use_stems and stemmed:
        should.append(
            {
                "match": {
                    "stems": {
                        "query": stemmed,
                        "boost": STEM_BOOST,
                        "minimum_should_match": min_match,
                    }
                }
            }
        )
    pairs = word_pairs(content)
    if phrase_boost > 0 and pairs:
        should.append(
            {
                "bool": {
                    "should": [
                        {"match_phrase": {"text": {"query": pair, "slop": phrase_slop}}}
                        for pair in pairs
                    ],
                    "boost": phrase_boost,
                }
            }
        )
    return _text_body(row_filter, should, size)


def trigram_body(
    query: str,
    row_filter: dict[str, Any],
    *,
    size: int,
    min_match: str,
    fuzzy_min_match: str = "1",
) -> dict[str, Any] | None:
    """Trigram overlap of at least `min_match`, or enough content words within edit distance
    (fuzziness AUTO); None when the query has no word of three or more characters."""
    content = content_words(query)
    grams = trigrams(content)
    if not grams:
        return None
    should: list[dict[str, Any]] = [
        {"match": {"trigrams": {"query": grams, "minimum_should_match": min_match}}},
        {
            "match": {
                "text": {
                    "query": content,
                    "fuzziness": "AUTO",
                    "prefix_length": 1,
                    "minimum_should_match": fuzzy_min_match,
                    "boost": FUZZY_BOOST,
                }
            }
        },
    ]
    return _text_body(row_filter, should, size)


def parse_hits(response: dict[str, Any]) -> list[RowHit]:
    """RowHits in rank order from one search response."""
    rows = []
    for hit in response["hits"]["hits"]:
        src = hit["_source"]
        rows.append(
            RowHit(
                conversation_id=src["conversation_id"],
                turn_id=src["turn_id"],
                target=src["target"],
                ts=datetime.fromisoformat(src["ts"]),
                score=float(hit["_score"] or 0.0),
                text=src.get("text") or "",
                path=src.get("path"),
                agent=src.get("agent"),
                stems=src.get("stems") or "",
                anchors_text=src.get("anchors_text") or "",
                context=src.get("context") or "",
            )
        )
    return rows
