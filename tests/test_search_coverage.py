"""Query coverage of the text arms' rows (ctxdb/search/coverage.py) and its place in the fusion:
a text arm counts in proportion to the share of the query a row holds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest_search import SearchEnv

from ctxdb.search.arms import RowHit
from ctxdb.search.coverage import QueryTerms, stem_coverage, trigram_coverage, with_coverage
from ctxdb.search.fusion import fuse, rank_turns
from ctxdb.search.models import SearchRequest
from ctxdb.settings.search import SearchKnobs
from ctxdb.text import stems

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def row(turn: str, text: str, *, conv: str = "c1") -> RowHit:
    return RowHit(conv, turn, "user", NOW, 1.0, text=text, stems=stems(text))


def test_stem_coverage_counts_the_query_stems_a_row_holds() -> None:
    terms = QueryTerms.of("which venues did we decide on for the wedding")
    assert terms.stems == {"venu", "decid", "wed"}
    assert stem_coverage(terms, stems("We decided: the wedding venue is the old mill")) == 1.0
    assert stem_coverage(terms, stems("the wedding is in June")) == pytest.approx(1 / 3)
    assert stem_coverage(terms, stems("nothing in common here")) == 0.0
    assert stem_coverage(QueryTerms.of("the and of"), "anything") == 1.0  # nothing to cover


def test_trigram_coverage_is_partial_for_misspellings_and_exact_for_copies() -> None:
    terms = QueryTerms.of("Greyhoond Trust")
    assert trigram_coverage(terms, "the Greyhound Trust matched us with Pickle") == pytest.approx(
        len(terms.grams - {"hoo", "oon", "ond"}) / len(terms.grams)
    )
    assert trigram_coverage(QueryTerms.of("ticket TX-4471"), "Ticket tx-4471 closed") == 1.0
    assert trigram_coverage(terms, "a rainy day") == 0.0


def test_with_coverage_sets_only_the_text_arms() -> None:
    rows = [row("t1", "the wedding venue"), row("t2", "lunch plans")]
    out = with_coverage({"semantic": rows, "lexical": rows, "trigram": rows}, "wedding venue")
    assert [r.coverage for r in out["semantic"]] == [1.0, 1.0]
    assert [r.coverage for r in out["lexical"]] == [1.0, 0.0]
    assert out["trigram"][0].coverage == 1.0 and out["trigram"][1].coverage == 0.0


def test_a_one_word_text_match_no_longer_outvotes_the_semantic_answer() -> None:
    # the paraphrase case: both text arms' first row shares one word of three with the query
    # ("day"); the turn the semantic arm ranks first shares none
    query = "moving day logistics"
    partial = row("noise", "what day is it today", conv="c2")
    answer = row("answer", "we booked the van for the 14th and packed the kitchen")
    ranked = with_coverage(
        {"semantic": [answer], "lexical": [partial], "trigram": [partial]}, query
    )
    plain = SearchKnobs(
        rrf_k=3, weight_recency=0, coverage_power=0, brief_power=0, min_score=0, answers_first=False
    )
    covered = plain.with_overrides({"coverage_power": 1.0})
    assert rank_turns(ranked, plain, NOW, 2)[0].turn_id == "noise"
    assert rank_turns(ranked, covered, NOW, 2)[0].turn_id == "answer"


def test_contribution_is_weight_times_coverage_power_over_k_plus_rank() -> None:
    ranked = with_coverage({"lexical": [row("t1", "wedding cake tasting")]}, "wedding venue")
    knobs = SearchKnobs(rrf_k=3, weight_lexical=0.8, coverage_power=2.0, weight_recency=0)
    (turn,) = fuse(ranked, knobs, NOW)
    arm = turn.explain.arms["lexical"]
    assert arm.coverage == 0.5
    assert arm.contribution == pytest.approx(0.8 * 0.5**2 / (3 + 1))
    assert turn.explain.knobs.coverage_power == 2.0


@pytest.mark.es
@pytest.mark.model
def test_service_reports_coverage_and_the_request_can_turn_it_off(search_env: SearchEnv) -> None:
    query = "openpyxl formulas lost on save"
    on = search_env.service.search(search_env.alice, SearchRequest(query=query, explain=True))
    arms = on.hits[0].explain.arms
    assert arms["semantic"].coverage == 1.0
    assert 0.0 < arms["lexical"].coverage <= 1.0
    configured = search_env.settings.search.knobs
    assert on.hits[0].explain.knobs.coverage_power == configured.coverage_power
    off = search_env.service.search(
        search_env.alice, SearchRequest(query=query, explain=True, knobs={"coverage_power": 0})
    )
    for hit in off.hits:
        k = configured.rrf_k
        for explain in hit.explain.arms.values():
            if explain.rank is not None:
                assert explain.contribution == pytest.approx(explain.weight / (k + explain.rank))
