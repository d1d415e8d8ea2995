"""Exact arithmetic of reciprocal-rank fusion, recency lift, dedup and the per-conversation cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctxdb.search.arms import RowHit
from ctxdb.search.fusion import (
    age_days,
    cap_per_conversation,
    dedup_turns,
    diversify,
    fuse,
    rank_turns,
)
from ctxdb.search.models import SearchRequest
from ctxdb.settings.search import PLAIN_RRF, SearchKnobs

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def knobs(**changes: object) -> SearchKnobs:
    """PLAIN_RRF with `changes`, validated as a request's overrides are."""
    return PLAIN_RRF.with_overrides(changes)


def keys(turns: list) -> list[tuple[str, str]]:
    return [(t.conversation_id, t.turn_id) for t in turns]


def row(
    conv: str, turn: str, age_days: float = 0.0, target: str = "user", score: float = 1.0
) -> RowHit:
    return RowHit(conv, turn, target, NOW - timedelta(days=age_days), score)  # type: ignore[arg-type]


def test_rrf_sums_weighted_reciprocal_ranks_with_k_60() -> None:
    a, b = row("c1", "t1"), row("c2", "t1")
    fused = fuse(
        {"semantic": [a, b], "lexical": [b], "trigram": [a, b]},
        knobs(weight_semantic=1.5, weight_lexical=0.5, weight_trigram=0.5),
        NOW,
    )
    by_key = {(f.conversation_id, f.turn_id): f for f in fused}
    assert by_key["c1", "t1"].rrf == pytest.approx(1.5 / 61 + 0.5 / 61)
    assert by_key["c2", "t1"].rrf == pytest.approx(1.5 / 62 + 0.5 / 61 + 0.5 / 62)
    explain = by_key["c2", "t1"].explain
    assert explain.arms["semantic"].rank == 2 and explain.arms["lexical"].rank == 1
    assert explain.arms["lexical"].contribution == pytest.approx(0.5 / 61)
    assert explain.arms["semantic"].weight == 1.5
    assert by_key["c1", "t1"].explain.arms["lexical"].rank is None
    assert by_key["c1", "t1"].explain.arms["lexical"].contribution == 0.0
    assert explain.knobs.rrf_k == 60  # explain carries every knob the search ranked under


def test_recency_lift_uses_half_life_in_days() -> None:
    fresh, week, two_weeks = row("c1", "t1", 0), row("c2", "t1", 7), row("c3", "t1", 14)
    fused = fuse({"lexical": [two_weeks, week, fresh]}, knobs(weight_recency=0.8), NOW)
    by_conv = {f.conversation_id: f for f in fused}
    assert by_conv["c1"].final == pytest.approx((1 / 63) * (1 + 0.8 * 1.0))
    assert by_conv["c2"].final == pytest.approx((1 / 62) * (1 + 0.8 * 0.5))
    assert by_conv["c3"].final == pytest.approx((1 / 61) * (1 + 0.8 * 0.25))
    assert by_conv["c2"].explain.recency == pytest.approx(0.5)
    assert by_conv["c3"].explain.age_days == pytest.approx(14)
    # the fresh turn ranked last lexically but wins after the lift
    assert [f.conversation_id for f in fused] == ["c1", "c2", "c3"]


def test_zero_recency_weight_keeps_pure_rrf_order() -> None:
    fused = fuse({"lexical": [row("old", "t", 300), row("new", "t", 0)]}, PLAIN_RRF, NOW)
    assert [f.conversation_id for f in fused] == ["old", "new"]
    assert fused[0].final == pytest.approx(1 / 61)


def test_future_is_age_zero_and_half_life_must_be_positive() -> None:
    assert age_days(NOW + timedelta(days=1), NOW) == 0.0
    (turn,) = fuse(
        {"lexical": [row("c", "t", 3.5)]}, knobs(weight_recency=1, recency_half_life_days=7), NOW
    )
    assert turn.recency == pytest.approx(2**-0.5)
    with pytest.raises(ValueError, match="recency_half_life_days"):
        knobs(recency_half_life_days=0)


def test_weights_are_clamped_to_0_2() -> None:
    clamped = knobs(
        weight_semantic=9, weight_lexical=-3, weight_trigram=7, weight_recency=2.5, weight_time=3
    )
    assert (
        clamped.weight_semantic,
        clamped.weight_lexical,
        clamped.weight_trigram,
        clamped.weight_recency,
        clamped.weight_time,
    ) == (2.0, 0.0, 2.0, 2.0, 2.0)
    fused = fuse({"semantic": [row("c", "t")]}, knobs(weight_semantic=7, weight_recency=9), NOW)
    assert fused[0].final == pytest.approx((2 / 61) * (1 + 2 * 1.0))


def test_dedup_inside_an_arm_keeps_best_row_so_ranks_count_turns() -> None:
    rows = [row("c1", "t1", target="user"), row("c1", "t1", target="assistant"), row("c2", "t1")]
    assert [r.target for r in dedup_turns(rows)] == ["user", "user"]
    fused = fuse({"lexical": rows}, PLAIN_RRF, NOW)
    assert {(f.conversation_id, f.rrf) for f in fused} == {("c1", 1 / 61), ("c2", 1 / 62)}


def test_matched_targets_and_best_row_across_arms() -> None:
    fused = fuse(
        {
            "semantic": [row("c0", "t0"), row("c1", "t1", target="summary")],
            "lexical": [row("c1", "t1", target="assistant")],
        },
        PLAIN_RRF,
        NOW,
    )
    turn = next(f for f in fused if f.conversation_id == "c1")
    assert turn.matched_targets == ["summary", "assistant"]
    assert turn.best_row.target == "assistant"  # lexical rank 1 beats semantic rank 2


def test_cap_per_conversation_and_top_k() -> None:
    fused = fuse(
        {"lexical": [row("a", "1"), row("a", "2"), row("a", "3"), row("b", "1"), row("c", "1")]},
        PLAIN_RRF,
        NOW,
    )
    kept = cap_per_conversation(fused, 2, 3, lambda turn: turn.conversation_id)
    assert keys(kept) == [("a", "1"), ("a", "2"), ("b", "1")]


def test_trigram_weight_is_its_own() -> None:
    fused = fuse(
        {"lexical": [row("c1", "t1")], "trigram": [row("c2", "t1")]},
        knobs(weight_lexical=0.5, weight_trigram=1.5),
        NOW,
    )
    assert [(f.conversation_id, f.rrf) for f in fused] == [("c2", 1.5 / 61), ("c1", 0.5 / 61)]


def test_the_cap_applies_as_its_knobs_and_the_scope_say() -> None:
    rows = {"lexical": [row("a", "1"), row("a", "2"), row("a", "3"), row("b", "1")]}
    kept = rank_turns(rows, PLAIN_RRF, NOW, top_k=3)
    assert keys(kept) == [("a", "1"), ("a", "2"), ("a", "3")]
    cap = knobs(cap_user_scope=True, max_per_conversation=1, rrf_k=5)
    capped = rank_turns(rows, cap, NOW, top_k=3)
    assert keys(capped) == [("a", "1"), ("b", "1")]
    assert capped[0].rrf == pytest.approx(1 / 6)  # rrf_k reaches the arithmetic
    assert keys(rank_turns(rows, cap, NOW, 3, scope="agent")) == keys(capped)
    assert keys(rank_turns(rows, cap, NOW, 3, scope="conversation")) == keys(kept)


def test_window_lift_multiplies_turns_inside_the_named_span() -> None:
    inside, outside = row("c1", "t1", age_days=40), row("c2", "t1", age_days=3)
    window = (NOW - timedelta(days=45), NOW - timedelta(days=30))
    lift = knobs(weight_time=1.0)
    fused = fuse({"lexical": [outside, inside]}, lift, NOW, window)
    assert [f.conversation_id for f in fused] == ["c1", "c2"]
    assert fused[0].final == pytest.approx((1 / 62) * 2)
    assert fused[0].explain.in_window is True and fused[1].explain.in_window is False
    unlifted = fuse({"lexical": [outside, inside]}, lift, NOW)  # no window: no lift
    assert [f.conversation_id for f in unlifted] == ["c2", "c1"]
    assert unlifted[0].explain.in_window is None


def test_ties_break_by_newer_then_identity() -> None:
    fused = fuse({"semantic": [row("x", "1", 2)], "lexical": [row("y", "1", 1)]}, PLAIN_RRF, NOW)
    assert [f.conversation_id for f in fused] == ["y", "x"]


def test_request_validation_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="conversation_id"):
        SearchRequest(query="x", scope="conversation")
    with pytest.raises(ValueError, match="agent"):
        SearchRequest(query="x", scope="agent")
    with pytest.raises(ValueError, match="ordinal"):
        SearchRequest(conversation_id="c", ordinal=0)
    with pytest.raises(ValueError, match="targets"):
        SearchRequest(query="x", targets=[])
    with pytest.raises(ValueError):
        SearchRequest(query="x", top_k=51)


def test_diversity_scales_each_further_turn_of_a_conversation() -> None:
    """Greedy selection: c1's second turn (final 1/62) is scaled by 0.5 below c2's first (1/63);
    without diversity the fused order stands."""
    a1, a2, a3, b1 = row("c1", "t1"), row("c1", "t2"), row("c1", "t3"), row("c2", "t1")
    ranked = {"semantic": [a1, a2, b1, a3]}
    assert keys(rank_turns(ranked, PLAIN_RRF, NOW, 4)) == [
        ("c1", "t1"),
        ("c1", "t2"),
        ("c2", "t1"),
        ("c1", "t3"),
    ]
    assert keys(rank_turns(ranked, knobs(diversity=0.5), NOW, 4)) == [
        ("c1", "t1"),
        ("c2", "t1"),
        ("c1", "t2"),
        ("c1", "t3"),
    ]
    slight = knobs(diversity=0.01)
    assert keys(rank_turns(ranked, slight, NOW, 4)) == keys(rank_turns(ranked, PLAIN_RRF, NOW, 4))
    fused = fuse(ranked, PLAIN_RRF, NOW)

    def conversation(turn: object) -> str:
        return turn.conversation_id  # type: ignore[attr-defined]

    def final(turn: object) -> float:
        return turn.final  # type: ignore[attr-defined]

    assert diversify(fused, 0.0, 4, conversation, final) == fused
    assert len(diversify(fused, 0.9, 1, conversation, final)) == len(fused)  # past the pool


def test_a_reply_moves_just_ahead_of_the_turn_that_asked_what_the_query_asks() -> None:
    """c1/t1's answer asks "what are you majoring in?"; c1/t2's user row replies and carries it
    as context. Fused, the asking turn ranks first; asked "what am I majoring in?",
    answers_first puts the reply just ahead of it and leaves every other turn in place. A reply
    to a question asked in another conversation, or to a question no ranked turn holds, stays
    where it is; so does every reply when the query does not ask its question, and a reply
    past the pool of 4 x top_k."""
    question = "What are you majoring in?"
    asking = RowHit("c1", "t1", "assistant", NOW, 1.0, text=f"Nice! {question}")
    reply = RowHit("c1", "t2", "user", NOW, 1.0, text="finance, maybe", context=question)
    other = row("c2", "t1")
    elsewhere = RowHit("c3", "t2", "user", NOW, 1.0, text="biology", context=question)
    unasked = RowHit("c1", "t9", "user", NOW, 1.0, text="yes", context="Did you eat?")
    ranked = {"semantic": [other, asking, elsewhere, unasked, reply]}
    first = knobs(answers_first=True)
    fused_order = [("c2", "t1"), ("c1", "t1"), ("c3", "t2"), ("c1", "t9"), ("c1", "t2")]
    asks = "what am I majoring in?"
    assert keys(rank_turns(ranked, PLAIN_RRF, NOW, 5, query=asks)) == fused_order
    lifted = rank_turns(ranked, first, NOW, 5, query=asks)
    assert keys(lifted) == [("c2", "t1"), ("c1", "t2"), ("c1", "t1"), ("c3", "t2"), ("c1", "t9")]
    assert lifted[1].final < lifted[2].final  # reordered, scores as fused
    assert [t.explain.answers_turn for t in lifted] == [None, "t1", None, None, None]
    assert keys(rank_turns(ranked, first, NOW, 5, query="finance degree")) == fused_order
    # asked_coverage: the share of the query's stems ("am", "major") the question must hold
    strict, loose = (knobs(answers_first=True, asked_coverage=share) for share in (0.6, 0.3))
    assert keys(rank_turns(ranked, strict, NOW, 5, query=asks)) == fused_order  # holds 1 of 2
    wider = "what am I majoring in for my degree?"  # the question holds 1 of its 3 stems
    assert keys(rank_turns(ranked, first, NOW, 5, query=wider)) == fused_order
    assert keys(rank_turns(ranked, loose, NOW, 5, query=wider)) == keys(lifted)
    assert keys(rank_turns(ranked, first, NOW, 1, query=asks)) == fused_order[:1]


def test_diversity_keeps_a_moved_reply_ahead_and_its_conversation_in_place() -> None:
    """answers_first puts c1's reply (scored lowest) ahead of c1's asking turn (scored highest);
    diversity then ranks c1 by its best remaining score, not by the reply's, so c1 still comes
    before c2 and the reply still precedes the question it answers."""
    question = "What are you majoring in?"
    asking = RowHit("c1", "t1", "assistant", NOW, 1.0, text=f"Nice! {question}")
    reply = RowHit("c1", "t2", "user", NOW, 1.0, text="finance, maybe", context=question)
    other = row("c2", "t1")
    ranked = {"semantic": [asking, other, reply], "lexical": [asking]}
    params = knobs(diversity=0.1, answers_first=True)
    kept = rank_turns(ranked, params, NOW, 3, query="what am I majoring in?")
    assert keys(kept) == [("c1", "t2"), ("c1", "t1"), ("c2", "t1")]


def test_knobs_take_the_settings_then_the_request_and_name_the_valid_ones() -> None:
    """A request's knobs override the configured ones by name, each checked by the one model
    (bounds, types, the weights' clamp); an unknown name is refused with the valid names."""
    request = SearchRequest(query="q", knobs={"rrf_k": "7", "weight_lexical": 5})
    ranked = request.ranking_knobs(PLAIN_RRF)
    assert (ranked.rrf_k, ranked.weight_lexical, ranked.diversity) == (7, 2.0, 0.0)
    assert SearchRequest(query="q").ranking_knobs(PLAIN_RRF) is PLAIN_RRF
    with pytest.raises(ValueError, match="unknown knob.*rrf.*valid knobs: rrf_k, weight_"):
        SearchRequest(query="q", knobs={"rrf": 3})
    with pytest.raises(ValueError, match="diversity"):
        SearchRequest(query="q", knobs={"diversity": 1.0})
    with pytest.raises(ValueError, match="unknown knob.*valid knobs"):
        PLAIN_RRF.with_overrides({"nope": 1})
