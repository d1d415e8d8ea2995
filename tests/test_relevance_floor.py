"""The relevance floor (issue 27 item 8) on a small memory built by the real pipeline (generator,
landing, derivation, embedding, indexing): a query about a topic the memory never mentions
returns no hits or only weak ones, a real question still finds its turn, and `min_score` per
request moves the floor (HTTP and MCP take it too)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import delete_prefix_indices
from conftest_search import build_sample_memory
from fastapi.testclient import TestClient

from ctxdb.auth.credentials import TokenStore
from ctxdb.contract.identity import Principal
from ctxdb.index.mappings import TURNS, alias_name
from ctxdb.sample.generate import Fact, generate_events
from ctxdb.sample.topics import TOPICS
from ctxdb.search import SearchRequest, SearchService
from ctxdb.search.models import WEAK_BELOW
from ctxdb.serve.http import create_app
from ctxdb.settings import Settings
from ctxdb.settings.search import SearchKnobs

MIN_SCORE = SearchKnobs().min_score

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

ABSENT = "opentelemetry"


@dataclass
class Memory:
    settings: Settings
    service: SearchService
    owner: Principal
    facts: list[Fact]
    token: str


@pytest.fixture(scope="module")
def memory(tmp_path_factory, es_base_settings: Settings, query_embedder) -> Iterator[Memory]:
    """One user, three conversations, ten turns (generator seed 1), through the whole pipeline."""
    prefix = f"t-floor-{uuid.uuid4().hex[:10]}"
    home = tmp_path_factory.mktemp("floor-home")
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    generated = generate_events(
        users=1, conversations=3, seed=1, malformed_ratio=0, duplicate_ratio=0
    )
    client = build_sample_memory(settings, generated, query_embedder)
    fact = generated.facts[0]
    owner = Principal(user_id=fact.user_id, tenant=fact.tenant)
    token = TokenStore(settings.tokens_path).issue(owner.user_id, tenant=owner.tenant)
    yield Memory(
        settings, SearchService(settings, client, query_embedder), owner, generated.facts, token
    )
    delete_prefix_indices(client, prefix)


def test_the_memory_has_ten_turns_and_never_mentions_the_absent_topic(memory: Memory) -> None:
    client = memory.service.client
    alias = alias_name(memory.settings.elasticsearch.index_prefix, TURNS)
    assert client.count(index=alias)["count"] == len(memory.facts) == 10
    texts = " ".join(f"{f.prompt} {f.answer}" for f in memory.facts).lower()
    assert "telemetry" not in texts


def test_an_absent_topic_returns_no_hits_or_only_weak_ones(memory: Memory) -> None:
    response = memory.service.search(memory.owner, SearchRequest(query=ABSENT, top_k=10))
    assert len(response.hits) < 10
    assert all(h.weak and h.relevance is not None for h in response.hits)
    assert all(MIN_SCORE <= h.relevance < WEAK_BELOW for h in response.hits)  # type: ignore[operator]
    unfloored = memory.service.search(
        memory.owner, SearchRequest(query=ABSENT, top_k=10, knobs={"min_score": 0})
    )
    assert len(unfloored.hits) == 10  # what the floor takes away: every turn of the memory
    assert any(h.relevance is not None and h.relevance < MIN_SCORE for h in unfloored.hits)


def test_a_real_question_still_finds_its_turn_as_a_strong_hit(memory: Memory) -> None:
    topics = {t.key: t for t in TOPICS}
    fact = memory.facts[0]
    question = topics[fact.topic].queries[0]
    hits = memory.service.search(memory.owner, SearchRequest(query=question, top_k=10)).hits
    relevant = {(f.conversation_id, f.turn_id) for f in memory.facts if f.topic == fact.topic}
    assert hits and (hits[0].conversation_id, hits[0].turn_id) in relevant
    assert not hits[0].weak and hits[0].relevance >= WEAK_BELOW  # type: ignore[operator]
    assert any(h.weak for h in hits) or len(hits) < 10  # unrelated turns are flagged or gone


def test_min_score_per_request_moves_the_floor(memory: Memory) -> None:
    topics = {t.key: t for t in TOPICS}
    question = topics[memory.facts[0].topic].queries[0]
    everything = memory.service.search(
        memory.owner, SearchRequest(query=question, top_k=10, knobs={"min_score": 0})
    ).hits
    assert len(everything) == 10
    strengths = sorted((h.relevance for h in everything), reverse=True)  # type: ignore[type-var]
    floor = (strengths[1] + strengths[2]) / 2  # between the second and third strongest turns
    strict = memory.service.search(
        memory.owner, SearchRequest(query=question, top_k=10, knobs={"min_score": floor})
    ).hits
    assert len(strict) == 2
    assert [h.turn_id for h in strict] == [
        h.turn_id
        for h in everything
        if h.relevance >= floor  # type: ignore[operator]
    ]


def test_min_score_over_http_and_its_bounds(memory: Memory) -> None:
    http = TestClient(create_app(memory.settings, memory.service.client, memory.service.embedder))
    auth = {"Authorization": f"Bearer {memory.token}"}
    body = {"query": ABSENT, "top_k": 10}
    floored = http.post("/v1/search", json=body, headers=auth).json()["hits"]
    unfloored = http.post(
        "/v1/search", json=body | {"knobs": {"min_score": 0}}, headers=auth
    ).json()["hits"]
    assert len(floored) < len(unfloored) == 10
    assert all(h["weak"] is True for h in floored)
    bad = http.post("/v1/search", json=body | {"knobs": {"min_score": 1.5}}, headers=auth)
    assert bad.status_code == 422 and "min_score" in bad.text
