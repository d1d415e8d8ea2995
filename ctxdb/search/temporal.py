"""Time expressions in a query ("from last week", "yesterday", "3 days ago", "back in March",
"last spring").

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
# A month or season needs a leading "in", "last", "back in", "over the"... and no day number
# next to it: "back in March" says when, "on 12 December" may be the very text to match.
_CALENDAR = (
    r"(?<!\w)(?:back\s+)?(?:in|during|over|last|this|since|early|late|mid)\s+(?:the\s+)?"
    r"(?P<calendar>january|february|march|april|may|june|july|august|september|october"
    r"|november|december|spring|summer|autumn|fall|winter)(?!\s*\d)"
)
_PATTERN = re.compile(
    r"(?:"
    + _CALENDAR
    + r"|"
    + _LEAD
    + r"(?:"
    + r"(?:last|past|previous)\s+(?:(?P<n>\d{1,3})\s+)?"
    + _UNIT
    + r"|(?P<ago_n>\d{1,3})\s+(?P<ago_unit>day|week|month|year)s?\s+ago"
    + r"|this\s+(?P<this_unit>morning|week|month|year)"
    + r"|(?P<word>yesterday|today|tonight)"
    + r"))\b",
    re.IGNORECASE,
)


_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_SETTLE = timedelta(days=7)  # "in December" asked on 1 December means the December before


@dataclass(frozen=True)
class TimeHint:
    """A time expression found in a query: how far back it reaches and, for a month or a
    season, which one."""

    phrase: str
    lookback: timedelta
    calendar: str | None = None

    def since(self, now: datetime) -> datetime:
        return now - self.lookback

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """The span the expression names: the last `lookback` for relative expressions; the
        latest month or season (3 months) that began at least a week before `now`."""
        if self.calendar is None:
            return now - self.lookback, now
        if self.calendar in _SEASON_START:
            first, months = _SEASON_START[self.calendar], 3
        else:
            first, months = _MONTHS.index(self.calendar) + 1, 1
        start = now.replace(month=first, day=1, hour=0, minute=0, second=0, microsecond=0)
        if start + _SETTLE > now:
            start = start.replace(year=start.year - 1)
        end_month = first + months
        end = start.replace(year=start.year + (end_month - 1) // 12, month=(end_month - 1) % 12 + 1)
        return start, end


def _lookback(match: re.Match[str]) -> timedelta:
    groups = match.groupdict()
    if groups["calendar"]:
        # "last spring", "back in March": somewhere in the past year (or just before it)
        return timedelta(days=_UNIT_DAYS["year"] + 90)
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
    calendar = match.group("calendar")
    return rest, TimeHint(
        phrase=match.group(0).strip(),
        lookback=_lookback(match),
        calendar=calendar.lower() if calendar else None,
    )
