"""Relative time expressions are cut from the lexical query and returned as a hint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctxdb.search.temporal import split_time_hint


@pytest.mark.parametrize(
    ("query", "rest", "phrase", "days"),
    [
        ("the spreadsheet trouble from last week", "the spreadsheet trouble", "from last week", 14),
        ("docker networking yesterday", "docker networking", "yesterday", 2),
        ("sourdough starter 3 days ago", "sourdough starter", "3 days ago", 4),
        (
            "what did we say about Lisbon in the past 2 months",
            "what did we say about Lisbon",
            "in the past 2 months",
            60,
        ),
        ("pandas merge this week", "pandas merge", "this week", 7),
        ("Last Month: the DST bug", ": the DST bug", "Last Month", 60),
    ],
)
def test_time_expressions_are_split_off(query: str, rest: str, phrase: str, days: int) -> None:
    stripped, hint = split_time_hint(query)
    assert stripped == rest
    assert hint is not None and hint.phrase == phrase
    assert hint.lookback == timedelta(days=days)
    now = datetime(2026, 12, 2, tzinfo=UTC)
    assert hint.since(now) == now - timedelta(days=days)


@pytest.mark.parametrize(
    "query",
    [
        "openpyxl InvalidFileException",
        "weekly report lasts forever",  # words that only contain 'week'/'last'
        "last week",  # nothing but a time expression: nothing to strip it from
    ],
)
def test_queries_without_a_separable_time_expression_are_unchanged(query: str) -> None:
    assert split_time_hint(query) == (query, None)


@pytest.mark.parametrize(
    ("query", "rest", "phrase"),
    [
        (
            "what did I decide about work back in March?",
            "what did I decide about work ?",
            "back in March",
        ),
        ("what was I reading over the summer", "what was I reading", "over the summer"),
        ("what did I decide last spring", "what did I decide", "last spring"),
        ("which shifts was I on last December", "which shifts was I on", "last December"),
    ],
)
def test_months_and_seasons_with_a_lead_are_split_off(query: str, rest: str, phrase: str) -> None:
    stripped, hint = split_time_hint(query)
    assert (stripped, hint.phrase if hint else None) == (rest, phrase)
    assert hint is not None and hint.lookback >= timedelta(days=365)


@pytest.mark.parametrize(
    "query",
    [
        "what may I bring",  # a month name without a lead is a word
        "before her fall",
        "pandas 1.2.3 and numpy 10.1.24",  # version numbers are not dates
        "what happened on 31.02.2024",  # no such day
        "I have 2 mayflies",
        "the cert expires 9999-12-31",  # placeholder years are not days anyone talked on
        "rows from 0001-01-01",
        "we may 2x the budget",  # a number run into a word is no day
        "may 5 people come",  # "may" is a month only capitalized
        "dec 10k rows",
        "3/4 of them",
    ],
)
def test_month_names_and_numbers_that_are_not_times_stay(query: str) -> None:
    assert split_time_hint(query) == (query, None)


NOW = datetime(2024, 1, 28, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "day"),
    [
        ("What kind of pasta did Kate make on 29 Dec 2023?", datetime(2023, 12, 29)),
        ("What class did Kevin have on 21.01.2024?", datetime(2024, 1, 21)),
        ("what happened on the 17th of January, 2024 with a stray cat", datetime(2024, 1, 17)),
        ("the deploy on 2024-01-03", datetime(2024, 1, 3)),
        ("the meeting of 5/13/2023", datetime(2023, 5, 13)),
        ("the meeting of 13/5/2023", datetime(2023, 5, 13)),  # 13 cannot be a month
        ("Dec. 5, 2023 party", datetime(2023, 12, 5)),
        ("the deploy at 2024-01-03T10:00Z", datetime(2024, 1, 3)),
        ("the deploy of 2024/01/03", datetime(2024, 1, 3)),
        ("the meeting of 5.13.2023", datetime(2023, 5, 13)),  # 13 cannot be a month
        # no year: the nearest such day (the past one on a tie)
        ("what is happening on 12 December", datetime(2023, 12, 12)),
        ("the wedding in October 17", datetime(2023, 10, 17)),
        ("what did we plan for January 28th", datetime(2024, 1, 28)),
        ("what do we do on Feb 2", datetime(2024, 2, 2)),
        ("what do we do on March 3", datetime(2024, 3, 3)),  # 35 days ahead, not 331 back
        ("what did we plan for Feb 29", datetime(2024, 2, 29)),
    ],
)
def test_dates_keep_their_text_and_name_their_day(query: str, day: datetime) -> None:
    stripped, hint = split_time_hint(query)
    assert stripped == query  # the date may be the very text to match
    assert hint is not None and hint.phrase in query
    start = day.replace(tzinfo=UTC)
    assert hint.window(NOW) == (start - timedelta(days=1), start + timedelta(days=2))


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("When Akib went on a hike in January 2024?", datetime(2024, 1, 1), datetime(2024, 2, 1)),
        ("the Jan. 2024 offsite", datetime(2024, 1, 1), datetime(2024, 2, 1)),
        ("what did we decide in March of 2023", datetime(2023, 3, 1), datetime(2023, 4, 1)),
        ("what did we decide in March, 2023", datetime(2023, 3, 1), datetime(2023, 4, 1)),
        ("December 2023 plans", datetime(2023, 12, 1), datetime(2024, 1, 1)),
        ("in May 2023", datetime(2023, 5, 1), datetime(2023, 6, 1)),
        ("our trip in the summer of 2023", datetime(2023, 6, 1), datetime(2023, 9, 1)),
        ("the fall 2022 semester", datetime(2022, 9, 1), datetime(2022, 12, 1)),
        ("skiing in the winter of 2024", datetime(2023, 12, 1), datetime(2024, 3, 1)),
        ("what did I read in 2023?", datetime(2023, 1, 1), datetime(2024, 1, 1)),
        ("what did I read during 2022", datetime(2022, 1, 1), datetime(2023, 1, 1)),
    ],
)
def test_periods_named_with_their_year_keep_their_text_and_name_their_span(
    query: str, start: datetime, end: datetime
) -> None:
    stripped, hint = split_time_hint(query)
    assert stripped == query
    assert hint is not None and hint.phrase in query and hint.day is None
    day = timedelta(days=1)
    assert hint.window(NOW) == (start.replace(tzinfo=UTC) - day, end.replace(tzinfo=UTC) + day)


@pytest.mark.parametrize(
    "query",
    [
        "the 2023 budget",  # a year without "in" is a word of the topic
        "in 2023-24",  # a range is not one year
        "in 9999",
        "rows in 20231",
        "section in 2023.4",
        "what rent costs in 2024 dollars",  # a year qualifying a unit names no period
        "the plan in 2023 terms",
    ],
)
def test_years_that_name_no_period_stay(query: str) -> None:
    assert split_time_hint(query) == (query, None)


@pytest.mark.parametrize(
    ("query", "phrase"),
    [
        ("our trip in March, 5 of us went", "in March"),  # a count after a month is no year
        ("in the summer, 3 trips", "in the summer"),
    ],
)
def test_a_month_followed_by_a_count_is_still_a_month(query: str, phrase: str) -> None:
    _, hint = split_time_hint(query)
    assert hint is not None and hint.phrase == phrase and hint.calendar is not None


def test_a_year_before_a_clause_that_may_read_as_a_unit_still_names_its_year() -> None:
    _, hint = split_time_hint("in 2024 prices rose")
    assert hint is not None and hint.phrase == "in 2024" and hint.period == (2024, 1, 12)


@pytest.mark.parametrize(
    "query",
    [
        "what changed since January 2024",  # one end of an open span: no period's lift
        "before March 2024",
        "January and March 2024",  # two months, not the span between them
        "from January 2020 to March 2024",  # more than two years is no span to lift
        "in 2023\u201324",  # a range with an en dash
    ],
)
def test_an_end_of_a_span_names_no_period(query: str) -> None:
    assert split_time_hint(query) == (query, None)


@pytest.mark.parametrize(
    ("query", "period"),
    [
        ("what did we do from January to March 2024", (2024, 1, 3)),
        ("from Jan 2024 to Mar 2024", (2024, 1, 3)),
        ("between January and March 2024", (2024, 1, 3)),
        ("between Nov 2023 and Feb 2024", (2023, 11, 4)),
        ("from Nov to Feb 2024", (2023, 11, 4)),  # the November before that February
        ("the June\u2013July 2023 trip", (2023, 6, 2)),
        ("what did Jan say from May to June 2024", (2024, 5, 2)),
    ],
)
def test_a_span_of_months_names_all_of_them(query: str, period: tuple[int, int, int]) -> None:
    stripped, hint = split_time_hint(query)
    assert stripped == query
    assert hint is not None and hint.period == period and hint.phrase in query


def test_lower_case_may_with_a_year_after_in_is_the_month() -> None:
    _, hint = split_time_hint("what did we plan in may 2024")
    assert hint is not None and hint.period == (2024, 5, 1)


@pytest.mark.parametrize(
    ("query", "day"),
    [
        ("what did we do on March 3 in 2023", datetime(2023, 3, 3)),
        ("in 2023, what happened on Dec 24", datetime(2023, 12, 24)),
        ("on Dec 24 in the winter of 2024", datetime(2023, 12, 24)),
    ],
)
def test_a_date_without_a_year_takes_the_year_of_the_period(query: str, day: datetime) -> None:
    _, hint = split_time_hint(query)
    assert hint is not None and hint.day == (day.year, day.month, day.day)


def test_a_date_comes_before_a_period_and_a_relative_expression_before_both() -> None:
    _, hint = split_time_hint("in January 2024, what was on 5 Feb 2024")
    assert hint is not None and hint.day == (2024, 2, 5)
    stripped, hint = split_time_hint("the January 2024 invoices from last week")
    assert stripped == "the January 2024 invoices"
    assert hint is not None and hint.period is None and hint.phrase == "from last week"


def test_a_relative_expression_comes_before_a_date() -> None:
    stripped, hint = split_time_hint("the 12 December concert from last week")
    assert stripped == "the 12 December concert"
    assert hint is not None and hint.day is None and hint.phrase == "from last week"


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what bad news did I get in April", datetime(2026, 4, 1), datetime(2026, 5, 1)),
        ("which shifts was I on last December", datetime(2025, 12, 1), datetime(2026, 1, 1)),
        ("what did I give up in the spring", datetime(2026, 3, 1), datetime(2026, 6, 1)),
        ("where did we go over the winter", datetime(2025, 12, 1), datetime(2026, 3, 1)),
    ],
)
def test_calendar_hints_name_the_latest_such_span(
    query: str, start: datetime, end: datetime
) -> None:
    now = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)  # December has barely begun: last December
    _, hint = split_time_hint(query)
    assert hint is not None
    assert hint.window(now) == (start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))


def test_relative_hints_name_the_span_up_to_now() -> None:
    now = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    _, hint = split_time_hint("the spreadsheet trouble from last week")
    assert hint is not None and hint.window(now) == (now - timedelta(days=14), now)
