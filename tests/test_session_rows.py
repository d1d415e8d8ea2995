"""Session rows (ctxdb/record/session_rows.py) and the session lift of the kNN arm
(ctxdb/search/sessions.py), on a corpus built by the real pipeline into the real Elasticsearch
node and embedded with the configured model.

Alice's trip conversation has a turn that says nothing about the trip ("yes, take the second
one, the one with the balcony"): only its conversation knows it is about Lisbon. Her other
conversations are about other things; Bob has a Lisbon conversation of his own; the brief app's
conversation has expired.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl
import pytest
from conftest_search import NOW, TENANT, Turn, build_memory, drop_indices
from elasticsearch import Elasticsearch

from ctxdb.auth.credentials import Principal
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.search.models import SearchRequest
from ctxdb.search.relevance import cosine_of
from ctxdb.search.service import SearchService, default_embedder
from ctxdb.settings import Settings
from ctxdb.settings.search import KnobOverrides
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS

BRIEF = "app-brief"
REPLY = ("c-trip", "t2")
"""The trip turn whose own words never name the trip."""
QUERY = "my trip to Lisbon and the flat in the old town"
TOPICS = [
    ("a hotel in Tokyo near Shinjuku station for my work trip", "Three hotels a short walk away."),
    ("camping in the Alps next summer, which campsite", "The one by the lake has showers."),
    ("renting a car in Iceland for the ring road", "A 4x4 is worth it in spring."),
    ("cheap flights to Rome in October", "Tuesday departures are the cheapest."),
    ("a weekend in Paris: museums worth the queue", "The Orsay before the Louvre."),
    ("moving to a new apartment in Berlin, what to check", "Heating costs and the deposit."),
    ("a cabin in Norway for the northern lights", "Tromso cabins in February."),
    ("packing list for a beach week in Crete", "Reef-safe sunscreen and sandals."),
    ("train trip across Switzerland, which pass", "The half-fare card pays off quickly."),
    ("hostel or hotel in Prague old town", "A hotel near the old town square."),
    ("visiting Barcelona in August, too hot?", "Go early; the beaches are crowded."),
    ("a road trip through Scotland's highlands", "Skye needs two days at least."),
]
"""Other trips: each of their rows is nearer the query than the reply's own words."""


def corpus() -> list[Turn]:
    trip = [
        Turn(
            "alice",
            "c-trip",
            "t1",
            3,
            "I'm planning a trip to Lisbon in May and want a flat in the old town, Alfama maybe",
            "Here are two flats in Alfama: one by the cathedral, one with a balcony.",
            title="Lisbon trip in May",
        ),
        Turn(
            "alice",
            "c-trip",
            "t2",
            2.9,
            "yes, take the second one, the one with the balcony",
            "Done, it is reserved for you.",
        ),
    ]
    noise = [
        Turn("alice", f"c-noise-{n}", "t1", 10 + n, prompt, answer)
        for n, (prompt, answer) in enumerate(TOPICS)
    ]
    others = [
        Turn(
            "bob",
            "c-bob-trip",
            "t1",
            1,
            "Lisbon trip: book me a flat in the old town",
            "Booked a flat in Alfama for you.",
        ),
        Turn(
            "alice", "c-brief", "t1", 3, "Lisbon old town flats for my brother", "Noted.", app=BRIEF
        ),
    ]
    return trip + noise + others


@dataclass
class Env:
    settings: Settings
    client: Elasticsearch
    service: SearchService
    store: DeltaStore


@pytest.fixture(scope="module")
def env(tmp_path_factory, es_base_settings: Settings) -> Iterator[Env]:
    """The corpus built by the pipeline; the kNN arm reads 11 rows at top_k 1 (knn_k 1,
    overfetch 1), fewer than Alice's rows, so only expansion (3 sessions, off by default) can
    reach a row it did not."""
    prefix = f"t-sessions-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(
        home=tmp_path_factory.mktemp("sessions-home"),
        elasticsearch={"index_prefix": prefix},
        retention={"rules": [{"tenant": TENANT, "app": BRIEF, "days": 1}]},
        search={"knn_k": 1, "overfetch_rows": 1, "num_candidates": 10, "session_expand": 3},
    )
    store = build_memory(settings, corpus())
    client = make_client(settings)
    yield Env(
        settings, client, SearchService(settings, client, default_embedder(settings, client)), store
    )
    drop_indices(client, prefix)
    client.close()


def session_rows(store: DeltaStore) -> pl.DataFrame:
    return store.read(ROLE_ROWS).filter(pl.col("role") == "session")


def test_one_session_row_per_conversation_from_its_title_and_user_messages(env: Env) -> None:
    rows = session_rows(env.store)
    assert sorted(rows["conversation_id"]) == sorted({t.conversation for t in corpus()})
    trip = rows.filter(pl.col("conversation_id") == "c-trip").row(0, named=True)
    assert trip["text"] == (
        "Lisbon trip in May\n"
        "I'm planning a trip to Lisbon in May and want a flat in the old town, Alfama maybe\n"
        "yes, take the second one, the one with the balcony"
    )
    assert "reserved" not in trip["text"]  # answers are not part of it
    assert (trip["target"], trip["turn_id"], trip["user_id"]) == ("session", "t2", "alice")


def test_session_rows_keep_their_owner_and_expire_with_their_newest_row(env: Env) -> None:
    rows = env.store.read(ROLE_ROWS)
    users = rows.filter(pl.col("target") == "user")
    for session in session_rows(env.store).iter_rows(named=True):
        own = users.filter(pl.col("conversation_id") == session["conversation_id"])
        assert set(own["user_id"]) == {session["user_id"]}
        assert set(own["tenant"]) == {session["tenant"]}
        assert session["expires_at"] == own["expires_at"].max()
    brief = session_rows(env.store).filter(pl.col("conversation_id") == "c-brief")
    assert brief["expires_at"].item() < NOW  # the brief app's one-day rule, as for its turn


def test_session_rows_are_embedded_and_indexed_but_never_hits(env: Env) -> None:
    docs = env.client.search(
        index=alias_name(env.settings.elasticsearch.index_prefix, ROWS),
        query={"term": {"target": "session"}},
        size=50,
        source=["conversation_id", "user_id", "embedding_status"],
    )["hits"]["hits"]
    assert len(docs) == session_rows(env.store).height
    assert {d["_source"]["embedding_status"] for d in docs} == {"ok"}
    alice = Principal(user_id="alice", tenant=TENANT)
    hits = env.service.search(
        alice, SearchRequest(query=QUERY, top_k=25, knobs={"min_score": 0})
    ).hits
    assert hits and all(h.target != "session" for h in hits)


def test_expansion_brings_in_the_sessions_turn_the_knn_arm_missed(env: Env) -> None:
    alice = Principal(user_id="alice", tenant=TENANT)

    def keys(weight: float) -> list[tuple[str, str]]:
        request = SearchRequest(
            query=QUERY, top_k=1, knobs={"session_weight": weight, "min_score": 0}
        )
        knn = env.service.arm_bodies(alice, request, QUERY, [0.0] * 384, NOW)["semantic"]
        assert (
            knn["knn"]["k"]
            < env.store.read(ROLE_ROWS)
            .filter((pl.col("user_id") == "alice") & (pl.col("target") != "session"))
            .height
        )
        vector = env.service.embedder.embed_query(QUERY)
        rows = env.service.semantic_arm(alice, request, QUERY, vector, NOW)["semantic"]
        return [r.key for r in rows]

    assert REPLY not in keys(0)
    lifted = keys(1)
    assert REPLY in lifted[:4]  # among the trip conversation's rows, ahead of every other topic
    assert {k[0] for k in lifted[:4]} == {"c-trip"}


def test_the_lift_stays_inside_the_callers_boundary_and_live_rows(env: Env) -> None:
    alice = Principal(user_id="alice", tenant=TENANT)

    def hits(weight: float) -> list[tuple[str, str]]:
        request = SearchRequest(
            query=QUERY, top_k=3, knobs={"session_weight": weight, "min_score": 0}
        )
        return [(h.conversation_id, h.turn_id) for h in env.service.search(alice, request).hits]

    assert REPLY not in hits(0)
    lifted = hits(2)
    assert REPLY in lifted  # the session brought its turn into the results
    assert {"c-bob-trip", "c-brief"}.isdisjoint(c for c, _ in lifted)  # other owner, expired


def test_without_expansion_the_lift_only_reorders_the_rows_the_knn_arm_read(env: Env) -> None:
    alice = Principal(user_id="alice", tenant=TENANT)
    settings = env.settings.replace(search={"session_expand": 0})
    service = SearchService(settings, env.client, env.service.embedder)
    request = SearchRequest(query=QUERY, top_k=1, knobs={"session_weight": 1, "min_score": 0})
    vector = service.embedder.embed_query(QUERY)
    plain = service.semantic_arm(
        alice,
        request.model_copy(update={"knobs": KnobOverrides(session_weight=0, min_score=0)}),
        QUERY,
        vector,
        NOW,
    )["semantic"]
    lifted = service.semantic_arm(alice, request, QUERY, vector, NOW)["semantic"]
    assert sorted(r.key for r in lifted) == sorted(r.key for r in plain)  # the same rows
    assert REPLY not in {r.key for r in lifted}
    assert [r.key for r in lifted] != [r.key for r in plain]  # in another order


def test_explain_shows_the_session_lift_that_ordered_the_knn_arm(env: Env) -> None:
    """The reply's kNN row explains its rank: its session row's cosine, and its own cosine plus
    the weight times that, the value the arm was ordered by; without the lift both are absent."""
    alice = Principal(user_id="alice", tenant=TENANT)

    def reply_arm(weight: float):
        request = SearchRequest(
            query=QUERY,
            top_k=10,
            explain=True,
            knobs={"session_weight": weight, "min_score": 0},
        )
        hits = env.service.search(alice, request).hits
        hit = next(h for h in hits if (h.conversation_id, h.turn_id) == ("c-trip", "t1"))
        return hit.explain.arms["semantic"]

    lifted, plain = reply_arm(1.5), reply_arm(0)
    assert lifted.session is not None and 0 < lifted.session <= 1
    assert lifted.lifted == pytest.approx(cosine_of(lifted.score) + 1.5 * lifted.session)
    assert (plain.session, plain.lifted) == (None, None)
