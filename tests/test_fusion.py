"""Exact arithmetic of reciprocal-rank fusion, recency lift, dedup and the per-conversation cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctxdb.search.arms import RowHit
from ctxdb.search.fusion import (
    FusionParams,
    answers_first,
    arm_weights,
    cap_per_conversation,
    dedup_turns,
    diversify,
    fuse,
    rank_turns,
    recency_factor,
)
from ctxdb.search.models import SearchRequest, Weights

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def row(
    conv: str, turn: str, age_days: float = 0.0, target: str = "user", score: float = 1.0
) -> RowHit:
    return RowHit(conv, turn, target, NOW - timedelta(days=age_days), score)  # type: ignore[arg-type]


def test_rrf_sums_weighted_reciprocal_ranks_with_k_60() -> None:
    a, b = row("c1", "t1"), row("c2", "t1")
    fused = fuse(
        {"semantic": [a, b], "lexical": [b], "trigram": [a, b]},
        weights=arm_weights(1.5, 0.5),
        recency_weight=0.0,
        half_life_days=7,
        now=NOW,
    )
    by_key = {(f.conversation_id, f.turn_id): f for f in fused}
    assert by_key["c1", "t1"].rrf == pytest.approx(1.5 / 61 + 0.5 / 61)
    assert by_key["c2", "t1"].rrf == pytest.approx(1.5 / 62 + 0.5 / 61 + 0.5 / 62)
    explain = by_key["c2", "t1"].explain
    assert explain is not None
    assert explain.arms["semantic"].rank == 2 and explain.arms["lexical"].rank == 1
    assert explain.arms["lexical"].contribution == pytest.approx(0.5 / 61)
    assert by_key["c1", "t1"].explain.arms["lexical"].rank is None
    assert by_key["c1", "t1"].explain.arms["lexical"].contribution == 0.0


def test_recency_lift_uses_half_life_in_days() -> None:
    fresh, week, two_weeks = row("c1", "t1", 0), row("c2", "t1", 7), row("c3", "t1", 14)
    fused = fuse(
        {"lexical": [two_weeks, week, fresh]},
        weights=arm_weights(1, 1),
        recency_weight=0.8,
        half_life_days=7,
        now=NOW,
    )
    by_conv = {f.conversation_id: f for f in fused}
    assert by_conv["c1"].final == pytest.approx((1 / 63) * (1 + 0.8 * 1.0))
    assert by_conv["c2"].final == pytest.approx((1 / 62) * (1 + 0.8 * 0.5))
    assert by_conv["c3"].final == pytest.approx((1 / 61) * (1 + 0.8 * 0.25))
    assert by_conv["c2"].explain.recency == pytest.approx(0.5)
    assert by_conv["c3"].explain.age_days == pytest.approx(14)
    # the fresh turn ranked last lexically but wins after the lift
    assert [f.conversation_id for f in fused] == ["c1", "c2", "c3"]


def test_zero_recency_weight_keeps_pure_rrf_order() -> None:
    fused = fuse(
        {"lexical": [row("old", "t", 300), row("new", "t", 0)]},
        weights=arm_weights(1, 1),
        recency_weight=0.0,
        half_life_days=7,
        now=NOW,
    )
    assert [f.conversation_id for f in fused] == ["old", "new"]
    assert fused[0].final == pytest.approx(1 / 61)


def test_recency_factor_future_is_age_zero_and_half_life_must_be_positive() -> None:
    assert recency_factor(NOW + timedelta(days=1), NOW, 7) == (0.0, 1.0)
    assert recency_factor(NOW - timedelta(days=3.5), NOW, 7)[1] == pytest.approx(2**-0.5)
    with pytest.raises(ValueError):
        recency_factor(NOW, NOW, 0)


def test_weights_are_clamped_to_0_2() -> None:
    assert arm_weights(5, -1) == {"semantic": 2.0, "lexical": 0.0, "trigram": 0.0}
    assert Weights(semantic=9, lexical=-3, trigram=7, recency=2.5, time=3).model_dump() == {
        "semantic": 2.0,
        "lexical": 0.0,
        "trigram": 2.0,
        "recency": 2.0,
        "time": 2.0,
    }
    fused = fuse(
        {"semantic": [row("c", "t")]},
        weights={"semantic": 7.0},
        recency_weight=9.0,
        half_life_days=7,
        now=NOW,
    )
    assert fused[0].final == pytest.approx((2 / 61) * (1 + 2 * 1.0))


def test_dedup_inside_an_arm_keeps_best_row_so_ranks_count_turns() -> None:
    rows = [row("c1", "t1", target="user"), row("c1", "t1", target="assistant"), row("c2", "t1")]
    assert [r.target for r in dedup_turns(rows)] == ["user", "user"]
    fused = fuse(
        {"lexical": rows}, weights=arm_weights(1, 1), recency_weight=0, half_life_days=7, now=NOW
    )
    assert {(f.conversation_id, f.rrf) for f in fused} == {("c1", 1 / 61), ("c2", 1 / 62)}


def test_matched_targets_and_best_row_across_arms() -> None:
    fused = fuse(
        {
            "semantic": [row("c0", "t0"), row("c1", "t1", target="summary")],
            "lexical": [row("c1", "t1", target="assistant")],
        },
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
    )
    turn = next(f for f in fused if f.conversation_id == "c1")
    assert turn.matched_targets == ["summary", "assistant"]
    assert turn.best_row.target == "assistant"  # lexical rank 1 beats semantic rank 2


def test_cap_per_conversation_and_top_k() -> None:
    fused = fuse(
        {"lexical": [row("a", "1"), row("a", "2"), row("a", "3"), row("b", "1"), row("c", "1")]},
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
    )
    kept = cap_per_conversation(fused, cap=2, top_k=3)
    assert [(f.conversation_id, f.turn_id) for f in kept] == [("a", "1"), ("a", "2"), ("b", "1")]


def test_trigram_weight_is_its_own_unless_unset() -> None:
    assert arm_weights(1, 0.5) == {"semantic": 1.0, "lexical": 0.5, "trigram": 0.5}
    assert arm_weights(1, 0.5, 1.5) == {"semantic": 1.0, "lexical": 0.5, "trigram": 1.5}
    fused = fuse(
        {"lexical": [row("c1", "t1")], "trigram": [row("c2", "t1")]},
        weights=arm_weights(1, 0.5, 1.5),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
    )
    assert [(f.conversation_id, f.rrf) for f in fused] == [("c2", 1.5 / 61), ("c1", 0.5 / 61)]


def test_no_cap_keeps_every_turn_of_a_conversation() -> None:
    rows = [row("a", "1"), row("a", "2"), row("a", "3"), row("b", "1")]
    params = FusionParams(arm_weights(1, 1), recency_weight=0, half_life_days=7, cap=None)
    kept = rank_turns({"lexical": rows}, params, NOW, top_k=3)
    assert [(f.conversation_id, f.turn_id) for f in kept] == [("a", "1"), ("a", "2"), ("a", "3")]
    capped = rank_turns(
        {"lexical": rows}, FusionParams(params.weights, 0, 7, cap=1, rrf_k=5), NOW, top_k=3
    )
    assert [(f.conversation_id, f.turn_id) for f in capped] == [("a", "1"), ("b", "1")]
    assert capped[0].rrf == pytest.approx(1 / 6)  # rrf_k reaches the arithmetic


def test_window_lift_multiplies_turns_inside_the_named_span() -> None:
    inside, outside = row("c1", "t1", age_days=40), row("c2", "t1", age_days=3)
    window = (NOW - timedelta(days=45), NOW - timedelta(days=30))
    fused = fuse(
        {"lexical": [outside, inside]},
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
        window=window,
        window_weight=1.0,
    )
    assert [f.conversation_id for f in fused] == ["c1", "c2"]
    assert fused[0].final == pytest.approx((1 / 62) * 2)
    assert fused[0].explain.in_window is True and fused[1].explain.in_window is False
    unlifted = fuse(
        {"lexical": [outside, inside]},
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
        window_weight=1.0,  # no window: no lift, and explain says so
    )
    assert [f.conversation_id for f in unlifted] == ["c2", "c1"]
    assert unlifted[0].explain.in_window is None


def test_ties_break_by_newer_then_identity() -> None:
    fused = fuse(
        {"semantic": [row("x", "1", 2)], "lexical": [row("y", "1", 1)]},
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        now=NOW,
    )
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
    plain = FusionParams(weights=arm_weights(1, 1), recency_weight=0, half_life_days=7, cap=None)
    keys = lambda turns: [(t.conversation_id, t.turn_id) for t in turns]  # noqa: E731
    assert keys(rank_turns(ranked, plain, NOW, 4)) == [
        ("c1", "t1"),
        ("c1", "t2"),
        ("c2", "t1"),
        ("c1", "t3"),
    ]
    half = FusionParams(**{**plain.__dict__, "diversity": 0.5})
    assert keys(rank_turns(ranked, half, NOW, 4)) == [
        ("c1", "t1"),
        ("c2", "t1"),
        ("c1", "t2"),
        ("c1", "t3"),
    ]
    slight = FusionParams(**{**plain.__dict__, "diversity": 0.01})
    assert keys(rank_turns(ranked, slight, NOW, 4)) == keys(rank_turns(ranked, plain, NOW, 4))
    fused = fuse(ranked, weights=arm_weights(1, 1), recency_weight=0, half_life_days=7, now=NOW)
    assert diversify(fused, 0.0, 4) == fused
    assert len(diversify(fused, 0.9, 1)) == len(fused)  # turns past the pool keep their order


def test_a_reply_moves_just_ahead_of_the_turn_that_asked_what_the_query_asks() -> None:
    """c1/t1's answer asks "what are you majoring in?"; c1/t2's user row replies and carries it
    as context. Fused, the asking turn ranks first; asked "what am I majoring in?",
    answers_first puts the reply just ahead of it and leaves every other turn in place. A reply
    to a question asked in another conversation, or to a question no ranked turn holds, stays
    where it is; so does every reply when the query does not ask its question."""
    question = "What are you majoring in?"
    asking = RowHit("c1", "t1", "assistant", NOW, 1.0, text=f"Nice! {question}")
    reply = RowHit("c1", "t2", "user", NOW, 1.0, text="finance, maybe", context=question)
    other = row("c2", "t1")
    elsewhere = RowHit("c3", "t2", "user", NOW, 1.0, text="biology", context=question)
    unasked = RowHit("c1", "t9", "user", NOW, 1.0, text="yes", context="Did you eat?")
    ranked = {"semantic": [other, asking, elsewhere, unasked, reply]}
    plain = FusionParams(weights=arm_weights(1, 1), recency_weight=0, half_life_days=7, cap=None)
    first = FusionParams(**{**plain.__dict__, "answers_first": True})
    keys = lambda turns: [(t.conversation_id, t.turn_id) for t in turns]  # noqa: E731
    fused_order = [("c2", "t1"), ("c1", "t1"), ("c3", "t2"), ("c1", "t9"), ("c1", "t2")]
    asks = "what am I majoring in?"
    assert keys(rank_turns(ranked, plain, NOW, 5, query=asks)) == fused_order
    lifted = rank_turns(ranked, first, NOW, 5, query=asks)
    assert keys(lifted) == [("c2", "t1"), ("c1", "t2"), ("c1", "t1"), ("c3", "t2"), ("c1", "t9")]
    assert lifted[1].final < lifted[2].final  # reordered, scores as fused
    explained = [t.explain for t in lifted]
    assert [e.answers_turn if e else "?" for e in explained] == [None, "t1", None, None, None]
    assert keys(rank_turns(ranked, first, NOW, 5, query="finance degree")) == fused_order
    fused = fuse(ranked, weights=arm_weights(1, 1), recency_weight=0, half_life_days=7, now=NOW)
    assert keys(answers_first(fused, 1, asks)) == fused_order  # the reply is past a pool of 4


def test_diversity_keeps_a_moved_reply_ahead_and_its_conversation_in_place() -> None:
    """answers_first puts c1's reply (scored lowest) ahead of c1's asking turn (scored highest);
    diversity then ranks c1 by its best remaining score, not by the reply's, so c1 still comes
    before c2 and the reply still precedes the question it answers."""
    question = "What are you majoring in?"
    asking = RowHit("c1", "t1", "assistant", NOW, 1.0, text=f"Nice! {question}")
    reply = RowHit("c1", "t2", "user", NOW, 1.0, text="finance, maybe", context=question)
    other = row("c2", "t1")
    ranked = {"semantic": [asking, other, reply], "lexical": [asking]}
    params = FusionParams(
        weights=arm_weights(1, 1),
        recency_weight=0,
        half_life_days=7,
        cap=None,
        diversity=0.1,
        answers_first=True,
    )
    kept = rank_turns(ranked, params, NOW, 3, query="what am I majoring in?")
    assert [(t.conversation_id, t.turn_id) for t in kept] == [
        ("c1", "t2"),
        ("c1", "t1"),
        ("c2", "t1"),
    ]
