"""Asked context (ctxdb.record.role_rows.asked_context, issue 29): a user row that replies to a
question carries it as `context`; the embedding model reads it before the row's text, and the
text arms match it (BM25 field, stems, trigrams).

Real Delta tables, the configured embedding model and the real Elasticsearch node. Alice's
conversation: her first message, an answer that asks where she skied, her reply ("yes, twice last
winter") that never names the place, an answer that asks nothing, and her last message. Bob is
asked the very same question in his own conversation: no search of Alice's may reach his reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest_search import NOW, TENANT, Turn, build_memory, write_landing

from ctxdb.auth.credentials import Principal
from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.model import Embedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name, index_body, index_name
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.role_rows import ASKED_CHARS
from ctxdb.record.run import derive
from ctxdb.search.coverage import with_coverage
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import SearchService, default_embedder
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import EMBEDDINGS, ROLE_ROWS, ROLE_ROWS_SCHEMA
from ctxdb.text import text_hash

QUESTION = "Did you go skiing in Chamonix or in Zermatt?"
REPLY = "yes, twice last winter"


def corpus() -> list[Turn]:
    return [
        Turn(
            "alice",
            "c-ski",
            "t1",
            3,
            "I just got back from the mountains",
            f"Welcome back. Was the snow good? {QUESTION} Both are lovely in March.",
        ),
        Turn("alice", "c-ski", "t2", 2.9, REPLY, "Lucky you. Zermatt is lovely."),
        Turn("alice", "c-ski", "t3", 2.8, "thanks", "You are welcome!"),
        Turn("bob", "c-bob", "t1", 2, "I want to learn the guitar", f"Which style? {QUESTION}"),
        Turn("bob", "c-bob", "t2", 1.9, "jazz mostly", "Start with standards."),
    ]


def landed(settings: Settings) -> DeltaStore:
    write_landing(Path(settings.landing_uri), corpus())
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri)
    return store


def user_rows(store: DeltaStore) -> dict[tuple[str, str], dict]:
    rows = store.read(ROLE_ROWS).filter(pl.col("target") == "user")
    return {(r["conversation_id"], r["turn_id"]): r for r in rows.iter_rows(named=True)}


def cached_vector(store: DeltaStore, model_id: str, digest: str) -> np.ndarray:
    found = store.read(EMBEDDINGS).filter(
        (pl.col("model_id") == model_id) & (pl.col("text_hash") == digest)
    )
    assert found.height >= 1, "no vector cached for the row's text_hash"
    return np.asarray(found["vector"][0].to_list())


@pytest.fixture
def embedder(settings: Settings) -> Iterator[Embedder]:
    yield memory_embedder(settings.embedding, DeltaStore.from_settings(settings))


def test_a_reply_carries_the_question_it_answers(settings: Settings) -> None:
    store = landed(settings)
    derive(store, settings)
    rows = user_rows(store)
    reply = rows[("c-ski", "t2")]
    assert reply["context"] == QUESTION  # the last question of the answer before it
    assert reply["text"] == f"[user.message]\n{REPLY}"  # what search shows is the reply alone
    assert reply["text_hash"] == text_hash(f"{QUESTION}\n{reply['text']}")
    assert rows[("c-bob", "t2")]["context"] == QUESTION  # Bob was asked the same
    for first in (("c-ski", "t1"), ("c-bob", "t1"), ("c-ski", "t3")):  # nothing asked before
        assert rows[first]["context"] == ""
        assert rows[first]["text_hash"] == text_hash(rows[first]["text"])
    others = store.read(ROLE_ROWS).filter(pl.col("target") != "user")
    assert set(others["context"]) == {""}
    assert others["text_hash"].to_list() == [text_hash(t) for t in others["text"]]


def test_the_model_reads_the_question_before_the_reply(
    settings: Settings, embedder: Embedder
) -> None:
    store = landed(settings)
    derive(store, settings)
    report = embed_role_rows(store, embedder, batch_size=8)
    assert report.failed == 0 and report.pending == 0
    reply = user_rows(store)[("c-ski", "t2")]
    stored = cached_vector(store, embedder.model_id, reply["text_hash"])
    asked, alone = embedder.encode([f"{QUESTION}\n{reply['text']}", reply["text"]])
    assert float(np.dot(stored, asked)) > 0.999
    assert float(np.dot(stored, alone)) < 0.95  # the question changed what was embedded
    query = embedder.encode(["how often did I go skiing in Chamonix"])[0]
    assert float(np.dot(stored, query)) > float(np.dot(alone, query)) + 0.1


def test_off_by_setting_the_rows_embed_their_text_alone(settings: Settings) -> None:
    off = settings.replace(derive_asked_context=False)
    store = landed(off)
    derive(store, off)
    rows = store.read(ROLE_ROWS)
    assert set(rows["context"]) == {""}
    assert rows["text_hash"].to_list() == [text_hash(t) for t in rows["text"]]


def test_a_long_question_is_cut(settings: Settings) -> None:
    long = "Which of these " + "very " * 200 + "long options do you like?"
    turns = [
        Turn("carol", "c-long", "t1", 2, "help me choose", f"Here are options. {long}"),
        Turn("carol", "c-long", "t2", 1.9, "the first", "Good choice."),
    ]
    write_landing(Path(settings.landing_uri), turns)
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri)
    derive(store, settings)
    reply = user_rows(store)[("c-long", "t2")]
    assert reply["context"] == long[:ASKED_CHARS]


def test_a_question_mark_that_ends_no_question_is_not_asked(settings: Settings) -> None:
    """A URL's query and a code span's operator are no questions: the reply to an answer holding
    only those has no context. A question keeps its code span, its version number and its dotted
    name, and loses the marks around it."""
    answers = {
        "t1": "Docs: https://example.com/search?q=jsonb, and use `x ? y : z` there.",
        "t3": "See https://example.com/a?b=1 first. **Did `npm ci` finish on Node.js 3.5?**",
    }
    turns = [
        Turn("dave", "c-q", "t1", 3, "where are the docs", answers["t1"]),
        Turn("dave", "c-q", "t2", 2.9, "thanks", "Anytime."),
        Turn("dave", "c-q", "t3", 2.8, "and the index?", answers["t3"]),
        Turn("dave", "c-q", "t4", 2.7, "yes, twice as fast", "Great."),
    ]
    write_landing(Path(settings.landing_uri), turns)
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri)
    derive(store, settings)
    rows = user_rows(store)
    assert rows[("c-q", "t2")]["context"] == ""
    assert rows[("c-q", "t4")]["context"] == "Did `npm ci` finish on Node.js 3.5?"


def test_a_table_derived_before_the_column_gains_it_and_is_embedded_again(
    settings: Settings, embedder: Embedder
) -> None:
    """Upgrade: `role_rows` as an older release wrote it (no `context`; hashes of the text
    alone) embeds as before; the next derivation adds the column, and the next embedding run
    reads the changed rows through the change feed and embeds the question with the reply."""
    store = landed(settings)
    derive(store, settings)
    old_schema = ROLE_ROWS_SCHEMA.remove(ROLE_ROWS_SCHEMA.get_field_index("context"))
    old = store.read(ROLE_ROWS).drop("context")
    old = old.with_columns(pl.col("text").map_elements(text_hash, pl.String).alias("text_hash"))
    store.overwrite(ROLE_ROWS, old, old_schema)
    assert "context" not in store.read(ROLE_ROWS).columns

    first = embed_role_rows(store, embedder, batch_size=8)
    assert first.failed == 0 and first.embedded > 0
    before = user_rows(store)[("c-ski", "t2")]
    cached_vector(store, embedder.model_id, text_hash(before["text"]))  # the reply alone

    derive(store, settings, full=True)
    reply = user_rows(store)[("c-ski", "t2")]
    assert reply["context"] == QUESTION
    again = embed_role_rows(store, embedder, batch_size=8)
    assert again.failed == 0 and again.embedded == 2  # the two replies to a question
    stored = cached_vector(store, embedder.model_id, reply["text_hash"])
    asked = embedder.encode([f"{QUESTION}\n{reply['text']}"])[0]
    assert float(np.dot(stored, asked)) > 0.999


def test_the_text_arms_find_a_reply_by_the_question_it_answers(settings: Settings) -> None:
    """Built into the real node: BM25 (`context` field, stems) and trigrams reach Alice's reply
    by the words of the question it answers, which the reply itself never uses; its hit shows
    the reply as `text` and the question as `context`."""
    build_memory(settings, corpus())
    with make_client(settings) as client:
        service = SearchService(settings, client, default_embedder(settings, client))
        alice = Principal(user_id="alice", tenant=TENANT)
        query = "skiing in Chamonix or Zermatt"
        request = SearchRequest(query=query, top_k=5, knobs={"min_score": 0})
        vector = service.embedder.embed_query(query)
        arms = service.run_arms(service.arm_bodies(alice, request, query, vector, NOW))
        for arm in ("lexical", "trigram"):
            replies = [r for r in arms[arm] if r.key == ("c-ski", "t2") and r.target == "user"]
            assert replies, arm
            assert replies[0].context == QUESTION and REPLY in replies[0].text
            assert {r.conversation_id for r in arms[arm]} == {"c-ski"}  # never Bob's rows
        semantic = [r for r in arms["semantic"] if r.key == ("c-ski", "t2") and r.target == "user"]
        assert semantic and semantic[0].context == QUESTION  # answers_first reads every arm
        covered = with_coverage(arms, query)["trigram"]
        reply = next(r for r in covered if r.key == ("c-ski", "t2") and r.target == "user")
        assert reply.coverage == 1.0  # every query trigram is in the question it answers
        orders, moved = {}, {}
        for first in (False, True):
            asked = SearchRequest(
                query=f"{query}?",
                explain=True,
                knobs={"min_score": 0, "answers_first": first},
            )
            hits = service.search(alice, asked).hits
            orders[first] = [(h.conversation_id, h.turn_id) for h in hits]
            moved[first] = {h.turn_id: h.explain.answers_turn for h in hits if h.explain}
            assert {c for c, _ in orders[first]} == {"c-ski"}
        assert orders[False].index(("c-ski", "t1")) < orders[False].index(("c-ski", "t2"))
        assert orders[True].index(("c-ski", "t2")) < orders[True].index(("c-ski", "t1"))
        assert moved[True]["t2"] == "t1" and moved[False]["t2"] is None  # explain says why


def test_an_index_created_before_the_context_field_gains_it(settings: Settings) -> None:
    """Upgrade: an index whose mapping predates `context` (strict mappings would refuse the
    field) gets it in place when a sync opens it, and the synced rows carry it."""
    prefix = settings.elasticsearch.index_prefix
    with make_client(settings) as client:
        body = index_body(ROWS, 384)
        del body["mappings"]["properties"]["context"]
        client.indices.create(
            index=index_name(prefix, ROWS, 1),
            settings=body["settings"],
            mappings=body["mappings"],
            aliases={alias_name(prefix, ROWS): {"is_write_index": True}},
        )
        build_memory(settings, corpus())
        mapping = client.indices.get_mapping(index=index_name(prefix, ROWS, 1))
        assert "context" in mapping[index_name(prefix, ROWS, 1)]["mappings"]["properties"]
        found = client.search(
            index=alias_name(prefix, ROWS), query={"match": {"context": "Chamonix"}}
        )["hits"]["hits"]
        replies = {(h["_source"]["conversation_id"], h["_source"]["turn_id"]) for h in found}
        assert replies == {("c-ski", "t2"), ("c-bob", "t2")}


def test_an_index_syncs_across_the_upgrade_of_role_rows(
    settings: Settings, embedder: Embedder
) -> None:
    """Upgrade, index side: `role_rows` as an older release wrote it (no `context`) syncs, a
    later change of that old table (an embedding retry, a sweep) syncs incrementally, and the
    sync after the derivation that adds the column reads the changes across it (the older
    version lacks the column): every document ends with the context the table holds."""
    store = landed(settings)
    derive(store, settings)
    old_schema = ROLE_ROWS_SCHEMA.remove(ROLE_ROWS_SCHEMA.get_field_index("context"))
    old = store.read(ROLE_ROWS).drop("context")
    store.overwrite(ROLE_ROWS, old, old_schema)
    embed_role_rows(store, embedder, batch_size=8)
    with make_client(settings) as client:
        sync_live(store, client, settings, model_id=embedder.model_id)
        changed = old.with_columns(pl.col("text").str.replace("thanks", "thanks a lot"))
        store.overwrite(ROLE_ROWS, changed, old_schema)
        again = {r.kind: r for r in sync_live(store, client, settings, model_id=embedder.model_id)}
        assert not again[ROWS].skipped and not again[ROWS].full  # changes of the old table
        derive(store, settings, full=True)
        embed_role_rows(store, embedder, batch_size=8)
        upgraded = sync_live(store, client, settings, model_id=embedder.model_id)
        assert {r.kind: r for r in upgraded}[ROWS].full  # once, across the new column
        alias = alias_name(settings.elasticsearch.index_prefix, ROWS)
        client.indices.refresh(index=alias)
        docs = client.search(index=alias, size=100, query={"term": {"target": "user"}})
        contexts = {
            (h["_source"]["conversation_id"], h["_source"]["turn_id"]): h["_source"].get("context")
            for h in docs["hits"]["hits"]
        }
    assert contexts[("c-ski", "t2")] == QUESTION
    assert not contexts[("c-ski", "t1")]
