"""Brief turns are scaled down in the fusion (ctxdb/search/fusion.py `brevity`): a greeting that
shares a name or a question's shape with the query rarely holds what it asks for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest_search import SearchEnv

from ctxdb.search.arms import RowHit
from ctxdb.search.fusion import fuse
from ctxdb.search.models import SearchRequest
from ctxdb.settings.search import SearchKnobs
from ctxdb.text import content_words

NOW = datetime(2026, 12, 1, tzinfo=UTC)
GREETING = "Good evening Kevin! How are you today?"
TRIP = (
    "Kevin told me about his road trip: Denver first, then two nights in Salt Lake City, and"
    " a rooftop lounge with a view of the whole skyline before flying home"
)


def row(turn: str, text: str, target: str = "user") -> RowHit:
    return RowHit("c1", turn, target, NOW, 1.0, text=text)  # type: ignore[arg-type]


def test_content_words_are_distinct_words_but_stopwords_up_to_enough() -> None:
    assert content_words(GREETING, 50) == 4  # good, evening, kevin, today
    assert content_words("the the and of", 50) == 0
    assert content_words("Kevin kevin KEVIN", 50) == 1
    assert content_words(TRIP, 5) == 5  # a long text stops counting early


def test_unspaced_scripts_count_characters_and_a_cut_prefix_counts_whole_words() -> None:
    assert content_words("我们昨天去了东京的博物馆", 50) == 12  # one word per character
    assert content_words("東京タワーに行きました", 50) == 11
    long_word = "a" * 300  # a prefix cut inside it would count a piece of it
    assert content_words(f"short {long_word} short", 12) == 2


def test_a_summary_rows_anchors_count_for_it() -> None:
    summary = RowHit("c1", "t1", "summary", NOW, 1.0, text="Fixed it.")
    assert brevity([summary], 12, 1.0) == pytest.approx(1 / 12)  # "it" is a stopword
    anchored = RowHit(
        "c1", "t1", "summary", NOW, 1.0, text="Fixed it.", anchors_text="openpyxl formulas save"
    )
    assert brevity([anchored], 12, 1.0) == pytest.approx(4 / 12)


def brevity(rows: list[RowHit], brief_words: int, brief_power: float) -> float:
    """The brevity factor fusion gives the one turn of `rows` (one row per arm)."""
    knobs = SearchKnobs(brief_words=brief_words, brief_power=brief_power)
    ranked = dict(zip(("semantic", "lexical", "trigram"), ([r] for r in rows), strict=False))
    (turn,) = fuse(ranked, knobs, NOW)  # type: ignore[arg-type]
    return turn.brevity


def test_brevity_scales_by_the_longest_matched_row_and_is_off_at_power_zero() -> None:
    assert brevity([row("t1", GREETING)], 12, 0.5) == pytest.approx((4 / 12) ** 0.5)
    assert brevity([row("t1", GREETING), row("t1", TRIP, "assistant")], 12, 0.5) == 1.0
    assert brevity([row("t1", "")], 12, 1.0) == pytest.approx(1 / 12)  # at least one word
    assert brevity([row("t1", GREETING)], 12, 0.0) == 1.0
    assert brevity([row("t1", GREETING)], 4, 0.5) == 1.0


def test_a_greeting_every_arm_ranks_first_falls_behind_the_wordy_answer() -> None:
    ranked = {arm: [row("hello", GREETING), row("trip", TRIP)] for arm in ("semantic", "lexical")}
    plain_knobs = SearchKnobs(
        weight_recency=0, coverage_power=0, brief_power=0, min_score=0, answers_first=False
    )
    plain = fuse(ranked, plain_knobs, NOW)  # type: ignore[arg-type]
    assert [t.turn_id for t in plain] == ["hello", "trip"]
    brief_knobs = plain_knobs.with_overrides({"brief_words": 12, "brief_power": 0.5})
    brief = fuse(ranked, brief_knobs, NOW)  # type: ignore[arg-type]
    assert [t.turn_id for t in brief] == ["trip", "hello"]
    hello = next(t for t in brief if t.turn_id == "hello")
    assert hello.final == pytest.approx(hello.rrf * (4 / 12) ** 0.5)
    assert hello.explain is not None
    e = hello.explain
    assert (e.brevity, e.knobs.brief_words, e.knobs.brief_power) == (
        pytest.approx((4 / 12) ** 0.5),
        12,
        0.5,
    )


@pytest.mark.es
@pytest.mark.model
def test_the_service_applies_the_configured_brevity_and_the_request_overrides_it(
    search_env: SearchEnv,
) -> None:
    query = "openpyxl formulas lost on save"
    s = search_env.settings.search.knobs
    on = search_env.service.search(search_env.alice, SearchRequest(query=query, explain=True))
    assert on.hits
    for hit in on.hits:
        e = hit.explain
        assert e is not None and (e.knobs.brief_words, e.knobs.brief_power) == (
            s.brief_words,
            s.brief_power,
        )
        assert 0 < e.brevity <= 1
    strict = SearchRequest(
        query=query, explain=True, knobs={"brief_words": 200, "brief_power": 1.0}
    )
    scaled = search_env.service.search(search_env.alice, strict).hits
    assert all(h.explain is not None and h.explain.brevity < 1 for h in scaled)
    off = SearchRequest(query=query, explain=True, knobs={"brief_power": 0})
    assert all(
        h.explain is not None and h.explain.brevity == 1.0
        for h in search_env.service.search(search_env.alice, off).hits
    )
