"""Search over memory built by the real pipeline (generator, landing, derivation, embedding,
indexing), then search, known-turn reconstruction and pull as the owner, and nobody else."""

from __future__ import annotations

import pytest
from conftest_search import build_sample_memory

from ctxdb.contract.identity import Principal
from ctxdb.sample.generate import generate_events
from ctxdb.sample.topics import TOPICS
from ctxdb.search import NotFound, SearchRequest, SearchService
from ctxdb.serve.resolve import Resolver

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]


def test_pipeline_built_memory_is_searchable_and_reloadable(settings, query_embedder) -> None:
    generated = generate_events(users=2, conversations=10, seed=11)
    client = build_sample_memory(settings, generated, query_embedder)
    service = SearchService(settings, client, query_embedder)
    topics = {t.key: t for t in TOPICS}

    fact = next(f for f in generated.facts if f.hosted_ref and not f.error)
    owner = Principal(user_id=fact.user_id, tenant=fact.tenant)
    other = next(f for f in generated.facts if f.user_id != fact.user_id)
    stranger = Principal(user_id=other.user_id, tenant=other.tenant)

    exact = topics[fact.topic].exact[0]
    hits = service.search(owner, SearchRequest(query=exact, top_k=10)).hits
    owner_turns = {
        (f.conversation_id, f.turn_id)
        for f in generated.facts
        if f.user_id == fact.user_id and f.topic == fact.topic
    }
    assert hits and (hits[0].conversation_id, hits[0].turn_id) in owner_turns
    assert all(h.snippets and h.snippets[0].source == "turn_log" for h in hits)

    view = service.turn(owner, fact.conversation_id, fact.turn_id)
    assert view.messages[0].role == "user" and view.messages[0].text == fact.prompt
    assert view.messages[-1].role == "assistant" and fact.answer.startswith(
        view.messages[-1].text[:40]
    )
    assert [f.ref for f in view.files] == [fact.hosted_ref]

    resolver = Resolver(settings, client)
    pulled = resolver.pull(owner, fact.hosted_ref)
    stored = {
        rel.rsplit("/", 1)[-1]: data
        for rel, data in generated.files.items()
        if f"conv_{fact.conversation_id}/turn_{fact.turn_id}/" in rel
    }
    assert pulled.data == stored[pulled.filename]

    with pytest.raises(NotFound):
        service.turn(stranger, fact.conversation_id, fact.turn_id)
    with pytest.raises(NotFound):
        resolver.pull(stranger, fact.hosted_ref)
    stranger_hits = service.search(stranger, SearchRequest(query=exact, top_k=50)).hits
    assert fact.conversation_id not in {h.conversation_id for h in stranger_hits}

    first = service.search(owner, SearchRequest(conversation_id=fact.conversation_id, ordinal=1))
    first_fact = min(
        (f for f in generated.facts if f.conversation_id == fact.conversation_id),
        key=lambda f: f.started_at,
    )
    assert [h.turn_id for h in first.hits] == [first_fact.turn_id]
