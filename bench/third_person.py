"""The chitchat set asked about its users by name: a check that the defaults do not depend on
first-person questions.

Every chitchat question is a partner's question turned to the first person ("what am I majoring
in?"). Real memory questions often name the person instead ("what is Alex majoring in?", the
held-out set's shape). `third_person` rewrites a question that way: the first mention of the
user becomes a name, the later ones a pronoun ("what did Alex say about: what superpower do they
wish they had?"). The name occurs nowhere in the conversations, so it is one more query word the
text arms cannot match and one more concept in the query's vector. The evidence is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import replace

from search_quality_sets import CHITCHAT, QuerySet, realistic_set

from ctxdb.settings import Settings

NAMES = "Alex Sam Jordan Taylor Casey Riley Morgan Jamie Avery Quinn Drew Reese".split()
# (pattern, with the name, with the pronoun); the longest forms first, matched case-insensitively
FORMS = (
    (r"\bam I\b", "is {n}", "are they"),
    (r"\bI am\b", "{n} is", "they are"),
    (r"\bI'm\b", "{n} is", "they are"),
    (r"\bI've\b", "{n} has", "they have"),
    (r"\bhave I\b", "has {n}", "have they"),
    (r"\bI'd\b", "{n} would", "they would"),
    (r"\bI'll\b", "{n} will", "they will"),
    (r"\bdo I\b", "does {n}", "do they"),
    (r"\bmyself\b", "{n}", "themselves"),
    (r"\bmine\b", "{n}'s", "theirs"),
    (r"\bmy\b", "{n}'s", "their"),
    (r"\bme\b", "{n}", "them"),
    (r"\bI\b", "{n}", "they"),
)
PATTERN = re.compile("|".join(f"({p})" for p, _, _ in FORMS), re.IGNORECASE)


def third_person(question: str, name: str) -> str:
    """`question` about `name`: the first mention of the asker by name, the rest by pronoun."""
    named = False

    def swap(match: re.Match[str]) -> str:
        nonlocal named
        _, with_name, with_pronoun = FORMS[match.lastindex - 1]  # type: ignore[operator]
        out = with_pronoun if named else with_name.format(n=name)
        named = True
        return out

    return PATTERN.sub(swap, question)


def chitchat_named_set(base: Settings) -> QuerySet:
    """The chitchat set (same memory and index) with every question asked by name."""
    qs = realistic_set(base, CHITCHAT, name="chitchat")
    users = sorted({q.user_id for q in qs.queries})
    names = {user: NAMES[i % len(NAMES)] for i, user in enumerate(users)}
    qs.name = "chitchat-named"
    qs.queries = [
        replace(
            q,
            request=q.request.model_copy(
                update={"query": third_person(q.request.query, names[q.user_id])}
            ),
        )
        for q in qs.queries
    ]
    return qs
