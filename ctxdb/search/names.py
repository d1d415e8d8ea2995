"""Names the user's memory cannot tell apart, left out of the query the arms search with.

A capitalized word inside a query ("what is Alex majoring in?", "when did Caroline go to the
support group?") is usually a name, and as the subject or possessor of the question it says whose
memory to search rather than what to find in it. The user's own conversations say what it can do
for the search:

- in none of them, nothing can match it by word, and in the query's vector it only pulls toward
  whatever the model associates with the name (on real chat asked by name, leaving it out won
  the semantic arm back 5 points of any@10);
- in at least `COMMON_SHARE` of them, of a memory of at least `COMMON_MIN_CONVERSATIONS` (the
  two speakers of a long chat greeting each other), it tells none of them apart and draws the
  greetings that say it. In a smaller memory a name in most conversations can still be what
  tells its turns apart, so there only the first rule applies.

Either way the arms search better without it, so they get the query without those names. A name
in some of the conversations (a city, a friend, a pet) is content and stays, and so does a name
a preposition or an article leads ("back in Japan", "about Kafka", "the Avengers movie"): the
topic asked about, which the model can relate to what the memory holds (the Osaka it names).
Nothing is left out of a query that would keep no content word.

Only `[A-Z][a-z]+` words are names here: a misspelt name ("Carloine") counts as unknown, and
names with accents or in capitals are never left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxdb.search.temporal import date_spans
from ctxdb.text import stems

COMMON_SHARE = 0.5
"""A name in at least this share of the user's conversations tells none of them apart..."""
COMMON_MIN_CONVERSATIONS = 10
"""...in a memory of at least this many conversations."""
NOT_NAMES = frozenset(
    "january february march april may june july august september october november december"
    " monday tuesday wednesday thursday friday saturday sunday"
    " christmas christmases easter thanksgiving halloween hanukkah diwali ramadan eid"
    " yesterday today tonight tomorrow last next week weekend month year".split()
)
"""Capitalized, but times: months, weekdays, holidays and the words of relative dates. (A month's
short form in a date, "5 Jan 2024", is part of the date: `query_names`.)"""
LEADS = frozenset(
    "a an the in to from at of about near around on into through across over under"
    " visit visited visiting".split()
)
"""Articles, visits and the prepositions of places and topics: the name after one is the topic
asked about. Not "with", "for" or "by", which lead people ("with Caroline")."""
_NAME = re.compile(r"\b([A-Z][a-z]+)(?:['’]s)?\b")
_OPENS_SENTENCE = ".?!:;\"'(["
"""A word after one of these (or first in the query) is capitalized for its sentence."""


def query_names(query: str) -> dict[str, str]:
    """The query's names that may be left out, with their stems: capitalized words that do not
    open the query or a sentence, are neither times nor stopwords nor part of a date, and no
    preposition or article leads anywhere in the query."""
    found: dict[str, str] = {}
    led: set[str] = set()
    dates = date_spans(query)
    for match in _NAME.finditer(query):
        if any(start <= match.start() < end for start, end in dates):
            continue
        before = query[: match.start()].rstrip()
        word = match.group(1)
        if not before or before[-1] in _OPENS_SENTENCE or word.lower() in NOT_NAMES:
            continue
        stem = stems(word.lower())
        if not stem:
            continue
        found[word] = stem
        if before.split()[-1].lower() in LEADS:
            led.add(word)
    return {word: stem for word, stem in found.items() if word not in led}


def counts_body(row_filter: dict[str, Any], name_stems: list[str]) -> dict[str, Any]:
    """One size-0 search over the rows the arms would search (`row_filter`): their
    conversations, and those holding each stem."""
    distinct = {"cardinality": {"field": "conversation_id"}}
    return {
        "size": 0,
        "track_total_hits": False,
        "query": row_filter,
        "aggs": {
            "conversations": distinct,
            "names": {
                "filters": {"filters": {s: {"term": {"stems": s}} for s in name_stems}},
                "aggs": {"conversations": distinct},
            },
        },
    }


def left_out(
    names: Mapping[str, str],
    aggregations: Mapping[str, Any],
    share: float = COMMON_SHARE,
    min_conversations: int = COMMON_MIN_CONVERSATIONS,
) -> set[str]:
    """The names to leave out, given the counts of `counts_body`: those in none of the
    conversations, and those in at least `share` of them when there are `min_conversations`."""
    total = aggregations["conversations"]["value"]
    if not total:
        return set()
    common = share * total if total >= min_conversations else float("inf")
    buckets = aggregations["names"]["buckets"]
    out = set()
    for word, stem in names.items():
        bucket = buckets.get(stem)
        if bucket and (bucket["doc_count"] == 0 or bucket["conversations"]["value"] >= common):
            out.add(word)
    return out


def without_names(query: str, dropped: set[str]) -> str:
    """`query` without every occurrence of the `dropped` names (with their possessive 's); the
    query itself when nothing is dropped or no content word would be left."""
    if not dropped:
        return query
    words = "|".join(re.escape(word) for word in sorted(dropped))
    name = re.compile(rf"\b(?:{words})(?:['’]s)?(?!\w)")
    pieces, last = [], 0
    for start, end in date_spans(query):  # "Jan" the person goes, "5 Jan 2024" stays whole
        pieces += [name.sub(" ", query[last:start]), query[start:end]]
        last = end
    out = re.sub(r"\s+", " ", "".join([*pieces, name.sub(" ", query[last:])])).strip()
    return out if stems(out) else query
