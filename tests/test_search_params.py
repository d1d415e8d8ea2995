"""Every fusion knob resolved from the request and the settings, and the request bodies the
service sends: kNN candidates, total hits, minute-rounded filters, the proximity clauses, the
stemmed field without stopwords and the bounded query-embedding cache."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxdb.contract.identity import Principal
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.index.client import make_client
from ctxdb.search.arms import lexical_body, word_pairs
from ctxdb.search.fusion import cap_of
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import Settings, get_settings
from ctxdb.settings.search import KnobOverrides
from ctxdb.text import stems

ALICE = Principal(user_id="alice", tenant="t1")
NOW = datetime(2026, 12, 2, 12, 30, 17, 250000, tzinfo=UTC)


def service(knobs: dict[str, object] | None = None, **search: object) -> SearchService:
    """A service whose settings have these search `knobs` and other search fields."""
    if knobs:
        search["knobs"] = knobs
    settings: Settings = get_settings().replace(search=search) if search else get_settings()
    return SearchService(settings, make_client(settings))


def test_knobs_take_the_request_else_the_settings() -> None:
    svc = service(
        {
            "weight_semantic": 1.0,
            "weight_lexical": 0.7,
            "weight_trigram": 0.3,
            "weight_recency": 0.1,
            "recency_half_life_days": 30,
            "rrf_k": 10,
            "diversity": 0.25,
        }
    )
    default = svc.knobs(SearchRequest(query="q"))
    assert (default.weight_semantic, default.weight_lexical, default.weight_trigram) == (
        1.0,
        0.7,
        0.3,
    )
    assert (default.weight_recency, default.recency_half_life_days, default.rrf_k) == (0.1, 30, 10)
    assert default.diversity == 0.25
    asked = svc.knobs(
        SearchRequest(
            query="q",
            knobs={
                "weight_semantic": 0.5,
                "weight_trigram": 2.5,
                "weight_recency": 0,
                "recency_half_life_days": 3,
                "rrf_k": 60,
                "diversity": 0.0,
            },
        )
    )
    assert (asked.weight_semantic, asked.weight_lexical, asked.weight_trigram) == (0.5, 0.7, 2.0)
    assert (asked.weight_recency, asked.recency_half_life_days) == (0.0, 3)
    assert (asked.rrf_k, asked.diversity) == (60, 0.0)
    assert service().knobs(SearchRequest(query="q")).answers_first is True
    assert service({"answers_first": False}).knobs(SearchRequest(query="q")).answers_first is False
    asked_off = SearchRequest(query="q", knobs={"answers_first": False})
    assert service().knobs(asked_off).answers_first is False


def test_knobs_are_read_from_the_environment_as_json_or_one_per_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXDB_SEARCH_KNOBS", '{"rrf_k": 20, "diversity": 0.3}')
    monkeypatch.setenv("CTXDB_SEARCH_KNOBS__DIVERSITY", "0.5")
    monkeypatch.setenv("CTXDB_SEARCH_KNOBS__MIN_SCORE", "0")
    knobs = get_settings().search.knobs
    assert (knobs.rrf_k, knobs.diversity, knobs.min_score, knobs.brief_words) == (20, 0.5, 0, 12)
    monkeypatch.setenv("CTXDB_SEARCH_KNOBS__RRF", "3")
    with pytest.raises(ValueError, match="rrf"):
        get_settings()


def test_per_conversation_cap_by_scope_setting_and_request() -> None:
    def cap(svc: SearchService, request: SearchRequest) -> int | None:
        return cap_of(svc.knobs(request), request.scope)

    off = service({"cap_user_scope": False, "max_per_conversation": 2})
    assert cap(off, SearchRequest(query="q")) is None
    assert cap(off, SearchRequest(query="q", knobs={"cap_user_scope": True})) == 2
    both = {"cap_user_scope": True, "max_per_conversation": 4}
    assert cap(off, SearchRequest(query="q", knobs=both)) == 4
    on = service({"cap_user_scope": True, "max_per_conversation": 3})
    assert cap(on, SearchRequest(query="q", scope="agent", agent="ops")) == 3
    assert cap(on, SearchRequest(query="q", knobs={"cap_user_scope": False})) is None
    in_conversation = SearchRequest(query="q", scope="conversation", conversation_id="c1")
    assert cap(on, in_conversation) is None


def test_request_rejects_out_of_range_knobs() -> None:
    for name, value in (
        ("recency_half_life_days", 0),
        ("max_per_conversation", 0),
        ("rrf_k", 0),
        ("diversity", 1.0),
        ("min_score", 1.5),
    ):
        with pytest.raises(ValueError, match=f"knobs.{name}"):
            SearchRequest(query="q", knobs={name: value})


def test_arm_bodies_widen_knn_candidates_and_skip_total_hits() -> None:
    svc = service({"cap_user_scope": False}, num_candidates=10, knn_k=50, overfetch_rows=4)
    request = SearchRequest(query="kelp forest survey", top_k=10)
    bodies = svc.arm_bodies(ALICE, request, request.query, [0.1] * 384, NOW)
    knn = bodies["semantic"]["knn"]
    assert knn["k"] == 120  # max(3 * 10, 20) turns * 4 rows, no cap factor
    assert knn["num_candidates"] >= 1.5 * knn["k"]
    assert all(body["track_total_hits"] is False for body in bodies.values())
    capped = svc.arm_bodies(
        ALICE,
        request.model_copy(update={"knobs": KnobOverrides(cap_user_scope=True)}),
        request.query,
        None,
        NOW,
    )
    assert capped["lexical"]["size"] == 2 * bodies["lexical"]["size"]  # 2 turns per conversation


def test_knn_oversample_asks_for_float_rescoring_unless_off() -> None:
    request = SearchRequest(query="kelp forest survey", top_k=10)
    on = service(knn_oversample=2.5).arm_bodies(ALICE, request, request.query, [0.1] * 384, NOW)
    assert on["semantic"]["knn"]["rescore_vector"] == {"oversample": 2.5}
    off = service(knn_oversample=0).arm_bodies(ALICE, request, request.query, [0.1] * 384, NOW)
    assert "rescore_vector" not in off["semantic"]["knn"]
    with pytest.raises(ValueError, match="knn_oversample"):
        service(knn_oversample=0.5)


def test_filters_are_equal_within_a_minute_and_hide_expiring_rows_early() -> None:
    svc = service()
    request = SearchRequest(query="kelp", days=7)
    first = svc.arm_bodies(ALICE, request, "kelp", None, NOW)
    later = svc.arm_bodies(ALICE, request, "kelp", None, NOW.replace(second=59))
    assert first == later
    clauses = first["lexical"]["query"]["bool"]["filter"][0]["bool"]["filter"]
    ranges = [c["range"] for c in clauses if "range" in c]
    assert {"expires_at": {"gt": "2026-12-02T12:31:00+00:00"}} in ranges
    assert {"ts": {"gte": "2026-11-25T12:30:00+00:00"}} in ranges


def test_proximity_pairs_only_when_boosted() -> None:
    assert word_pairs("mum's surprise party venue") == [
        "mum's surprise",
        "surprise party",
        "party venue",
    ]
    assert word_pairs("kelp") == []
    flt = {"match_all": {}}
    boosted = lexical_body("where is the surprise party", flt, size=5, phrase_boost=1.5)
    clause = boosted["query"]["bool"]["should"][-1]["bool"]
    assert clause["boost"] == 1.5
    assert clause["should"] == [{"match_phrase": {"text": {"query": "surprise party", "slop": 2}}}]
    plain = lexical_body("where is the surprise party", flt, size=5, phrase_boost=0)
    assert "match_phrase" not in str(plain)


def test_stems_drop_stopwords_like_the_indexed_field() -> None:
    assert stems("What were the kids running to") == "kid run"
    assert stems("the of and") == ""


class CountingEmbedder(SentenceTransformerEmbedder):
    """The real model, counting how often it is asked to encode."""

    calls = 0

    def encode(self, texts):  # type: ignore[override]
        CountingEmbedder.calls += 1
        return super().encode(texts)


@pytest.mark.model
def test_query_embeddings_are_cached_and_bounded() -> None:
    model = CountingEmbedder(batch_size=1)
    cached = ModelQueryEmbedder(model, cache_size=2)
    first = cached.embed_query("dusty blue bridesmaid dress")
    assert cached.embed_query("dusty blue bridesmaid dress") == first
    assert CountingEmbedder.calls == 1
    cached.embed_query("greyhound microchip")
    cached.embed_query("allotment onions")  # evicts the least recently used: the dress
    cached.embed_query("dusty blue bridesmaid dress")
    assert CountingEmbedder.calls == 4
    uncached = ModelQueryEmbedder(model, cache_size=0)
    uncached.embed_query("allotment onions")
    uncached.embed_query("allotment onions")
    assert CountingEmbedder.calls == 6
