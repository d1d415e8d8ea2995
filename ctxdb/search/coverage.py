"""Query coverage of a text arm's row: the share of the query's terms the row holds.

RRF sees only ranks, so a BM25 row that matched one common word of a five-word query ranks as
high as a row that matched all five when nothing better exists, which is what happens on
paraphrases: the text arms return single-word matches and outvote the semantic answer. Fusion
scales each text arm's contribution by `coverage ** power` (`fusion.py`), so a text arm counts
in proportion to how much of the question a row actually contains.

    lexical  |stems(query) ∩ stems(row)| / |stems(query)|          (the row's `stems` field)
    trigram  |trigrams(query) ∩ trigrams(row)| / |trigrams(query)| (padded word trigrams)

Both are computed from the rows' `_source`, with no extra Elasticsearch call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxdb.search.arms import RowHit, content_words
from ctxdb.search.models import Arm
from ctxdb.text import stems, trigrams, words


@dataclass(frozen=True)
class QueryTerms:
    """The query's content stems and padded word trigrams (what the text arms match on)."""

    stems: frozenset[str]
    grams: frozenset[str]

    @classmethod
    def of(cls, query: str) -> QueryTerms:
        content = content_words(query)
        return cls(frozenset(stems(content).split()), frozenset(trigrams(content).split()))


def stem_coverage(terms: QueryTerms, row_stems: str) -> float:
    """Share of the query's stems present in the row's stems (1.0 when the query has none)."""
    if not terms.stems:
        return 1.0
    return len(terms.stems.intersection(row_stems.split())) / len(terms.stems)


def trigram_coverage(terms: QueryTerms, text: str) -> float:
    """Share of the query's padded trigrams found in the row's words (1.0 when it has none).

    Each word is written padded ("_word_") into one string, so a query trigram is in the row
    exactly when it is a substring of that string: a C-speed scan instead of building the row's
    trigram set (rows can be long assistant answers)."""
    if not terms.grams:
        return 1.0
    padded = " ".join(f"_{w}_" for w in words(text))
    return sum(gram in padded for gram in terms.grams) / len(terms.grams)


def with_coverage(ranked: Mapping[Arm, Sequence[RowHit]], query: str) -> dict[Arm, list[RowHit]]:
    """The arms' rows with `coverage` set on the text arms (semantic rows keep 1.0)."""
    terms = QueryTerms.of(query)
    out: dict[Arm, list[RowHit]] = {}
    for arm, rows in ranked.items():
        if arm == "lexical":
            out[arm] = [
                dataclasses.replace(r, coverage=stem_coverage(terms, r.stems)) for r in rows
            ]
        elif arm == "trigram":
            out[arm] = [
                dataclasses.replace(
                    r,
                    coverage=trigram_coverage(terms, f"{r.text} {r.anchors_text} {r.context}"),
                )
                for r in rows
            ]
        else:
            out[arm] = list(rows)
    return out
