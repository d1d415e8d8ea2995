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
