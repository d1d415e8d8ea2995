"""Relative time expressions in a query ("from last week", "yesterday", "3 days ago").

They say *when*, not *what*: left in the query they make BM25 and trigram arms match any row that
happens to contain "week" or "last", outvoting the semantic arm on the topic words. They are cut
from the text the lexical arms see (the semantic arm still gets the whole query) and returned as a
hint of how far back the caller is looking. Written by hand: the date-parsing libraries on PyPI
parse absolute dates, not a phrase's span inside free text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_UNIT = r"(?P<unit>day|week|month|year)s?"
_LEAD = r"(?:(?:from|during|in|over|within|since)\s+)?(?:the\s+)?"
_PATTERN = re.compile(
    _LEAD
    + r"(?:"
    + r"(?:last|past|previous)\s+(?:(?P<n>\d{1,3})\s+)?"
    + _UNIT
    + r"|(?P<ago_n>\d{1,3})\s+(?P<ago_unit>day|week|month|year)s?\s+ago"
    + r"|this\s+(?P<this_unit>morning|week|month|year)"
    + r"|(?P<word>yesterday|today|tonight)"
    + r")\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class TimeHint:
    """A relative time expression found in a query and how far back it reaches."""

    phrase: str
    lookback: timedelta

    def since(self, now: datetime) -> datetime:
        return now - self.lookback


def _lookback(match: re.Match[str]) -> timedelta:
    groups = match.groupdict()
    if groups["unit"]:
        n = int(groups["n"] or 1)
        # "last week" spans the week before this one: reach back two units.
        return timedelta(days=_UNIT_DAYS[groups["unit"].lower()] * (n if groups["n"] else 2))
    if groups["ago_unit"]:
        return timedelta(days=_UNIT_DAYS[groups["ago_unit"].lower()] * (int(groups["ago_n"]) + 1))
    if groups["this_unit"]:
        unit = groups["this_unit"].lower()
        return timedelta(days=1 if unit == "morning" else _UNIT_DAYS[unit])
    return timedelta(days=2 if groups["word"].lower() == "yesterday" else 1)


def split_time_hint(query: str) -> tuple[str, TimeHint | None]:
    """The query without its first relative time expression, and that expression as a hint.

    A query that is nothing but a time expression is returned unchanged (there is no topic left
    to search for).
    """
    match = _PATTERN.search(query)
    if match is None:
        return query, None
    rest = " ".join((query[: match.start()] + " " + query[match.end() :]).split())
    if not rest:
        return query, None
    return rest, TimeHint(phrase=match.group(0).strip(), lookback=_lookback(match))
