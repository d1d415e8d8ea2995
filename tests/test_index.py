"""Incremental bulk indexing of rows and turns into the real Elasticsearch node.

Real Delta tables in tmp_path, the real node (unique index prefix) and the real model.
"""

from __future__ import annotations

import polars as pl
import pytest
from conftest_index import role_rows, turn_tables, write_rows

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.bulk import ElasticsearchUnavailable
from ctxdb.index.checks import count_mismatches
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, turn_doc_id
from ctxdb.index.status import all_status, expired_ids
from ctxdb.index.sync import sync_live
from ctxdb.lifecycle.reindex import reindex
from ctxdb.storage.tables import EMBEDDINGS, EMBEDDINGS_SCHEMA, INDEX_FAILURES, ROLE_ROWS

pytestmark = [pytest.mark.es, pytest.mark.model]

MODEL = "all-MiniLM-L6-v2"


def rows_alias(settings) -> str:
    return alias_name(settings.elasticsearch.index_prefix, ROWS)


def has_vector(es, alias: str, doc_id: str) -> bool:
    """Whether the document's vector is indexed (ES 9 leaves vectors out of `_source`)."""
    query = {
        "bool": {"filter": [{"ids": {"values": [doc_id]}}, {"exists": {"field": "embedding"}}]}
    }
    return es.count(index=alias, query=query)["count"] == 1


def bm25(es, alias: str, query: str) -> list[str]:
    response = es.search(
        index=alias,
        query={"multi_match": {"query": query, "fields": ["anchors_text^2", "text"]}},
    )
    return [hit["_id"] for hit in response["hits"]["hits"]]


def test_sync_is_idempotent_incremental_and_deletes_removed_rows(
    delta_store, embedder, es_settings
):
    es = make_client(es_settings)
    write_rows(delta_store, role_rows([f"answer about topic {i}" for i in range(6)]))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, embedder, batch_size=8)
    first = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (first[ROWS].indexed, first[TURNS].indexed) == (6, 3)
    assert es.count(index=rows_alias(es_settings))["count"] == 6

    again = sync_live(delta_store, es, es_settings, model_id=MODEL)
    assert all(r.skipped and r.indexed == 0 for r in again)

    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r0'")
    write_rows(delta_store, role_rows(["a changed answer", "a brand new answer"], start=5))
    embed_role_rows(delta_store, embedder, batch_size=8)
    third = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (third[ROWS].indexed, third[ROWS].deleted, third[ROWS].full) == (2, 1, False)
    assert third[TURNS].skipped
    assert es.count(index=rows_alias(es_settings))["count"] == 6
    assert bm25(es, rows_alias(es_settings), "brand new") == ["c1-r6"]
    assert all(
        c.ok for c in count_mismatches(delta_store, es, es_settings.elasticsearch.index_prefix)
    )


def test_row_documents_carry_vectors_stems_and_trigrams(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    write_rows(
        delta_store,
        role_rows(["Fixed the timezone conversion in openpyxl"], anchors=["openpyxl timezone"]),
    )
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    doc = es.get(index=rows_alias(es_settings), id="c1-r0")["_source"]
    assert has_vector(es, rows_alias(es_settings), "c1-r0") and doc["embedding_status"] == "ok"
    assert "convers" in doc["stems"].split() and "openpyxl" in doc["stems"].split()
    assert "_op" in doc["trigrams"].split()
    assert "derived_at" not in doc
    hits = es.search(
        index=rows_alias(es_settings),
        knn={
            "field": "embedding",
            "query_vector": embedder.encode(["spreadsheet dates"])[0].tolist(),
            "k": 1,
            "num_candidates": 10,
        },
    )["hits"]["hits"]
    assert hits[0]["_id"] == "c1-r0"


def test_turn_documents_hold_payload_catalog_and_title(delta_store, es_settings):
    es = make_client(es_settings)
    turn_tables(delta_store, 2)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    doc = es.get(
        index=alias_name(es_settings.elasticsearch.index_prefix, TURNS),
        id=turn_doc_id("c1", "turn1"),
    )
    source = doc["_source"]
    assert source["payload"]["blocks"][1] == {"type": "assistant.completion", "text": "answer 1"}
    assert (source["ordinal"], source["title"], source["first_user_text"]) == (
        2,
        "Spreadsheet trouble",
        "question 1",
    )


def test_model_failure_rows_indexed_without_vectors_and_found_by_bm25(
    delta_store, es_settings, tmp_path
):
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["ValueError: cannot convert naive datetime", "other words"]))
    broken = SentenceTransformerEmbedder(model_name=str(tmp_path / "missing-model"), model_id=MODEL)
    assert embed_role_rows(delta_store, broken, batch_size=8).pending == 2
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    alias = rows_alias(es_settings)
    assert es.count(index=alias, query={"exists": {"field": "embedding"}})["count"] == 0
    assert es.get(index=alias, id="c1-r0")["_source"]["embedding_status"] == "pending"
    assert bm25(es, alias, "naive datetime")[0] == "c1-r0"


def test_rows_that_later_embed_get_their_vector(delta_store, embedder, es_settings, tmp_path):
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["late vector"]))
    broken = SentenceTransformerEmbedder(model_name=str(tmp_path / "nope"), model_id=MODEL)
    embed_role_rows(delta_store, broken, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    embed_role_rows(delta_store, embedder, batch_size=8)
    report = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert report.indexed == 1
    assert has_vector(es, rows_alias(es_settings), "c1-r0")


def test_empty_long_and_control_character_texts(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    long_text = " ".join(["filler"] * 3000) + " zanzibarquux"
    write_rows(delta_store, role_rows(["   ", long_text, "bell \x07 null \x00 esc \x1b[0m tail"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    alias = rows_alias(es_settings)
    assert not has_vector(es, alias, "c1-r0")
    assert es.get(index=alias, id="c1-r0")["_source"]["embedding_status"] == "skipped"
    assert bm25(es, alias, "zanzibarquux") == ["c1-r1"]
    assert has_vector(es, alias, "c1-r1")
    assert es.get(index=alias, id="c1-r2")["_source"]["text"] == "bell   null   esc  [0m tail"
    assert bm25(es, alias, "tail") == ["c1-r2"]
    status = {s.kind: s for s in all_status(es, es_settings.elasticsearch.index_prefix)}[ROWS]
    assert (status.with_vector, status.embeddable, status.coverage_pct) == (2, 2, 100.0)


def test_rejected_documents_are_recorded_and_the_sync_goes_on(delta_store, embedder, es_settings):
    """A wrong-dims vector in the cache makes the real node reject that one document (issue 12:
    recorded in index_failures, the others indexed, the state advanced)."""
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["good row", "corrupted row", "another good row"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    bad_hash = delta_store.read(ROLE_ROWS).filter(pl.col("row_id") == "c1-r1")["text_hash"][0]
    delta_store.delete(EMBEDDINGS, f"text_hash = '{bad_hash}'")
    delta_store.append(
        EMBEDDINGS,
        delta_store.read(EMBEDDINGS)
        .head(1)
        .with_columns(
            pl.lit(bad_hash).alias("text_hash"),
            pl.lit([0.1, 0.2, 0.3]).cast(pl.List(pl.Float32)).alias("vector"),
        ),
        EMBEDDINGS_SCHEMA,
    )
    report = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert (report.indexed, report.rejected) == (2, 1)
    failure = delta_store.read(INDEX_FAILURES).row(0, named=True)
    assert (failure["kind"], failure["doc_id"], failure["status"]) == (ROWS, "c1-r1", 400)
    assert "different number of dimensions" in failure["error"]
    assert es.count(index=rows_alias(es_settings))["count"] == 2
    again = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert again.skipped  # the state advanced past the rejected document

    corrected = role_rows(["corrected row"], start=1)  # a new event re-derived the row
    write_rows(delta_store, corrected)
    embed_role_rows(delta_store, embedder, batch_size=8)  # its text changed: a new vector
    fixed = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert (fixed.indexed, fixed.rejected) == (1, 0)
    assert delta_store.read(INDEX_FAILURES).is_empty()
    assert es.count(index=rows_alias(es_settings))["count"] == 3


def test_elasticsearch_down_fails_clearly_and_next_run_catches_up(
    delta_store, embedder, es_settings
):
    write_rows(delta_store, role_rows(["row one", "row two"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    down = es_settings.replace(elasticsearch={"url": "http://127.0.0.1:9"})
    with pytest.raises(ElasticsearchUnavailable, match="127.0.0.1:9 is unreachable"):
        sync_live(delta_store, make_client(down), down, model_id=MODEL)
    # issue 41 finding 13: a reindex names the outage the same way, not in the client's words
    with pytest.raises(ElasticsearchUnavailable, match="^reindex: Elasticsearch at .*:9 is unr"):
        reindex(delta_store, make_client(down), down, embedder)
    es = make_client(es_settings)
    report = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert report.indexed == 2


def test_state_lost_or_vacuumed_falls_back_to_a_full_sync(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    write_rows(delta_store, role_rows(["keep a", "keep b", "stale c"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r2'")
    delta_store.delete("index_state", "kind = 'rows'")
    report = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}[ROWS]
    assert (report.full, report.indexed, report.deleted) == (True, 2, 1)
    assert es.count(index=rows_alias(es_settings))["count"] == 2


def test_expired_documents_are_reported(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    write_rows(
        delta_store, role_rows(["fresh"]).vstack(role_rows(["old"], start=1, expires_in_days=-1))
    )
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    assert expired_ids(es, rows_alias(es_settings)) == (1, ["c1-r1"])
