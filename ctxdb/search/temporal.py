"""Time expressions in a query ("from last week", "yesterday", "3 days ago", "back in March",
"last spring", "on 29 Dec 2023", "on 21.01.2024", "in January 2024").

Relative ones say *when*, not *what*: left in the query they make BM25 and trigram arms match any
row that happens to contain "week" or "last", outvoting the semantic arm on the topic words. They
are cut from the text the lexical arms see (the semantic arm still gets the whole query) and
returned as a hint of how far back the caller is looking.

A date ("on 29 Dec 2023", "December 29th", "21.01.2024", "2024-01-21") names a day, which the
hint's window spans with a day on either side: what happened on a day is told that day or the
next ("yesterday I..."), a plan for it the day before, and the caller's day is local while turn
times are UTC. (Chosen on REALTALK's 42 dated questions, the only set that asks by date: any@10
.762 with half a day either side, .881 with a day, .857 with a day and a half.) Its text stays
in the query: "what's happening on 12 December?" may ask for a turn that says "12 December" as
much as for one written that day. A date without a year is the nearest such day. Numeric dates
need a four-digit year between 1900 and 2100 (so "1.2.3" or "9999-12-31" are not dates); dotted
ones are day first and slashed ones month first, unless that number cannot be a month; "May"
is a month only capitalized.

A month or season named with its year ("in January 2024", "Jan. 2024", "the summer of 2023") or
a year after "in", "during" or "throughout" ("in 2023") names that period, with a day either side;
its text stays too. A winter is the one its year's January lies in (December of the year before
to February). A span of months ending with its year ("from January to March 2024", "between Nov
2023 and Feb 2024", "January-March 2024") names those months; one end of an open span ("since
January 2024") names no period. A date, when the query has one, comes before such a period, and
a date without a year takes the year the period gives its month ("on March 3 in 2023").

Written by hand: the date-parsing libraries on PyPI parse a string that is a date, not a
phrase's span inside free text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_UNIT = r"(?P<unit>day|week|month|year)s?"
_LEAD = r"(?:(?:from|during|in|over|within|since)\s+)?(?:the\s+)?"
# A month or season needs a leading "in", "last", "back in", "over the"... and no day number
# next to it: "back in March" says when, "on 12 December" may be the very text to match.
_CALENDAR = (
    r"(?<!\w)(?:back\s+)?(?:in|during|over|last|this|since|early|late|mid)\s+(?:the\s+)?"
    r"(?P<calendar>january|february|march|april|may|june|july|august|september|october"
    r"|november|december|spring|summer|autumn|fall|winter)(?!\s*\d|,?\s*(?:of\s+)?\d{4}(?!\d))"
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
_MONTH_WORD = (
    "(?P<{}>"
    + "|".join(m for m in _MONTHS if m != "may")
    + "|"
    + "|".join(m[:3] for m in _MONTHS if m != "may")
    + r"|sept|(?-i:May))\b\.?"  # "May" is a month only capitalized
)
_ORDINAL = r"(?:st|nd|rd|th)?"
_DATE = re.compile(
    r"(?<![\w.])(?:(?:on|from|of|since|before|after|until|by)\s+)?(?:the\s+)?(?:"
    r"(?P<iso_y>\d{4})[-/](?P<iso_m>\d{1,2})[-/](?P<iso_d>\d{1,2})(?:T\d[\d:.]*Z?)?"
    r"|(?P<dot_a>\d{1,2})\.(?P<dot_b>\d{1,2})\.(?P<dot_y>\d{4})"
    r"|(?P<sl_a>\d{1,2})/(?P<sl_b>\d{1,2})/(?P<sl_y>\d{4})"
    r"|(?P<dm_d>\d{1,2})"
    + _ORDINAL
    + r"\s+(?:of\s+)?"
    + _MONTH_WORD.format("dm_m")
    + r"(?:,?\s+(?P<dm_y>\d{4}))?"
    r"|"
    + _MONTH_WORD.format("md_m")
    + r"\s+(?P<md_d>\d{1,2})"
    + _ORDINAL
    + r"(?:,?\s+(?P<md_y>\d{4}))?"
    r")(?![\w-]|[.,/]\d)",
    re.IGNORECASE,
)
_YEAR_END = r"(?![\w\-\u2013\u2014]|[.,/]\d)"  # not "2023-24", "2023–24" or "2023.4"
_OPEN_LEADS = frozenset(
    {"from", "since", "by", "until", "till", "before", "after", "to", "through", "between", "and"}
)
"""Leads that make a period one end of a span ("since January 2024", "from January to March
2024"): no period hint."""
_UNITS = "dollars? euros? pounds? yen usd eur gbp money terms"
_YEAR_AS_UNIT = rf"(?!\s+(?:{'|'.join(_UNITS.split())})\b)"
"""A bare year that qualifies a unit ("in 2024 dollars", "in 2023 terms") names no period. Not
"prices" or "rates", which may open the clause after the year ("in 2024 prices rose")."""
# A month or season with its year ("in January 2024", "Jan. 2024", "the summer of 2023"), or a
# year after "in"/"during"/"throughout" ("in 2023"); "may" lower-case only after "in"/"during".
_PERIOD = re.compile(
    r"(?<![\w.])(?:(?P<p_lead>"
    + "|".join(["in", "during", "throughout", "of", *sorted(_OPEN_LEADS)])
    + r")\s+)?(?:the\s+)?(?:"
    + _MONTH_WORD.format("p_month")
    + r"|(?P<p_season>spring|summer|autumn|fall|winter))"
    r",?\s+(?:of\s+)?(?P<p_y>\d{4})"
    + _YEAR_END
    + r"|(?<![\w.])(?:in|during|throughout)\s+(?:(?P<p_may>may),?\s+)?(?P<p_year>\d{4})"
    + _YEAR_END
    + _YEAR_AS_UNIT,
    re.IGNORECASE,
)
# A span of months ending with its year: "from January to March 2024", "between Nov 2023 and
# Feb 2024", "January-March 2024" ("and" only after "between").
_RANGE = re.compile(
    r"(?<![\w.])(?:(?P<r_lead>from|between)\s+)?(?:the\s+)?"
    + _MONTH_WORD.format("r_m1")
    + r"(?:,?\s+(?P<r_y1>\d{4}))?"
    r"(?:\s+(?P<r_to>to|and|until|till|through)\s+|\s*[-\u2013\u2014]\s*)(?:the\s+)?"
    + _MONTH_WORD.format("r_m2")
    + r",?\s+(?P<r_y2>\d{4})"
    + _YEAR_END,
    re.IGNORECASE,
)
_MAX_RANGE_MONTHS = 24
_DAY_SLACK = timedelta(days=1)
MIN_YEAR, MAX_YEAR = 1900, 2100
"""Years a date in a query may name."""

_SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_SETTLE = timedelta(days=7)  # "in December" asked on 1 December means the December before


@dataclass(frozen=True)
class TimeHint:
    """A time expression found in a query: how far back it reaches and, for a month or a
    season, which one."""

    phrase: str
    lookback: timedelta
    calendar: str | None = None
    day: tuple[int | None, int, int] | None = None
    """(year or None, month, day) of a date."""
    period: tuple[int, int, int] | None = None
    """(year, first month, months) of a month, season or year named with its year."""

    def since(self, now: datetime) -> datetime:
        return now - self.lookback

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """The span the expression names: the last `lookback` for relative expressions; the
        latest month or season (3 months) that began at least a week before `now`; a date's day
        and the days either side of it; a period named with its year, with a day either side."""
        if self.day is not None:
            start = datetime.combine(_nearest(self.day, now), datetime.min.time(), now.tzinfo)
            return start - _DAY_SLACK, start + timedelta(days=1) + _DAY_SLACK
        if self.period is not None:
            year, first, months = self.period
            start = datetime(year, first, 1, tzinfo=now.tzinfo)
            return start - _DAY_SLACK, _months_on(start, months) + _DAY_SLACK
        if self.calendar is None:
            return now - self.lookback, now
        first, months = _calendar_months(self.calendar)
        start = now.replace(month=first, day=1, hour=0, minute=0, second=0, microsecond=0)
        if start + _SETTLE > now:
            start = start.replace(year=start.year - 1)
        return start, _months_on(start, months)


def _calendar_months(word: str) -> tuple[int, int]:
    """(first month, months) of a month or season word."""
    if word in _SEASON_START:
        return _SEASON_START[word], 3
    return _MONTHS.index(word) + 1, 1


def _months_on(start: datetime, months: int) -> datetime:
    """The first of the month `months` after `start`'s (which is a first of a month)."""
    end_month = start.month + months
    return start.replace(year=start.year + (end_month - 1) // 12, month=(end_month - 1) % 12 + 1)


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


def _nearest(day: tuple[int | None, int, int], now: datetime) -> date:
    """The date itself, or without a year the nearest such day to `now` (the past one on a
    tie): "on 12 December" asked in January is last December's, "for Dec 31" asked on 28
    December this year's."""
    year, month, dom = day
    if year is not None:
        return date(year, month, dom)
    today = now.date()
    found = []
    for offset in range(-8, 9):  # 29 February comes back within eight years
        try:
            found.append(date(now.year + offset, month, dom))
        except ValueError:
            continue
    return min(found, key=lambda d: (abs((d - today).days), d > today))


def _month(word: str) -> int:
    return next(n for n, name in enumerate(_MONTHS, start=1) if name.startswith(word[:3].lower()))


def _date_of(match: re.Match[str]) -> tuple[int | None, int, int] | None:
    """(year or None, month, day) of a `_DATE` match, None when no such day exists."""
    g = match.groupdict()
    if g["iso_y"]:
        parts: tuple[int | None, int, int] = (int(g["iso_y"]), int(g["iso_m"]), int(g["iso_d"]))
    elif g["dot_y"]:  # day first, unless the second number cannot be a month
        a, b = int(g["dot_a"]), int(g["dot_b"])
        parts = (int(g["dot_y"]), a, b) if b > 12 else (int(g["dot_y"]), b, a)
    elif g["sl_y"]:  # month first, unless the first number cannot be a month
        a, b = int(g["sl_a"]), int(g["sl_b"])
        parts = (int(g["sl_y"]), b, a) if a > 12 else (int(g["sl_y"]), a, b)
    elif g["dm_m"]:
        parts = (int(g["dm_y"]) if g["dm_y"] else None, _month(g["dm_m"]), int(g["dm_d"]))
    else:
        parts = (int(g["md_y"]) if g["md_y"] else None, _month(g["md_m"]), int(g["md_d"]))
    if parts[0] is not None and not MIN_YEAR <= parts[0] <= MAX_YEAR:
        return None  # placeholders ("9999-12-31", "0001-01-01"), not days anyone talked on
    try:
        date(parts[0] or 2000, parts[1], parts[2])  # 2000 is a leap year: 29 February exists
    except ValueError:
        return None
    return parts


def _dates(query: str) -> Iterator[tuple[re.Match[str], tuple[int | None, int, int]]]:
    """Every date of the query: its match and (year or None, month, day)."""
    for match in _DATE.finditer(query):
        day = _date_of(match)
        if day is not None:
            yield match, day


def _ranges(query: str) -> Iterator[tuple[re.Match[str], tuple[int, int, int]]]:
    """Every span of months the query names ending with its year (`_RANGE`), up to two years:
    its match and (year, first month, months); without its own year the first month is the last
    such month before the second."""
    for match in _RANGE.finditer(query):
        g = match.groupdict()
        if (g["r_to"] or "").lower() == "and" and (g["r_lead"] or "").lower() != "between":
            continue  # "January and March 2024" names two months, not the span between them
        first, last, end_year = _month(g["r_m1"]), _month(g["r_m2"]), int(g["r_y2"])
        start_year = int(g["r_y1"]) if g["r_y1"] else end_year - (first > last)
        months = (end_year - start_year) * 12 + last - first + 1
        if MIN_YEAR <= start_year <= end_year <= MAX_YEAR and 1 <= months <= _MAX_RANGE_MONTHS:
            yield match, (start_year, first, months)


def _periods(query: str) -> Iterator[tuple[re.Match[str], tuple[int, int, int]]]:
    """Every span of months, then every month, season or year the query names with its year
    outside those spans and not one end of an open span: its match and (year, first month,
    months); a winter is the one its year's January lies in."""
    ranges = list(_ranges(query))
    yield from ranges
    for match in _PERIOD.finditer(query):
        if any(r.start() <= match.start() < r.end() for r, _ in ranges):
            continue
        g = match.groupdict()
        year = int(g["p_y"] or g["p_year"])
        if not MIN_YEAR <= year <= MAX_YEAR or (g["p_lead"] or "").lower() in _OPEN_LEADS:
            continue
        if g["p_may"]:
            yield match, (year, 5, 1)
        elif g["p_year"]:
            yield match, (year, 1, 12)
        elif g["p_month"]:
            yield match, (year, _month(g["p_month"]), 1)
        else:
            first, months = _calendar_months(g["p_season"].lower())
            yield match, (year - 1 if first == 12 else year, first, months)


def _within(
    day: tuple[int | None, int, int], period: tuple[int, int, int]
) -> tuple[int | None, int, int]:
    """A year-less `day` given the year its month has inside `period` ("on March 3 in 2023"); as
    it is when the period does not hold its month or that day does not exist in that year."""
    year, first, months = period
    for offset in range(first - 1, first - 1 + months):
        if offset % 12 + 1 == day[1]:
            try:
                date(year + offset // 12, day[1], day[2])
            except ValueError:
                return day
            return (year + offset // 12, day[1], day[2])
    return day


def date_spans(query: str) -> list[tuple[int, int]]:
    """Where the query's dates and dated periods are (their words are not names:
    `ctxdb.search.names`), in order, overlapping ones ("5 Jan 2024" holds "Jan 2024") merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(
        [m.span() for m, _ in _dates(query)]
        + [m.span() for m in _PERIOD.finditer(query)]
        + [m.span() for m, _ in _ranges(query)]
    ):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def date_hint(query: str) -> TimeHint | None:
    """The hint of the query's first date (without a year, the year the query's period gives
    it), else of its first dated period (module docstring); None without either."""
    first = next(_dates(query), None)
    period = next(_periods(query), None)
    if first is not None:
        match, day = first
        if day[0] is None and period is not None:
            day = _within(day, period[1])
        return TimeHint(phrase=match.group(0).strip(), lookback=timedelta(0), day=day)
    if period is None:
        return None
    match, span = period
    return TimeHint(phrase=match.group(0).strip(), lookback=timedelta(0), period=span)


def split_time_hint(query: str) -> tuple[str, TimeHint | None]:
    """The query without its first relative time expression, and that expression as a hint;
    without one, the query whole and its first date as the hint.

    A query that is nothing but a time expression is returned unchanged (there is no topic left
    to search for).
    """
    match = _PATTERN.search(query)
    if match is None:
        return query, date_hint(query)
    rest = " ".join((query[: match.start()] + " " + query[match.end() :]).split())
    if not rest:
        return query, None
    calendar = match.group("calendar")
    return rest, TimeHint(
        phrase=match.group(0).strip(),
        lookback=_lookback(match),
        calendar=calendar.lower() if calendar else None,
    )
