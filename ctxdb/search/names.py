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
in some of the conversations (a city, a friend, a pet) is content and stays; so does an unknown
name led by a preposition or article ("back in Japan": the model can relate it to the Osaka the
memory holds), and every name of a query that would be left with no content word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
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
    " monday tuesday wednesday thursday friday saturday sunday"
    " christmas christmases easter thanksgiving halloween hanukkah diwali ramadan eid".split()
)
"""Capitalized, but months, weekdays and holidays: times, not names."""
LEADS = frozenset(
    "a an the in to from at of about near around for with by on into through across over under"
    " visit visited visiting".split()
)
"""Words after which an unknown name is more likely a place or a thing ("back in Japan", "the
Avengers movie") that the model can relate to what the memory holds: it stays."""
_NAME = re.compile(r"\b([A-Z][a-z]+)(?:'s)?\b")
_SENTENCE_END = ".?!:;\"'(["


@dataclass(frozen=True)
class QueryName:
    """A name-like word of a query: its stem, and whether a preposition or article leads it."""

    stem: str
    led: bool


def query_names(query: str) -> dict[str, QueryName]:
    """The query's name-like words (as written, with a possessive 's): capitalized words that do
    not open the query or a sentence, that are neither times nor stopwords."""
    found: dict[str, QueryName] = {}
    for match in _NAME.finditer(query):
        before = query[: match.start()].rstrip()
        word = match.group(1)
        if not before or before[-1] in _SENTENCE_END or word.lower() in TIME_WORDS:
            continue
        stem = stems(word.lower())
        if stem and " " not in stem:
            led = before.split()[-1].lower() in LEADS
            found[match.group(0)] = QueryName(stem, led)
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


def left_out(
    names: Mapping[str, QueryName],
    aggregations: Mapping[str, Any],
    share: float = COMMON_SHARE,
    min_conversations: int = COMMON_MIN_CONVERSATIONS,
) -> set[str]:
    """The names to leave out, given the counts of `counts_body`: those in none of the
    principal's conversations (unless led by a preposition or article), and those in at least
    `share` of them when it has at least `min_conversations`."""
    total = aggregations["conversations"]["value"]
    if not total:
        return set()
    common = share * total if total >= min_conversations else float("inf")
    buckets = aggregations["names"]["buckets"]
    out = set()
    for written, name in names.items():
        bucket = buckets[name.stem]
        unknown = bucket["doc_count"] == 0 and not name.led
        if unknown or bucket["conversations"]["value"] >= common:
            out.add(written)
    return out


def without_names(query: str, dropped: set[str]) -> str:
    """`query` without the `dropped` names; the query itself when no content word would be
    left."""
    out = query
    for name in dropped:
        out = re.sub(rf"\b{re.escape(name)}(?!\w)", " ", out)
    out = re.sub(r"\s+", " ", out).strip()
    return out if stems(out) else query
