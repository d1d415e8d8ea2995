"""Names the user's memory cannot tell apart, left out of the query the arms search with.

A capitalized word inside a query ("what is Alex majoring in?", "when did Caroline go to the
support group?") is usually a name. The user's own conversations say what it can do for the search:

- in none of them, nothing can match it, by word or by meaning. In the query's vector it only
  pulls toward whatever the model associates with the name (on real chat asked by name, it cost
  the semantic arm 8 points of any@10);
- in at least `COMMON_SHARE` of them, of a memory of at least `COMMON_MIN_CONVERSATIONS` (the
  two speakers of a long chat greeting each other), it tells none of them apart and draws the
  greetings that say it. In a smaller memory a name in most conversations can still be what
  tells its turns apart, so there only the first rule applies.

Either way the arms search better without it, so they get the query without those names. A name
in some of the conversations (a city, a friend, a pet) is content and stays, and so does every
name of a query that would be left with no content word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ctxdb.contract.identity import Principal
from ctxdb.search.filters import identity_filter, live_filter
from ctxdb.text import stems

COMMON_SHARE = 0.5
"""A name in at least this share of the user's conversations tells none of them apart..."""
COMMON_MIN_CONVERSATIONS = 10
"""...in a memory of at least this many conversations."""
TIME_WORDS = frozenset(
    "january february march april may june july august september october november december"
    " monday tuesday wednesday thursday friday saturday sunday".split()
)
"""Capitalized, but times that `temporal.py` reads, not names."""
_NAME = re.compile(r"\b([A-Z][a-z]+)(?:'s)?\b")
_SENTENCE_END = ".?!:;\"'(["


def query_names(query: str) -> dict[str, str]:
    """The query's name-like words and their stems: capitalized words that do not open the query
    or a sentence, that are neither times nor stopwords."""
    found: dict[str, str] = {}
    for match in _NAME.finditer(query):
        before = query[: match.start()].rstrip()
        word = match.group(1)
        if not before or before[-1] in _SENTENCE_END or word.lower() in TIME_WORDS:
            continue
        stem = stems(word.lower())
        if stem and " " not in stem:
            found[match.group(0)] = stem
    return found


def counts_body(principal: Principal, now: datetime, name_stems: list[str]) -> dict[str, Any]:
    """One size-0 search over the principal's live rows: its conversations, and those holding
    each stem."""
    distinct = {"cardinality": {"field": "conversation_id"}}
    return {
        "size": 0,
        "track_total_hits": False,
        "query": {"bool": {"filter": [*identity_filter(principal), live_filter(now)]}},
        "aggs": {
            "conversations": distinct,
            "names": {
                "filters": {"filters": {s: {"term": {"stems": s}} for s in name_stems}},
                "aggs": {"conversations": distinct},
            },
        },
    }


def uninformative(
    aggregations: Mapping[str, Any],
    share: float = COMMON_SHARE,
    min_conversations: int = COMMON_MIN_CONVERSATIONS,
) -> set[str]:
    """The stems in none of the principal's conversations, or in at least `share` of them when
    it has at least `min_conversations`."""
    total = aggregations["conversations"]["value"]
    if not total:
        return set()
    common = share * total if total >= min_conversations else float("inf")
    buckets = aggregations["names"]["buckets"]
    return {
        stem
        for stem, bucket in buckets.items()
        if bucket["doc_count"] == 0 or bucket["conversations"]["value"] >= common
    }


def without_names(query: str, names: Mapping[str, str], dropped: set[str]) -> str:
    """`query` without the names whose stems are `dropped`; the query itself when no content
    word would be left."""
    out = query
    for name, stem in names.items():
        if stem in dropped:
            out = re.sub(rf"\b{re.escape(name)}(?!\w)", " ", out)
    out = re.sub(r"\s+", " ", out).strip()
    return out if stems(out) else query
